"""A Ray study whose driver is killed, run again: nothing finished is trained twice.

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

N_TRIALS = 6
FINISHED = ("COMPLETE", "PRUNED", "FAILED", "INFEASIBLE", "DIVERGED")
REPO = Path(__file__).resolve().parents[3]


def spec_file(tmp_path):
    data = {
        "name": "ray-resume",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000",
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": {"choice": [16, 32]},
                  "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 12288, "batch_size": 4, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 1024},
        "search": {"executor": "ray", "sampler": "random", "scheduler": "none",
                   "n_trials": N_TRIALS, "parallel": 2},
        "resources": {"cpus_per_trial": 1},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def driver(spec, out, log):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")])
    return subprocess.Popen([sys.executable, "-m", "sweep.cli", "run", str(spec), "--out",
                             str(out)], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT,
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
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 60
    while (members := session_members(proc.pid)) and time.monotonic() < deadline:
        for pid in members:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.2)
    assert not session_members(proc.pid), "processes of the killed driver are still alive"


def config(run):
    return tuple(sorted((k, v) for k, v in run.data.params.items()))


def test_a_killed_ray_study_resumes_without_training_a_finished_config_again(tmp_path):
    spec, out = spec_file(tmp_path), tmp_path / "out"
    with open(tmp_path / "first.log", "wb") as log:
        proc = driver(spec, out, log)
        try:
            deadline = time.monotonic() + 600
            while time.monotonic() < deadline:
                assert proc.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
                try:
                    _, runs = trial_runs(out)
                except Exception:  # the store is being created
                    runs = []
                states = [r.data.tags.get("sweep.state") for r in runs]
                if sum(s in FINISHED for s in states) >= 2 and "RUNNING" in states:
                    break  # killed with a trial in training
                time.sleep(0.5)
            else:
                raise AssertionError("the first run never had 2 trials finished and one training")
            assert len(session_members(proc.pid)) > 1  # Ray runs in the driver's session
        finally:
            kill_session(proc)

    parents, before = trial_runs(out)
    (parent,) = parents
    done_before = {r.info.run_id: r for r in before if r.data.tags["sweep.state"] in FINISHED}
    killed = {r.info.run_id for r in before if r.data.tags["sweep.state"] not in FINISHED}
    assert 2 <= len(done_before) < N_TRIALS and killed
    with open(tmp_path / "second.log", "wb") as log:
        rerun = driver(spec, out, log)
        assert rerun.wait(timeout=900) == 0, (tmp_path / "second.log").read_text()[-3000:]
    text = (tmp_path / "second.log").read_text()
    lines = [ln for ln in text.splitlines() if "ray: resuming ray-resume" in ln]
    assert len(lines) == 1 and f"given {len(done_before)} of the {len(done_before)}" in lines[0]

    parents, after = trial_runs(out)
    print(f"finished at the kill: {len(done_before)}, runs then: {len(before)}; after the "
          f"rerun: {len(after)} runs, states {sorted(r.data.tags['sweep.state'] for r in after)}")
    assert [p.info.run_id for p in parents] == [parent.info.run_id]  # the same parent run
    done = [r for r in after if r.data.tags["sweep.state"] in FINISHED]
    assert len(done) == N_TRIALS  # the killed trials are not counted
    assert {r.info.run_id for r in after} - {r.info.run_id for r in done} == killed
    configs = [config(r) for r in done]
    assert len(set(configs)) == N_TRIALS  # no finished config was trained again
    numbers = [int(r.data.tags["sweep.trial_number"]) for r in done]
    assert len(set(numbers)) == N_TRIALS
    by_id = {r.info.run_id: r for r in after}
    for run_id, run in done_before.items():  # the first run's results are kept as they were
        assert by_id[run_id].data.metrics == run.data.metrics
        assert by_id[run_id].data.tags["sweep.state"] == run.data.tags["sweep.state"]
