"""`sweep submit` and its cluster commands without a cluster: the checks made here first.

A spec that does not validate, a store on the cluster's disk, a malformed address: exit 2 with
one message, before Ray, torch or MLflow is imported and before any request. The token is found
where Ray looks for it and never shown; the probe script, run here as the cluster runs it, reads
this Python's code and MLflow store.
"""

import hashlib
import json
import os
import re
import shlex
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from sweep.cluster import (
    ClusterError,
    check_address,
    check_submittable,
    code_fingerprint,
    find_token,
    job_request,
    results_uri,
    submission_id,
)
from sweep.cluster.auth import TokenError
from sweep.cluster.probe import local_packages, probe_entrypoint
from sweep.spec import parse_spec, spec_hash

ROOT = Path(__file__).resolve().parents[3]
DEAD = "http://127.0.0.1:9"  # nothing listens on the discard port here


def spec_dict(**sections):
    base = {
        "name": "submit-checks",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=20000",
        "model": {"vocab_size": 16, "seq_len": 8, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"steps": 2, "batch_size": 2, "eval_tokens": 8},
        "search": {"executor": "ray", "sampler": "random", "scheduler": "none", "n_trials": 2},
        "tracking": {"uri": "http://mlflow.example:5000"},
    }
    for key, value in sections.items():
        base[key] = {**base.get(key, {}), **value} if isinstance(value, dict) else value
    return base


#: ``sweep submit ARGS...`` in-process; its exit handler keeps a refusal from ending the
#: process before it prints (`sweep.cli.end_refusal`).
_SUBMIT = """
import atexit, json, runpy, sys, time
atexit.register(lambda: None)
sys.argv = ["sweep", *sys.argv[1:]]
code, start = None, time.perf_counter()
try:
    runpy.run_module("sweep.cli", run_name="__main__")
except SystemExit as exc:
    code = exc.code
heavy = ("torch", "mlflow", "ray", "requests")
print(json.dumps({"code": code, "seconds": time.perf_counter() - start,
                  "loaded": sorted(m for m in heavy if m in sys.modules)}))
"""


@pytest.mark.parametrize("case", ["type", "sqlite-store", "optuna-journal", "optuna-sqlite",
                                  "relative-corpus", "no-valid-config", "address"])
def test_bad_input_is_refused_before_ray_or_a_request(tmp_path, case):
    data, address, words = {
        "type": (spec_dict(model={"seq_len": "eight"}), DEAD, "model.seq_len"),
        "sqlite-store": (spec_dict(tracking={"uri": "sqlite:///runs/x/mlflow.db"}), DEAD,
                         "tracking.uri sqlite:///runs/x/mlflow.db: a store on the cluster's"),
        "optuna-journal": (spec_dict(search={"executor": "optuna"}), DEAD,
                           "search.storage (the default journal file"),
        "optuna-sqlite": (spec_dict(search={"executor": "optuna", "storage": "sqlite:///o.db"}),
                          DEAD, "search.storage (sqlite:///o.db)"),
        "relative-corpus": (spec_dict(data="text:corpus.txt"), DEAD, "data.uri 'text:corpus.txt'"),
        "no-valid-config": (spec_dict(constraints={"max_params": 10}), DEAD, "none of"),
        "address": (spec_dict(), "127.0.0.1:6379", "--address 127.0.0.1:6379: give the Ray "
                                                   "dashboard's HTTP address"),
    }[case]
    spec, home = tmp_path / "spec.yaml", tmp_path / "home"
    spec.write_text(yaml.safe_dump(data))
    home.mkdir()
    proc = subprocess.run([sys.executable, "-c", _SUBMIT, "submit", str(spec), "--address",
                           address], capture_output=True, text=True, cwd=tmp_path,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin",
                               "HOME": str(home)}, timeout=120)
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["code"] == 2, proc.stderr
    message = " ".join(proc.stderr.split())
    assert message.startswith("error: ") and words in message, message
    assert "Traceback" not in proc.stderr and message.count("error:") == 1
    assert result["loaded"] == [], result  # no Ray, no HTTP client: nothing was sent
    assert sorted(p.name for p in tmp_path.iterdir()) == ["home", "spec.yaml"]


def test_an_address_where_nothing_answers_is_one_message(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "sweep.cli", "jobs", "--address", DEAD],
                          capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    message = " ".join(proc.stderr.split())
    assert message.startswith(f"error: --address {DEAD}: no Ray dashboard answers there")
    assert "Traceback" not in proc.stderr


