"""No secret in any output: a study tracked on a real ``mlflow server`` behind a password-bearing
URI, through an outage (the server stopped mid-study), a ``sweep sync``, a Ctrl-C and a resume.

The password must reach the server (MLflow sends a URI's userinfo as HTTP basic auth) yet
appear nowhere: not on stdout or stderr of any command, in no file under ``--out``, not in the
server's store or log, in no MLflow tag, param or experiment tag. An environment secret
(``MLFLOW_TRACKING_PASSWORD``) is held to the same rule.
"""

import json
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
from testsupport import fault_study_spec, journal_trials

from sweep import redact as redact_module
from sweep.redact import redact, remember, shown_uri

ROOT = Path(__file__).resolve().parents[3]
NAME = "secrets"
SECRET = "S3cret-Pw_42"
ENV_SECRET = "EnvOnly-Pw_77"


def _spec(tmp_path, url):
    # one retry, 3 s after the outage: its line is among the texts checked for the password
    return fault_study_spec(tmp_path, NAME, search={"fault_wait_s": 3}, tracking={"uri": url})


def _finished(tmp_path):
    return sum(t.state == OptunaState.COMPLETE for t in journal_trials(tmp_path / "out", NAME))


def _wait_for(tmp_path, proc, n_finished, timeout=240):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert proc.poll() is None, proc.communicate()
        if _finished(tmp_path) >= n_finished:
            return
        time.sleep(0.2)
    raise AssertionError("the study did not finish its trials in time")


@pytest.mark.slow
@pytest.mark.server
def test_a_password_in_the_tracking_uri_reaches_no_output(tmp_path, stoppable_server):
    server = stoppable_server
    url = server.url.replace("http://", f"http://alice:{SECRET}@")
    spec = _spec(tmp_path, url)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1",
           "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0", "MLFLOW_HTTP_REQUEST_TIMEOUT": "5",
           "MLFLOW_TRACKING_PASSWORD": ENV_SECRET}
    run = [sys.executable, "-m", "sweep.cli", "run", str(spec), "--out", str(tmp_path / "out")]
    texts = []

    def start(*flags):
        return subprocess.Popen(run + list(flags), cwd=tmp_path, env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)

    # 1. an outage: the server stops mid-study; the driver stops with one line
    proc = start("--progress-every", "1")
    _wait_for(tmp_path, proc, 1)
    server.stop()
    out, err = proc.communicate(timeout=300)
    texts += [out, err]
    assert proc.returncode == 3, err
    stopped = [line for line in err.splitlines() if line.startswith("stopped:")]
    assert len(stopped) == 1 and f"http://alice:***@127.0.0.1:{server.port}" in stopped[0]
    # 2. the kept run is sent with the URI given again (the stored one hides the password)
    server.start()
    sync = [sys.executable, "-m", "sweep.cli", "sync", str(tmp_path / "out")]
    hidden = subprocess.run(sync, env=env, capture_output=True, text=True, timeout=120)
    sent = subprocess.run(sync + ["--tracking-uri", url], env=env, capture_output=True,
                          text=True, timeout=120)
    texts += [hidden.stdout, hidden.stderr, sent.stdout, sent.stderr]
    assert hidden.returncode == 2 and "hides its password" in " ".join(hidden.stderr.split())
    assert sent.returncode == 0, sent.stderr
    # 3. a stop (Ctrl-C) while a trial trains, then the resume to the end
    done = _finished(tmp_path)
    proc = start("--json")
    _wait_for(tmp_path, proc, done + 1)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=300)
    texts += [out, err]
    assert proc.returncode == 130, err
    final = subprocess.run(run + ["--json"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=600)
    texts += [final.stdout, final.stderr]
    assert final.returncode == 0, final.stderr
    summary = json.loads(final.stdout)
    assert summary["tracking_uri"] == f"http://alice:***@127.0.0.1:{server.port}"
    assert summary["counts"]["complete"] == 6
    shown = subprocess.run(run, cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=600)  # all trials done: the summary table and store line
    texts += [shown.stdout, shown.stderr]
    assert f"MLflow store: http://alice:***@127.0.0.1:{server.port}" in shown.stdout

    for secret in (SECRET, ENV_SECRET):
        assert not [t for t in texts if secret in t]
        # every file the study, the commands and the server wrote (the spec is the user's own)
        files = [p for p in tmp_path.rglob("*")
                 if p.is_file() and p != spec and secret.encode() in p.read_bytes()]
        assert files == []
    client = MlflowClient(server.url)
    experiment = client.get_experiment_by_name(NAME)
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    states = [r.data.tags.get("sweep.state") for r in runs]
    assert states.count("COMPLETE") == 7  # the parent and its 6 trials
    stored = [str(experiment.tags)] + [str(r.data.tags) + str(r.data.params) for r in runs]
    assert not [s for s in stored if SECRET in s or ENV_SECRET in s]


def test_redact_masks_uri_passwords_remembered_and_environment_secrets(monkeypatch):
    monkeypatch.setattr(redact_module, "_remembered", set())
    monkeypatch.setenv("MLFLOW_TRACKING_PASSWORD", "from-env")
    remember("postgresql://bob:p%40ss@db:5432/optuna?password=q1")
    text = ("API request to http://alice:pw@host:5000/api failed; user p@ss, q1, from-env; "
            "postgresql://db/optuna?sslmode=off&password=zz")
    assert redact(text) == ("API request to http://alice:***@host:5000/api failed; user ***, "
                            "***, ***; postgresql://db/optuna?sslmode=off&password=***")
    assert shown_uri("http://alice:pw@host:5000") == "http://alice:***@host:5000"
    assert shown_uri("sqlite:///runs/x/mlflow.db") == "sqlite:///runs/x/mlflow.db"


@pytest.mark.slow
@pytest.mark.server
@pytest.mark.ray
def test_a_ray_study_keeps_the_uri_password_out_of_its_folder(tmp_path, stoppable_server):
    """Tune pickles the trainable, searcher and callbacks under ``<out>/ray``: the URI they
    carry has no password, which the workers get from MLflow's credential variables."""
    server = stoppable_server
    url = server.url.replace("http://", f"http://alice:{SECRET}@")
    spec = _spec(tmp_path, url)
    data = yaml.safe_load(spec.read_text())
    data["train"].update(tokens=4096, lr=3e-3)  # fixed: both trials train to their end
    data["search"].update(executor="ray", n_trials=2, parallel=1)
    data["search"].pop("fault_wait_s")
    spec.write_text(yaml.safe_dump(data))
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("MLFLOW_TRACKING_PASSWORD", None)
    done = subprocess.run([sys.executable, "-m", "sweep.cli", "run", str(spec), "--out",
                           str(tmp_path / "out"), "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert json.loads(done.stdout)["counts"]["complete"] == 2, done.stdout
    assert SECRET not in done.stdout + done.stderr
    pickles = list((tmp_path / "out" / "ray").rglob("*.pkl"))
    assert pickles  # Tune's experiment state, where the context was pickled
    files = [p for p in tmp_path.rglob("*")
             if p.is_file() and p != spec and SECRET.encode() in p.read_bytes()]
    assert files == []
    client = MlflowClient(server.url)
    experiment = client.get_experiment_by_name(NAME)
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    assert sorted(r.data.tags.get("sweep.state") for r in runs) == ["COMPLETE"] * 3
    assert not [r for r in runs if SECRET in str(r.data.tags) + str(r.data.params)]
