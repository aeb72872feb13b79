"""A Ray study whose driver is killed or interrupted, run again: nothing finished is trained twice.

SIGKILL leaves the running trials RUNNING (the rerun marks them INTERRUPTED); SIGINT and SIGTERM
end them INTERRUPTED and the parent run KILLED at once, with one line on stderr and exit code
130 or 143. Either way the rerun trains each interrupted trial's params again first (tag
``sweep.retry_of``) and ends with exactly ``n_trials`` finished trials under the same parent.

The driver (`sweep run`) runs in its own session and process group and starts its own local
Ray (no ``RAY_ADDRESS``). Ray's GCS and raylet stay in the driver's group, but each Ray worker
makes itself a group of its own (still in the driver's session), and a worker outlives the
raylet for a moment: long enough to open a trial's MLflow run. So the driver is killed with
SIGKILL to its group and to every process of its session, and the test checks none is left
before it reads the store and reruns; other Ray instances on the machine are not touched.
"""

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_TRIALS = 4  # two rounds of two: the faults land in the second, the rerun has trials left
TOKENS = 36864  # a trial's budget: long enough to be caught mid-trial on a quiet machine
FINISHED = ("COMPLETE", "PRUNED", "FAILED", "INFEASIBLE", "DIVERGED")
REPO = Path(__file__).resolve().parents[3]


def spec_file(tmp_path):
    data = {
        "name": "ray-resume",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000",
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": {"choice": [16, 32]},
                  "n_heads": 2, "n_layers": 1},
        "train": {"tokens": TOKENS, "batch_size": 4, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 1024},
        "search": {"executor": "ray", "sampler": "random", "scheduler": "none",
                   "n_trials": N_TRIALS, "parallel": 2},
        "resources": {"cpus_per_trial": 1},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def driver(spec, out, log, err=subprocess.STDOUT, *extra):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-m", "sweep.cli", "run", str(spec), "--out",
                             str(out), *extra], cwd=REPO, env=env, stdout=log, stderr=err,
                            start_new_session=True)


def trial_runs(out):
    uri = f"sqlite:///{out / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("ray-resume")
    if experiment is None:
        return [], []
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("sweep.kind") == "study"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return parents, children


def session_members(sid):
    """Live processes of session ``sid`` (zombies left out)."""
    members = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # state, ppid, pgrp, session, ...
        if fields[0] != "Z" and int(fields[3]) == sid:
            members.append(int(entry.name))
    return members


def kill_session(proc):
    """SIGKILL the driver's group and every process of its session until none is left."""
    with contextlib.suppress(ProcessLookupError):  # the group may have gone already
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while (members := session_members(proc.pid)) and time.monotonic() < deadline:
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    assert not session_members(proc.pid), "processes of the killed driver are still alive"


def kill_leftovers(sid):
    """SIGKILL what is left of session ``sid`` (cleanup after a test that failed)."""
    deadline = time.monotonic() + 60
    while (members := session_members(sid)) and time.monotonic() < deadline:
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)


def config(run):
    return tuple(sorted((k, v) for k, v in run.data.params.items()))


def training_early(out, run):
    """Whether ``run`` has logged an evaluation and has at least half its budget to go."""
    if run.data.tags.get("sweep.state") != "RUNNING" or "val_loss" not in run.data.metrics:
        return False
    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_loss")]
    return bool(steps) and max(steps) <= TOKENS // 2


def wait_mid_trial(proc, out, log, *, n_finished):
    """Until ``n_finished`` trials are done and another one is training, early in its budget."""
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:
        assert proc.poll() is None, Path(log).read_text()[-3000:]
        try:
            _, runs = trial_runs(out)
        except Exception:  # the store is being created
            runs = []
        states = [r.data.tags.get("sweep.state") for r in runs]
        if sum(s in FINISHED for s in states) >= n_finished and any(
                training_early(out, r) for r in runs):
            return runs
        time.sleep(0.5)
    raise AssertionError(f"the first run never had {n_finished} trials finished and one training")


