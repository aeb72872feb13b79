"""Faults injected for real (SIGKILL, SIGINT, SIGTERM) into `sweep run`, then counted exactly.

Each test runs the CLI in a subprocess on a tiny study (1 layer, d_model 32-64, seq_len 32,
5e4 tokens a trial, a random sampler), injects the fault while a trial trains, and checks the
Optuna storage and the MLflow store before and after the rerun that resumes it.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from optuna.trial import TrialState as OptunaState
from testsupport import fault_study_spec, journal_trials, start_study

from sweep.folder import StudyFolder
from sweep.schema import (
    ATTR_OWNER,
    ATTR_PROGRESS,
    ATTR_RETRY_OF,
    ATTR_STATE,
    TAG_FAIL_REASON,
    TAG_STATE,
    TrialState,
)
from sweep.tracking import find_study, read_trials
from sweep.tracking.buffer import buffered_runs
from sweep.tracking.owner import owner_pid

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]
NAME = "faults"


@pytest.fixture(autouse=True)
def store(tmp_path, new_store):
    """Each study's MLflow store, new (a server test's study logs to its server instead)."""
    new_store(tmp_path / "out")


def write_spec(tmp_path, n_trials, parallel=1):
    """The fault study of ``n_trials``: as few as the fault and the resume after it need."""
    return fault_study_spec(tmp_path, NAME, n_trials=n_trials, search={"parallel": parallel})


def start(tmp_path, spec):
    return start_study(tmp_path, spec)


def optuna_trials(tmp_path):
    return journal_trials(tmp_path / "out", NAME)


def mlflow_runs(tmp_path):
    uri = f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}"
    experiment_id, parent = find_study(uri, NAME)
    return uri, parent, read_trials(uri, experiment_id, parent)


def finished(t):
    return t.state in (OptunaState.COMPLETE, OptunaState.PRUNED) or (
        t.state == OptunaState.FAIL and t.user_attrs.get(ATTR_STATE) != "INTERRUPTED")


def wait_mid_trial(tmp_path, proc, *, n_finished, timeout=240):
    """Until ``n_finished`` trials are done and another one has reported an evaluation."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        trials = optuna_trials(tmp_path)
        running = [t for t in trials if t.state == OptunaState.RUNNING
                   and ATTR_PROGRESS in t.user_attrs]
        if sum(finished(t) for t in trials) >= n_finished and running:
            return trials
        time.sleep(0.1)
    raise AssertionError("the study did not reach the point of the fault in time")


def by_state(trials):
    out = {}
    for t in trials:
        key = "INTERRUPTED" if t.user_attrs.get(ATTR_STATE) == "INTERRUPTED" else t.state.name
        out[key] = out.get(key, 0) + 1
    return out


def run_states(runs):
    out = {}
    for r in runs:
        out[str(r["state"])] = out.get(str(r["state"]), 0) + 1
    return out


def resume(tmp_path, spec):
    proc = start(tmp_path, spec)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    return err


def check_resumed(tmp_path, before, n_trials, n_interrupted):
    """The study after the resume: exact counts, finished trials untouched, retries exact."""
    trials = optuna_trials(tmp_path)
    assert sum(finished(t) for t in trials) == n_trials
    assert by_state(trials).get("INTERRUPTED", 0) == n_interrupted
    assert not [t for t in trials if t.state in (OptunaState.RUNNING, OptunaState.WAITING)]
    numbers = [t.number for t in trials]
    assert len(numbers) == len(set(numbers))
    # finished trials of the first run kept their parameters and values
    now = {t.number: t for t in trials}
    for t in before:
        if finished(t):
            assert (now[t.number].params, now[t.number].values) == (t.params, t.values)
    # each interrupted trial retried once, with its parameters, and finished
    interrupted = [t for t in trials if t.user_attrs.get(ATTR_STATE) == "INTERRUPTED"]
    retries = [t for t in trials if ATTR_RETRY_OF in t.user_attrs]
    assert sorted(t.user_attrs[ATTR_RETRY_OF] for t in retries) == sorted(
        t.number for t in interrupted)
    for r in retries:
        assert r.params == now[r.user_attrs[ATTR_RETRY_OF]].params and finished(r)
    # MLflow: one run per trial number, the interrupted ones KILLED, none RUNNING
    uri, parent, runs = mlflow_runs(tmp_path)
    states = run_states(runs)
    # What to look at when these fail: every run of the parent, and every trial of Optuna.
    seen = (sorted((r["trial"], str(r["state"]), r["retry_of"]) for r in runs),
            sorted((t.number, t.state.name, t.user_attrs.get(ATTR_STATE)) for t in trials))
    assert states.get("INTERRUPTED", 0) == n_interrupted and "RUNNING" not in states, seen
    assert sum(v for k, v in states.items() if k != "INTERRUPTED") == n_trials, seen
    assert sorted(r["trial"] for r in runs) == sorted(numbers), seen
    assert [r["retry_of"] for r in runs if r["retry_of"] is not None] == sorted(
        t.number for t in interrupted)
    client = MlflowClient(uri)
    assert len(client.search_runs([client.get_experiment_by_name(NAME).experiment_id],
                                  "tags.`sweep.kind` = 'study'")) == 1
    tags = client.get_run(parent).data.tags
    assert tags[TAG_STATE] == TrialState.COMPLETE and TAG_FAIL_REASON not in tags
    return trials, runs