def test_address_forms():
    assert check_address("http://head:8265/") == "http://head:8265"
    assert check_address("https://head.example") == "https://head.example"
    for bad in ("head:8265", "auto", "ray://head:10001", "http://head:8265/api/jobs",
                "http://user@head:8265"):
        with pytest.raises(ClusterError, match="--address"):
            check_address(bad)


class _Environ(dict):
    """``os.environ`` stand-in that counts writes."""

    writes = 0

    def __setitem__(self, key, value):
        type(self).writes += 1
        super().__setitem__(key, value)

    def __delitem__(self, key):
        type(self).writes += 1
        super().__delitem__(key)


@pytest.mark.parametrize("env", [{}, {"RAY_API_SERVER_ADDRESS": "http://h:8265"},
                                 {"RAY_ADDRESS": "10.0.0.1:6379"},
                                 {"RAY_API_SERVER_ADDRESS": "http://other:8265"}])
def test_the_address_given_wins_and_the_environment_is_written_only_to_make_it(monkeypatch,
                                                                             env):
    """`JobSubmissionClient` prefers ``RAY_API_SERVER_ADDRESS``, then ``RAY_ADDRESS``; with
    neither (or the same address) set nothing is written, so a thread reading the environment
    meanwhile (two submits in one process) never sees it change."""
    from sweep.cluster import connection

    environ = _Environ(env)
    _Environ.writes = 0
    monkeypatch.setattr(connection.os, "environ", environ)
    with connection._address_wins("http://h:8265"):
        inside = environ.get("RAY_API_SERVER_ADDRESS")
    assert inside == (None if env == {} else "http://h:8265")
    assert environ == env
    assert _Environ.writes == (0 if env in ({}, {"RAY_API_SERVER_ADDRESS": "http://h:8265"})
                               else 2)


def test_the_token_is_found_where_ray_looks_and_never_shown(tmp_path, monkeypatch):
    secret = "tok-" + os.urandom(8).hex()
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", secret)
    token = find_token()
    assert token.source == "RAY_AUTH_TOKEN"
    assert token.headers() == {"Authorization": f"Bearer {secret}"}
    assert secret not in repr(token) and secret not in str(token) and secret not in f"{token}"

    monkeypatch.delenv("RAY_AUTH_TOKEN")
    assert find_token() is None  # no variable, no default file
    default = tmp_path / ".ray" / "auth_token"
    default.parent.mkdir()
    default.write_text(secret + "\n")
    assert find_token().headers()["Authorization"] == f"Bearer {secret}"
    assert find_token().source == str(default)

    named = tmp_path / "other-token"
    named.write_text("from-path")
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(named))
    assert find_token().headers()["Authorization"] == "Bearer from-path"  # before the default
    named.write_text("")
    with pytest.raises(TokenError, match="RAY_AUTH_TOKEN_PATH .* the token file is empty"):
        find_token()


def test_where_the_results_go():
    data = spec_dict()
    del data["tracking"]
    spec = parse_spec(data)
    with pytest.raises(ClusterError, match="tracking.uri is not set and the cluster has no "
                                           "MLFLOW_TRACKING_URI"):
        results_uri(spec, None)
    with pytest.raises(ClusterError, match=r"the cluster's MLFLOW_TRACKING_URI \(sqlite:"):
        results_uri(spec, "sqlite:////data/mlflow.db")
    assert results_uri(spec, "http://mlflow:5000") == ("http://mlflow:5000",
                                                       "the cluster's MLFLOW_TRACKING_URI")
    with_uri = parse_spec(spec_dict(tracking={"uri": "http://u:pw@tracker:5000"}))
    assert results_uri(with_uri, "http://mlflow:5000") == ("http://u:***@tracker:5000",
                                                           "tracking.uri")
    check_submittable(with_uri)  # a server, a synthetic corpus, a space that trains


