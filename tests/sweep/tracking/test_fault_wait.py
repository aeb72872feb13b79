"""The pause after an infrastructure fault ends when the tracking server that went away answers
again, and only then: a server that answered all along, or a store that is no server, keeps the
whole pause (the retries keep their spacing). A fake clock counts the seconds slept."""

import pytest

from sweep.tracking import faults


class Clock:
    def __init__(self):
        self.now = 0.0
        self.slept = []

    def monotonic(self):
        return self.now

    def sleep(self, s):
        self.slept.append(s)
        self.now += s


@pytest.fixture
def clock(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(faults, "time", clock)
    return clock


def answering(monkeypatch, answers):
    tried = []

    def probe(host, port):
        tried.append((host, port))
        return answers[min(len(tried) - 1, len(answers) - 1)]

    monkeypatch.setattr(faults, "_answers", probe)
    return tried


def test_the_pause_ends_when_the_server_answers_again(clock, monkeypatch):
    tried = answering(monkeypatch, [False, False, False, True])
    faults.wait_for_server(20.0, "http://alice:pw@127.0.0.1:5123")
    assert tried == [("127.0.0.1", 5123)] * 4
    assert clock.now == pytest.approx(3 * faults.BACK_POLL_S)  # not the 20 s pause


def test_a_server_that_answered_all_along_keeps_the_whole_pause(clock, monkeypatch):
    answering(monkeypatch, [True])
    faults.wait_for_server(5.0, "https://mlflow.example.org")
    assert clock.now == pytest.approx(5.0)


def test_a_store_that_is_no_server_sleeps_the_pause_once(clock, monkeypatch):
    tried = answering(monkeypatch, [True])
    faults.wait_for_server(5.0, "sqlite:////runs/x/mlflow.db")
    assert tried == [] and clock.slept == [5.0]


def test_a_server_still_down_at_the_end_keeps_the_whole_pause(clock, monkeypatch):
    answering(monkeypatch, [False])
    faults.wait_for_server(3.0, "http://127.0.0.1:5123")
    assert clock.now == pytest.approx(3.0)