def test_driver_killed_mid_trial_then_resumed(tmp_path):
    spec = write_spec(tmp_path, n_trials=4)  # 2 finished, 1 killed, 1 new after the resume
    proc = start(tmp_path, spec)
    wait_mid_trial(tmp_path, proc, n_finished=2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = optuna_trials(tmp_path)
    n_done = sum(finished(t) for t in before)
    assert by_state(before).get("RUNNING") == 1
    _, _, runs = mlflow_runs(tmp_path)
    assert run_states(runs).get("RUNNING") == 1
    assert sum(1 for r in runs if r["state"].finished) == n_done

    resume(tmp_path, spec)
    trials, _ = check_resumed(tmp_path, before, 4, 1)
    # The resumed sampler does not replay the first run's draws (random sampler, seed 0)
    new = [t for t in trials if t.number >= len(before) and ATTR_RETRY_OF not in t.user_attrs]
    assert new and all(t.params != b.params for t in new for b in before)


def test_a_killed_trial_is_retried_from_its_checkpoint(tmp_path):
    from sweep.data import load_corpus
    from sweep.space.sampling import configs_from_params
    from sweep.spec import load_spec
    from sweep.train.checkpoint import read_checkpoint
    from sweep.train.trainer import Trainer

    spec = write_spec(tmp_path, n_trials=3)
    data = yaml.safe_load(spec.read_text())
    data["search"]["checkpoint_interval"] = 8192
    spec.write_text(yaml.safe_dump(data))
    proc = start(tmp_path, spec)
    ckpt = tmp_path / "out" / "checkpoints" / "trial-1" / "latest.pt"
    deadline = time.monotonic() + 240
    while not ckpt.is_file() and time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    saved = read_checkpoint(ckpt)["counters"]["tokens_seen"]
    assert saved % 8192 == 0 and 8192 <= saved < 50000
    before = optuna_trials(tmp_path)
    assert by_state(before) == {"COMPLETE": 1, "RUNNING": 1}

    resume(tmp_path, spec)
    trials, runs = check_resumed(tmp_path, before, 3, 1)
    retry = next(r for r in runs if r["retry_of"] == 1)
    client = MlflowClient(mlflow_runs(tmp_path)[0])
    got = client.get_run(retry["run_id"])
    assert got.data.metrics["resumed_tokens"] == saved
    assert got.data.tags["sweep.resumed_from"] == "trial-1"
    # The retry's losses are those of the same trial trained once from step 0, in this process.
    study_spec = load_spec(spec)
    model, train = configs_from_params(study_spec, next(t for t in trials if t.number == 1).params)
    corpus = load_corpus(study_spec.data.uri, tmp_path / "out" / "data",
                         vocab_size=study_spec.data.vocab_size)
    alone = Trainer(model, train, corpus, device="cpu").train()
    assert got.data.metrics["final_val_loss"] == alone.final_val_loss
    curve = [(m.step, m.value) for m in client.get_metric_history(retry["run_id"], "val_loss")]
    assert sorted(curve) == [(h["tokens"], h["val_loss"]) for h in alone.history]
    assert got.data.metrics["tokens"] == alone.tokens
    assert list((tmp_path / "out" / "checkpoints").iterdir()) == []  # every trial ended


def test_parallel_driver_killed_takes_its_workers_along(tmp_path):
    spec = write_spec(tmp_path, n_trials=4, parallel=2)
    proc = start(tmp_path, spec)
    trials = wait_mid_trial(tmp_path, proc, n_finished=1)
    workers = {owner_pid(t.user_attrs[ATTR_OWNER]) for t in trials if ATTR_OWNER in t.user_attrs}
    assert len(workers) == 2 and proc.pid not in workers
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(Path(f"/proc/{p}").exists() for p in workers):
        time.sleep(0.1)
    assert not any(Path(f"/proc/{p}").exists() for p in workers), "orphaned workers"
    before = optuna_trials(tmp_path)
    # A worker killed after its trial's run ended but before Optuna heard of it leaves a RUNNING
    # trial the resume tells from the run (sweep.executors.optuna.recovery): not interrupted.
    ended = {r["trial"] for r in mlflow_runs(tmp_path)[2] if r["state"].finished}
    running = [t.number for t in before if t.state == OptunaState.RUNNING]
    interrupted = [n for n in running if n not in ended]
    assert interrupted
    resume(tmp_path, spec)
    check_resumed(tmp_path, before, 4, len(interrupted))


def test_a_killed_worker_is_replaced_and_its_trial_retried(tmp_path):
    spec = write_spec(tmp_path, n_trials=4, parallel=2)
    proc = start(tmp_path, spec)
    trials = wait_mid_trial(tmp_path, proc, n_finished=1)
    victim = next(t for t in trials if t.state == OptunaState.RUNNING
                  and ATTR_PROGRESS in t.user_attrs)
    os.kill(owner_pid(victim.user_attrs[ATTR_OWNER]), signal.SIGKILL)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "Traceback" not in err
    check_resumed(tmp_path, [], 4, 1)
    assert next(t for t in optuna_trials(tmp_path) if t.number == victim.number).user_attrs[
        ATTR_STATE] == "INTERRUPTED"


@pytest.mark.parametrize(("sig", "code", "times"), [
    (signal.SIGINT, 130, 1), (signal.SIGTERM, 143, 1),
    (signal.SIGINT, 130, 3),  # an impatient user: more Ctrl-C while the stop is recorded
])
def test_interrupt_stops_cleanly_and_resumes(tmp_path, sig, code, times):
    spec = write_spec(tmp_path, n_trials=3)  # 1 finished, 1 stopped, 1 new after the resume
    proc = start(tmp_path, spec)
    wait_mid_trial(tmp_path, proc, n_finished=1)
    proc.send_signal(sig)
    for _ in range(times - 1):
        time.sleep(0.3)
        if proc.poll() is None:
            proc.send_signal(sig)
    out, err = proc.communicate(timeout=180)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("stopped:"), err
    assert f"interrupted by {sig.name}" in lines[0] and "run the same command again" in lines[0]
    before = optuna_trials(tmp_path)
    states = by_state(before)
    assert states.get("INTERRUPTED") == 1 and "RUNNING" not in states
    uri, parent, runs = mlflow_runs(tmp_path)
    assert run_states(runs).get("INTERRUPTED") == 1 and "RUNNING" not in run_states(runs)
    run = MlflowClient(uri).get_run(parent)
    assert run.info.status == "KILLED" and run.data.tags[TAG_STATE] == "INTERRUPTED"
    assert sig.name in run.data.tags[TAG_FAIL_REASON]

    resume(tmp_path, spec)
    check_resumed(tmp_path, before, 3, 1)


# ------------------------------------------------------------ the MLflow server goes away
def server_study(tmp_path, url, fault_wait_s):
    # 2 finished, 1 trained through the outage, 1 whose run the outage stopped
    path = write_spec(tmp_path, n_trials=4)
    data = yaml.safe_load(path.read_text())
    data["tracking"] = {"uri": url}
    data["search"]["fault_wait_s"] = fault_wait_s
    path.write_text(yaml.safe_dump(data))
    return path


def server_runs(url):
    client = MlflowClient(url)
    experiment_id, parent = find_study(url, NAME)
    return client, parent, read_trials(url, experiment_id, parent)


def start_fast_failing(tmp_path, spec):
    """`sweep run` with MLflow's HTTP retries off, so a stopped server shows in seconds."""
    os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] = "0"
    os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] = "5"
    try:
        return start(tmp_path, spec)
    finally:
        del os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"], os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"]


