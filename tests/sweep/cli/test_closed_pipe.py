"""A closed stdout or stderr (``sweep run SPEC | head -1``) never changes a study's state.

Each ``sweep run`` here is a process of its own whose stdout is a pipe (no terminal): once the
reader has gone, its writes meet EPIPE. The study must finish as it would have, with the exit
status it would have had, no traceback, and its parent run as a run without the pipe left it.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from testsupport import tiny_spec

pytestmark = pytest.mark.slow  # four `sweep run` processes: 137 s on 2 cores at load 10

ROOT = Path(__file__).resolve().parents[3]
N_TRIALS = 3


def _sweep_run(spec, out, **streams):
    env = {k: v for k, v in os.environ.items() if k not in ("FORCE_COLOR", "TTY_COMPATIBLE")}
    env.update(PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return subprocess.Popen([sys.executable, "-m", "sweep.cli", "run", str(spec), "--out",
                             str(out), "--progress-every", "0"], env=env, text=True,
                            cwd=spec.parent, **streams)


def _parent(out):
    """The parent run's status, tags and metrics, and its trial runs' ends (ms) by number."""
    from mlflow import MlflowClient

    client = MlflowClient(f"sqlite:///{out / 'mlflow.db'}")
    (experiment,) = [e for e in client.search_experiments() if e.name == "pipe"]
    runs = client.search_runs([experiment.experiment_id])
    (parent,) = [r for r in runs if r.data.tags.get("sweep.kind") == "study"]
    ends = {int(r.data.tags["sweep.trial_number"]): r.info.end_time for r in runs
            if "sweep.trial_number" in r.data.tags}
    artifacts = sorted(a.path for a in client.list_artifacts(parent.info.run_id))
    return {"status": parent.info.status, "tags": parent.data.tags,
            "metrics": parent.data.metrics, "artifacts": artifacts}, ends


def _closed_pipe():
    """The write end of a pipe whose reader has already gone."""
    read, write = os.pipe()
    os.close(read)
    return write


@pytest.fixture(scope="module")
def studies(tmp_path_factory, new_store):
    """The same 3-trial study twice at once: one with stdout closed after its first line."""
    root = tmp_path_factory.mktemp("pipe")
    spec = root / "spec.yaml"
    # trials of about a second, so that the later ones end well after the reader has gone
    spec.write_text(yaml.safe_dump(tiny_spec("pipe", search={"n_trials": N_TRIALS},
                                             train={"steps": 1500})))
    new_store(root / "piped")
    new_store(root / "plain")
    plain = _sweep_run(spec, root / "plain", stdout=subprocess.DEVNULL,
                       stderr=subprocess.PIPE)
    piped = _sweep_run(spec, root / "piped", stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    first = piped.stdout.readline()  # trial 0's line: the others finish after the reader left
    piped.stdout.close()
    closed_ms = time.time() * 1000
    piped.wait(timeout=600)
    _, plain_err = plain.communicate(timeout=600)
    return {"root": root, "spec": spec, "first": first, "closed_ms": closed_ms,
            "piped": piped.returncode, "plain": plain.returncode, "plain_err": plain_err}


def _without_ids(record):
    """A parent's record without what differs between two folders (run ids, --out)."""
    tags = {k: v for k, v in record["tags"].items()
            if k not in ("sweep.best_run_id", "sweep.command", "mlflow.note.content")}
    return {**record, "tags": tags}


def test_a_reader_gone_mid_study_leaves_the_study_as_a_run_without_the_pipe(studies):
    assert studies["plain"] == 0, studies["plain_err"]
    assert studies["first"].startswith("trial   0 COMPLETE"), studies["first"]
    piped, ends = _parent(studies["root"] / "piped")
    plain, _ = _parent(studies["root"] / "plain")
    # The later trials ended, and printed their lines, after the reader had gone.
    assert len(ends) == N_TRIALS and ends[N_TRIALS - 1] > studies["closed_ms"], ends
    assert studies["piped"] == 0
    assert piped["status"] == "FINISHED" and "sweep.fail_reason" not in piped["tags"]
    assert piped["metrics"]["trials_complete"] == N_TRIALS
    assert _without_ids(piped) == _without_ids(plain)


@pytest.mark.parametrize("closed", ["stdout", "stdout and stderr"])
def test_a_finished_study_run_again_into_a_closed_pipe_is_unchanged(studies, closed):
    out = studies["root"] / "plain"
    before, _ = _parent(out)
    pipe = _closed_pipe()
    streams = {"stdout": pipe, "stderr": pipe if closed != "stdout" else subprocess.PIPE}
    proc = _sweep_run(studies["spec"], out, **streams)
    os.close(pipe)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert not err  # quietly: no traceback, no "Exception ignored"
    after, _ = _parent(out)
    assert after == before
