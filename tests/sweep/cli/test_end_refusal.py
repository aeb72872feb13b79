"""The program's refusal ends the process without the interpreter's teardown when nothing waits
for it (`sweep.cli.end_refusal`), and as usual when an exit handler, another thread, a profiler,
a ``python -i`` prompt or a caller of `sweep.cli.main` does."""

import pstats
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from testsupport import tiny_spec

import sweep.cli

ROOT = Path(__file__).resolve().parents[3]

#: Runs ``sweep ARGS...`` as the ``sweep`` script does; an object of ``__main__`` says when the
#: interpreter's teardown frees it. ``HANDLER`` registers an exit handler first.
_PROGRAM = """
import atexit, sys
class Teardown:
    def __del__(self):
        sys.stderr.write("torn down\\n")
witness = Teardown()
if HANDLER:
    atexit.register(lambda: sys.stderr.write("exit handler\\n"))
sys.argv = ["sweep", *sys.argv[1:]]
from sweep.cli import program
program()
"""


def _run(tmp_path, handler, *args):
    return subprocess.run([sys.executable, "-c", f"HANDLER = {handler}\n{_PROGRAM}", *args],
                          capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.fixture
def bad_spec(tmp_path):
    path = tmp_path / "bad.yaml"
    spec = tiny_spec("refused")
    path.write_text(yaml.safe_dump({**spec, "search": {**spec["search"], "sampler": "anneal"}}))
    return path


def test_a_refusal_ends_without_the_teardown_and_says_all_it_had_to(tmp_path, bad_spec):
    proc = _run(tmp_path, False, "validate", bad_spec)
    assert proc.returncode == 2
    assert proc.stderr == (f"error: invalid study spec {bad_spec}:\n  search.sampler: Input "
                           "should be 'tpe', 'gp', 'cmaes', 'random', 'grid' or 'nsga2', got "
                           "'anneal'\n")
    assert proc.stdout == ""


def test_with_an_exit_handler_a_refusal_ends_as_usual(tmp_path, bad_spec):
    proc = _run(tmp_path, True, "validate", bad_spec)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: invalid study spec")
    assert proc.stderr.endswith("'anneal'\nexit handler\ntorn down\n")


@pytest.mark.parametrize("closed", ["stdout", "stderr", "both"])
def test_a_refusal_with_a_standard_stream_closed_still_exits_2(tmp_path, bad_spec, closed):
    """Started with a descriptor closed, Python's stream is None: nothing is written to it."""
    shut = {"stdout": ">&-", "stderr": "2>&-", "both": ">&- 2>&-"}[closed]
    program = f"HANDLER = False\n{_PROGRAM}"
    proc = subprocess.run(f'"{sys.executable}" -c "$PROGRAM" validate "{bad_spec}" {shut}',
                          shell=True, capture_output=True, text=True, cwd=tmp_path, timeout=120,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                               "PROGRAM": program})
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.startswith("error: invalid study spec") == (closed == "stdout")


def _python(tmp_path, *args, **kwargs):
    return subprocess.run([sys.executable, *map(str, args)], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, **kwargs,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


def test_a_refusal_under_a_profiler_leaves_the_profile(tmp_path, bad_spec):
    """``python -m cProfile -o FILE`` writes FILE once the program has returned to it."""
    profile = tmp_path / "refusal.prof"
    proc = _python(tmp_path, "-m", "cProfile", "-o", profile, "-m", "sweep.cli", "validate",
                   bad_spec)
    assert proc.stderr.startswith("error: invalid study spec"), proc.stderr
    stats = pstats.Stats(str(profile))
    assert any(name == "main" and path.endswith("sweep/cli/__init__.py")
               for path, _, name in stats.stats)  # type: ignore[attr-defined]


_CALLER = """
import sys
from sweep.cli import main
def validate(path):
    sys.argv = ["sweep", "validate", path]
    try:
        main()
    finally:
        sys.stderr.write("the caller's finally\\n")
validate(sys.argv[1])
"""


def test_a_caller_of_main_gets_the_refusal_back(tmp_path, bad_spec):
    proc = _python(tmp_path, "-c", _CALLER, bad_spec)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: invalid study spec"), proc.stderr
    assert proc.stderr.endswith("'anneal'\nthe caller's finally\n"), proc.stderr


def test_python_i_reaches_its_prompt_after_a_refusal(tmp_path, bad_spec):
    proc = _python(tmp_path, "-i", "-m", "sweep.cli", "validate", bad_spec,
                   input="print('inspected')\n")
    assert proc.stdout == "inspected\n", proc.stderr


def test_a_command_that_does_not_refuse_ends_as_usual(tmp_path):
    helped = _run(tmp_path, False, "validate", "--help")
    assert helped.returncode == 0 and helped.stderr == "torn down\n"


@pytest.fixture
def ended(monkeypatch):
    """`end_refusal`'s ``os._exit`` calls, none made; no exit handler registered."""
    calls = []
    monkeypatch.setattr(sweep.cli.os, "_exit", calls.append)
    monkeypatch.setattr(sweep.cli, "pending_exit_handlers", lambda: 0)
    monkeypatch.setattr(sweep.cli.threading, "active_count", lambda: 1)
    return calls


def test_the_exit_handlers_are_counted():
    import atexit

    from sweep.adapters.interpreter import pending_exit_handlers

    before = pending_exit_handlers()
    handler = atexit.register(lambda: None)
    try:
        assert pending_exit_handlers() == before + 1
    finally:
        atexit.unregister(handler)


def test_end_refusal_exits_2_when_nothing_waits(ended):
    sweep.cli.end_refusal()
    assert ended == [2]


def test_end_refusal_returns_with_an_exit_handler(ended, monkeypatch):
    monkeypatch.setattr(sweep.cli, "pending_exit_handlers", lambda: 1)
    sweep.cli.end_refusal()
    assert ended == []


def test_end_refusal_returns_while_another_thread_runs(ended, monkeypatch):
    others = len(threading.enumerate()) - 1  # threads that earlier tests left running
    monkeypatch.setattr(threading, "active_count", lambda: len(threading.enumerate()) - others)
    stop = threading.Event()
    thread = threading.Thread(target=stop.wait)
    thread.start()
    try:
        sweep.cli.end_refusal()
    finally:
        stop.set()
        thread.join()
    assert ended == []


def test_end_refusal_returns_when_a_stream_cannot_be_flushed(ended, monkeypatch):
    class Closed:
        def flush(self):
            raise ValueError("I/O operation on closed file.")

    monkeypatch.setattr(sys, "stdout", Closed())
    sweep.cli.end_refusal()
    assert ended == []