def check_after_fault(url, tmp_path, n_trials, buffered):
    """After the fault and the resume: exact counts; the trial that trained through the outage
    (``buffered``) COMPLETE with every evaluation; the one whose run the outage stopped
    interrupted and retried."""
    trials = optuna_trials(tmp_path)
    interrupted = [t for t in trials if t.user_attrs.get(ATTR_STATE) == "INTERRUPTED"]
    assert sum(finished(t) for t in trials) == n_trials and len(interrupted) == 1
    assert not [t for t in trials if t.state in (OptunaState.RUNNING, OptunaState.WAITING)]
    # every interrupted trial was retried once with its parameters; none counted as failed
    retries = {t.user_attrs[ATTR_RETRY_OF]: t for t in trials if ATTR_RETRY_OF in t.user_attrs}
    assert sorted(retries) == sorted(t.number for t in interrupted)
    assert all(retries[t.number].params == t.params for t in interrupted)
    assert not [t for t in trials if t.user_attrs.get(ATTR_STATE) == "FAILED"]
    client, parent, runs = server_runs(url)
    states = run_states(runs)
    # the interrupted trial's run could not be created then: reconcile created it, INTERRUPTED
    # with its params; every trial number has exactly one run
    assert states == {"COMPLETE": n_trials, "INTERRUPTED": 1}
    assert sorted(r["trial"] for r in runs) == sorted(t.number for t in trials)
    (lost,) = [r for r in runs if str(r["state"]) == "INTERRUPTED"]
    assert lost["trial"] == interrupted[0].number
    assert lost["params"]["train.lr"] == interrupted[0].params["train.lr"]
    by_number = {r["trial"]: r for r in runs if str(r["state"]) != "INTERRUPTED"}
    evals = {n: len(client.get_metric_history(r["run_id"], "val_loss"))
             for n, r in by_number.items()}
    assert evals[buffered] == evals[0] > 2  # the buffered trial lost no evaluation
    assert by_number[buffered]["metrics"]["best_val_loss"] == next(
        t.value for t in trials if t.number == buffered)
    assert buffered_runs(StudyFolder(tmp_path / "out").buffer) == []
    tags = client.get_run(parent).data.tags
    assert tags[TAG_STATE] == TrialState.COMPLETE and TAG_FAIL_REASON not in tags
    return interrupted