def test_the_job_runs_sweep_run_with_the_spec_and_a_stop_grace(tmp_path):
    spec = parse_spec(spec_dict(search={"n_trials": 3}))
    request = job_request(spec, Path("/somewhere/my spec.yaml"), tmp_path, out="/runs/x y",
                          executor="ray", trials=3, name=None, tracking_uri="http://t:5000",
                          code_env={}, code="installed")
    assert shlex.split(request.entrypoint) == [
        "python", "-m", "sweep.cli", "run", "my spec.yaml", "--executor", "ray", "--trials",
        "3", "--out", "/runs/x y"]
    assert request.runtime_env == {"working_dir": str(tmp_path),
                                   "env_vars": {"RAY_JOB_STOP_WAIT_TIME_S": "60"}}
    meta = request.metadata
    assert meta["sweep.kind"] == "study" and meta["sweep.study"] == "submit-checks"
    assert meta["sweep.spec_hash"] == spec_hash(spec) and meta["job_name"] == "submit-checks"
    assert all(isinstance(v, str) for v in meta.values())  # Ray's metadata is str -> str
    default = job_request(spec, Path("s.yaml"), tmp_path, out=None, executor=None, trials=None,
                          name="mine", tracking_uri="http://t:5000", code_env={}, code="shipped")
    assert default.entrypoint.endswith('--out "$HOME"/sweep-runs/submit-checks')
    assert default.metadata["job_name"] == "mine"


def test_the_probe_script_reads_the_python_that_runs_it(tmp_path):
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "PYTHONPATH": str(ROOT),
           "MLFLOW_TRACKING_URI": "http://user:s3cret@tracker:5000", "HOME": str(tmp_path)}
    proc = subprocess.run(probe_entrypoint(), shell=True, capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    (line,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("sweep-cluster-facts:")]
    facts = json.loads(line.split(":", 1)[1])
    assert facts["roots"] == [str(ROOT / "sweep"), str(ROOT / "models" / "sweep_models")]
    assert facts["fingerprint"] == code_fingerprint([str(p) for p in local_packages()])
    assert facts["missing"] == []
    assert facts["mlflow_tracking_uri"] == "http://user:***@tracker:5000"
    assert "s3cret" not in proc.stdout


def test_the_fingerprint_follows_the_source(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "a.py").write_text("x = 1\n")
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    first = code_fingerprint([str(pkg)])
    (pkg / "__pycache__").mkdir()
    (pkg / "__pycache__" / "a.cpython-312.py").write_text("junk")
    (pkg / "notes.txt").write_text("not code")
    assert code_fingerprint([str(pkg)]) == first
    (pkg / "sub" / "b.py").write_text("y = 3\n")
    assert code_fingerprint([str(pkg)]) != first
    (pkg / "sub" / "b.py").write_text("y = 2\n")
    (pkg / "sub" / "b.py").rename(pkg / "sub" / "c.py")
    assert code_fingerprint([str(pkg)]) != first


def test_bad_job_ids_are_refused_before_a_request():
    # A listener stands where the cluster would be: a request would leave a connection in its
    # backlog; the refusal must leave none.
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        address = f"http://127.0.0.1:{listener.getsockname()[1]}"
        proc = subprocess.run([sys.executable, "-m", "sweep.cli", "status", "../../api/version",
                               "--address", address], capture_output=True, text=True,
                              timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
        listener.setblocking(False)
        with pytest.raises(BlockingIOError):
            listener.accept()
    assert proc.returncode == 2
    assert "JOB '../../api/version': not a job id" in " ".join(proc.stderr.split())


def job(submission_id, study):
    return SimpleNamespace(submission_id=submission_id, metadata={"sweep.study": study})


def test_a_study_s_jobs_are_numbered_by_attempt_so_two_submits_ask_for_one_id():
    assert submission_id("grid", []) == "sweep-grid-1"
    held = [job("sweep-grid-1", "grid"), job("sweep-grid-3", "grid"),
            job("raysubmit_Abc123", "grid"),  # an id of another form counts for nothing
            job("sweep-grid-9", "other")]  # nor does another study's job
    assert submission_id("grid", held) == submission_id("grid", list(held)) == "sweep-grid-4"
    assert submission_id("grid-1", held) == "sweep-grid-1-1"
    # Characters a job id cannot hold are replaced, and the name's hash keeps names apart.
    spaced, underscored = submission_id("my study/2", []), submission_id("my_study_2", [])
    assert spaced == f"sweep-my_study_2-{hashlib.sha256(b'my study/2').hexdigest()[:8]}-1"
    assert underscored == "sweep-my_study_2-1"
    assert submission_id("my study/2", [job(spaced, "my study/2")]) == spaced[:-1] + "2"
    for job_id in (spaced, underscored, submission_id("x" * 100 + "!", [])):
        assert re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:-]*", job_id)  # `sweep status` takes it
