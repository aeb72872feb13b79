"""One driver per study folder (`sweep.study.lock`): real processes, real locks, exact counts."""

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from optuna.trial import TrialState as OptunaState
from testsupport import fault_study_spec, journal_trials, start_study

from sweep.schema import ATTR_PROGRESS, ATTR_STATE
from sweep.study.lock import DriverRunningError, driver_lock
from sweep.tracking import find_study, read_trials

ROOT = Path(__file__).resolve().parents[3]
NAME = "one-driver"
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


def test_a_second_holder_is_refused_with_the_first_ones_pid_host_and_start(tmp_path):
    with driver_lock(tmp_path, NAME):
        with pytest.raises(DriverRunningError) as info:
            with driver_lock(tmp_path, NAME):
                pass
    message = str(info.value)
    assert f"pid {os.getpid()} on host {socket.gethostname()} since " in message
    assert "sweep worker" in message and str(tmp_path / "driver.lock") in message
    with driver_lock(tmp_path, NAME):  # released at the end of the block
        pass


def test_a_holder_killed_with_sigkill_leaves_no_lock_behind(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from sweep.study.lock import driver_lock\n"
         f"with driver_lock(Path({str(tmp_path)!r}), 'x'):\n"
         "    print('held', flush=True); time.sleep(600)"],
        env=ENV, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(DriverRunningError, match=f"pid {holder.pid} on host"):
            with driver_lock(tmp_path, NAME):
                pass
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    with driver_lock(tmp_path, NAME):  # the kernel released the dead holder's flock
        pass


def write_spec(tmp_path, n_trials):
    return fault_study_spec(tmp_path, NAME, n_trials=n_trials)


def start(tmp_path, spec):
    return start_study(tmp_path, spec)


def optuna_trials(tmp_path):
    return journal_trials(tmp_path / "out", NAME)


def race(tmp_path, spec):
    """Two drivers of one folder started at once: (the one that ran, the one refused)."""
    procs = [start(tmp_path, spec), start(tmp_path, spec)]
    results = [(p, *p.communicate(timeout=600)) for p in procs]
    codes = sorted(p.returncode for p, _, _ in results)
    assert codes == [0, 2], [err for _, _, err in results]
    ran = next(r for r in results if r[0].returncode == 0)
    refused = next(r for r in results if r[0].returncode == 2)
    for _, _, err in results:
        assert "Traceback" not in err
    return ran, refused


def check_counts(tmp_path, n_complete, n_interrupted):
    trials = optuna_trials(tmp_path)
    done = [t for t in trials if t.state == OptunaState.COMPLETE]
    interrupted = [t for t in trials if t.user_attrs.get(ATTR_STATE) == "INTERRUPTED"]
    assert (len(done), len(interrupted), len(trials)) == (
        n_complete, n_interrupted, n_complete + n_interrupted)
    numbers = [t.number for t in trials]
    assert sorted(numbers) == list(range(len(trials)))
    uri = f"sqlite:///{tmp_path / 'out' / 'mlflow.db'}"
    runs = read_trials(uri, *find_study(uri, NAME))
    assert sorted(r["trial"] for r in runs) == sorted(numbers)
    states = sorted(str(r["state"]) for r in runs)
    assert states == sorted(["COMPLETE"] * n_complete + ["INTERRUPTED"] * n_interrupted)
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(NAME).experiment_id
    assert len(client.search_runs([experiment], "tags.`sweep.kind` = 'study'")) == 1


@pytest.mark.slow
def test_two_drivers_started_at_once_one_runs_the_other_exits_2_naming_it(tmp_path, new_store):
    new_store(tmp_path / "out")
    spec = write_spec(tmp_path, 4)
    (ran, _, _), (_, out, err) = race(tmp_path, spec)
    assert f"already driven by pid {ran.pid} on host {socket.gethostname()} since " in err
    assert err.count("error:") == 1 and out == ""
    check_counts(tmp_path, 4, 0)


@pytest.mark.slow
def test_a_killed_driver_does_not_block_the_resume_and_two_resumes_race_to_one(tmp_path,
                                                                               new_store):
    new_store(tmp_path / "out")
    spec = write_spec(tmp_path, 3)
    first = start(tmp_path, spec)
    deadline = time.monotonic() + 300
    while not any(t.state == OptunaState.RUNNING and ATTR_PROGRESS in t.user_attrs
                  for t in optuna_trials(tmp_path)):
        assert first.poll() is None and time.monotonic() < deadline, first.communicate()
        time.sleep(0.1)
    first.send_signal(signal.SIGKILL)
    first.wait()
    (ran, _, _), (_, _, err) = race(tmp_path, spec)
    assert f"already driven by pid {ran.pid} on host" in err
    check_counts(tmp_path, 3, 1)