def wait_for_outage(tmp_path, proc, timeout=180):
    """Until the trial that trained through the outage kept its run in the study folder and
    the next trial, whose run could not be created, is interrupted; returns the former's number.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        trials = optuna_trials(tmp_path)
        kept = buffered_runs(StudyFolder(tmp_path / "out").buffer)
        if kept and [t for t in trials if t.user_attrs.get(ATTR_STATE) == "INTERRUPTED"]:
            assert len(kept) == 1
            number = kept[0][1]["trial"]
            # it trained to its end while the server was down, and Optuna has its result
            assert next(t for t in trials if t.number == number).state == OptunaState.COMPLETE
            return number
        time.sleep(0.2)
    raise AssertionError("the outage did not show in time")


@pytest.mark.server
def test_tracking_server_down_for_a_while_keeps_the_trial_and_pauses_the_study(
        tmp_path, stoppable_server):
    server = stoppable_server
    spec = server_study(tmp_path, server.url, fault_wait_s=300)
    proc = start_fast_failing(tmp_path, spec)
    wait_mid_trial(tmp_path, proc, n_finished=2)
    server.stop()
    buffered = wait_for_outage(tmp_path, proc)
    time.sleep(6)  # paused, not stopped, and no trial burnt meanwhile
    assert proc.poll() is None
    assert sum(finished(t) for t in optuna_trials(tmp_path)) == 3
    server.start()
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert "retrying in" in err and "Traceback" not in err
    check_after_fault(server.url, tmp_path, 4, buffered)


@pytest.mark.server
def test_tracking_server_down_too_long_stops_with_one_line_then_syncs_and_resumes(
        tmp_path, stoppable_server):
    server = stoppable_server
    spec = server_study(tmp_path, server.url, fault_wait_s=3)  # one retry, 3 s after the fault
    proc = start_fast_failing(tmp_path, spec)
    wait_mid_trial(tmp_path, proc, n_finished=2)
    server.stop()
    out, err = proc.communicate(timeout=300)
    assert proc.returncode == 3, err
    assert "Traceback" not in err
    stopped = [line for line in err.splitlines() if line.startswith("stopped:")]
    assert len(stopped) == 1 and "the MLflow tracking server does not answer" in stopped[0]
    assert "run the same command again to resume" in stopped[0]
    assert "1 trial run(s) kept in" in " ".join(err.split())
    kept = buffered_runs(StudyFolder(tmp_path / "out").buffer)
    assert len(kept) == 1
    buffered = kept[0][1]["trial"]
    trials = optuna_trials(tmp_path)
    assert by_state(trials) == {"COMPLETE": 3, "INTERRUPTED": 1}
    # `sweep sync` sends the kept run while nothing else runs; a second one has nothing to send
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    sync = [sys.executable, "-m", "sweep.cli", "sync", str(tmp_path / "out")]
    down = subprocess.run(sync, env=env, capture_output=True, text=True, timeout=60)
    assert down.returncode == 3 and "nothing sent, 1 trial run(s) kept" in " ".join(
        down.stderr.split())
    server.start()
    up = subprocess.run(sync, env=env, capture_output=True, text=True, timeout=120)
    assert up.returncode == 0, up.stderr
    assert "of 1 trial run(s)" in up.stdout
    client, parent, runs = server_runs(server.url)
    assert {r["trial"]: str(r["state"]) for r in runs}[buffered] == "COMPLETE"
    again = subprocess.run(sync, env=env, capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "nothing to send" in again.stdout
    resume(tmp_path, spec)
    check_after_fault(server.url, tmp_path, 4, buffered)