def check_resumed(out, parent, before, log):
    """After the rerun: exactly N_TRIALS finished, the interrupted ones retried once each."""
    text = Path(log).read_text()
    parents, after = trial_runs(out)
    states = sorted(r.data.tags["sweep.state"] for r in after)
    print(f"runs before the rerun: {len(before)}, states "
          f"{sorted(r.data.tags['sweep.state'] for r in before)}; after: {len(after)}, {states}")
    assert [p.info.run_id for p in parents] == [parent.info.run_id]  # the same parent run
    assert parents[0].info.status == "FINISHED"
    assert parents[0].data.tags["sweep.state"] == "COMPLETE"
    assert "sweep.fail_reason" not in parents[0].data.tags
    done_before = {r.info.run_id: r for r in before if r.data.tags["sweep.state"] in FINISHED}
    stopped = {r.info.run_id: r for r in before if r.data.tags["sweep.state"] not in FINISHED}
    assert stopped
    # A trial Tune had handed out but not started when the driver died has no run before the
    # rerun; the rerun records it INTERRUPTED (`sweep.executors.ray.runless`) and retries it.
    known = {r.info.run_id for r in before}
    stopped |= {r.info.run_id: r for r in after if r.info.run_id not in known and r.data.tags.get(
        "sweep.fail_reason", "").startswith("interrupted: its driver stopped before its run was")}
    done = [r for r in after if r.data.tags["sweep.state"] in FINISHED]
    assert len(done) == N_TRIALS  # the interrupted trials are not counted
    assert {r.info.run_id for r in after} - {r.info.run_id for r in done} == set(stopped)
    by_id = {r.info.run_id: r for r in after}
    for run_id in stopped:  # INTERRUPTED now, never RUNNING
        assert by_id[run_id].data.tags["sweep.state"] == "INTERRUPTED"
        assert by_id[run_id].info.status == "KILLED"
    configs = [config(r) for r in done]
    assert len(set(configs)) == N_TRIALS  # no finished config was trained again
    numbers = [int(r.data.tags["sweep.trial_number"]) for r in after]
    assert len(set(numbers)) == len(after)
    for run_id, run in done_before.items():  # the first run's results are kept as they were
        assert by_id[run_id].data.metrics == run.data.metrics
        assert by_id[run_id].data.tags["sweep.state"] == run.data.tags["sweep.state"]
    # Each interrupted trial trained again once, with its params, by a new finished trial.
    retries = [r for r in after if "sweep.retry_of" in r.data.tags]
    want = sorted(int(r.data.tags["sweep.trial_number"]) for r in stopped.values()
                  if r.data.params)
    assert want and sorted(int(r.data.tags["sweep.retry_of"]) for r in retries) == want
    by_number = {int(r.data.tags["sweep.trial_number"]): r for r in after}
    for r in retries:
        assert r in done and r.info.run_id not in done_before
        assert config(r) == config(by_number[int(r.data.tags["sweep.retry_of"])])
    (line,) = [ln for ln in text.splitlines() if "ray: resuming ray-resume" in ln]
    assert f"given {len(done_before)} of the {len(done_before)}" in line
    assert f"interrupted trial(s) {', '.join(map(str, want))} again" in line


def test_a_killed_ray_study_resumes_without_training_a_finished_config_again(tmp_path, new_store):
    spec, out = spec_file(tmp_path), tmp_path / "out"
    new_store(out)
    with open(tmp_path / "first.log", "wb") as log:
        proc = driver(spec, out, log)
        try:
            wait_mid_trial(proc, out, tmp_path / "first.log", n_finished=2)
            assert len(session_members(proc.pid)) > 1  # Ray runs in the driver's session
        finally:
            kill_session(proc)

    parents, before = trial_runs(out)
    (parent,) = parents
    done_before = [r for r in before if r.data.tags["sweep.state"] in FINISHED]
    assert 2 <= len(done_before) < N_TRIALS
    assert "RUNNING" in {r.data.tags["sweep.state"] for r in before}
    with open(tmp_path / "second.log", "wb") as log:
        rerun = driver(spec, out, log)
        assert rerun.wait(timeout=900) == 0, (tmp_path / "second.log").read_text()[-3000:]
    check_resumed(out, parent, before, tmp_path / "second.log")


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_an_interrupted_ray_study_stops_cleanly_and_resumes(tmp_path, sig, code, new_store):
    spec, out = spec_file(tmp_path), tmp_path / "out"
    new_store(out)
    with open(tmp_path / "first.out", "wb") as log, open(tmp_path / "first.err", "wb") as err:
        proc = driver(spec, out, log, err, "--quiet")
        try:
            wait_mid_trial(proc, out, tmp_path / "first.err", n_finished=1)
            # What Ray printed when it started (its token-authentication notice) comes before.
            err.flush()
            start = (tmp_path / "first.err").stat().st_size
            os.kill(proc.pid, sig)  # the driver only, as a terminal's Ctrl-C or a kill would
            assert proc.wait(timeout=300) == code, (tmp_path / "first.err").read_text()
            # The driver's Ray (GCS, raylet, workers) goes with it.
            deadline = time.monotonic() + 60
            while session_members(proc.pid) and time.monotonic() < deadline:
                time.sleep(0.2)
            assert not session_members(proc.pid), "processes of the interrupted driver are left"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            kill_leftovers(proc.pid)
    text = (tmp_path / "first.err").read_text()
    assert "Traceback" not in text
    lines = [ln for ln in text.encode()[start:].decode().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("stopped:"), text
    assert f"interrupted by {sig.name}" in lines[0] and "run the same command again" in lines[0]

    parents, before = trial_runs(out)
    (parent,) = parents
    states = [r.data.tags["sweep.state"] for r in before]
    assert "RUNNING" not in states and states.count("INTERRUPTED") >= 1
    assert 1 <= sum(s in FINISHED for s in states) < N_TRIALS
    for r in before:
        assert r.info.status != "RUNNING"
        if r.data.tags["sweep.state"] == "INTERRUPTED":
            assert r.info.status == "KILLED"
            assert sig.name in r.data.tags["sweep.fail_reason"]
    assert parent.info.status == "KILLED" and parent.data.tags["sweep.state"] == "INTERRUPTED"
    assert sig.name in parent.data.tags["sweep.fail_reason"]

    with open(tmp_path / "second.log", "wb") as log:
        rerun = driver(spec, out, log)
        assert rerun.wait(timeout=900) == 0, (tmp_path / "second.log").read_text()[-3000:]
    check_resumed(out, parent, before, tmp_path / "second.log")
