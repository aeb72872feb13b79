"""`sweep submit`, `status`, `jobs`, `logs`, `stop` against a real Ray head with token auth.

One head (``ray start --head`` on 127.0.0.1, every port given, its own temp folder, token
authentication on) and one ``mlflow server`` serve the module. The head runs as a cluster
would: from the environment's Python, without this checkout on ``PYTHONPATH`` and with
``MLFLOW_TRACKING_URI`` set to the server, so the job gets this source the way a user's would
(installed on the cluster, or shipped by ``sweep submit`` when the cluster's differs). The
commands run as a user runs them: ``python -m sweep.cli`` with the token in ``RAY_AUTH_TOKEN``.
"""

import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
import requests
import yaml
from mlflow import MlflowClient
from testsupport import free_port

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.slow, pytest.mark.server]

ROOT = Path(__file__).resolve().parents[3]
N_TRIALS = 3
TOKENS = 196608  # a trial's budget: long enough that `sweep stop` lands mid-trial under load
FINISHED = ("COMPLETE", "PRUNED", "FAILED", "INFEASIBLE", "DIVERGED")


@pytest.fixture(scope="module")
def ray_jobs_head(module_mlflow_server):
    """``ray start --head --block`` with its dashboard (Jobs API) and token auth, on 127.0.0.1.

    Yields ``(address, token, server)``. Stopped with SIGTERM (Ray stops its processes), then
    its process group is killed and its temp folder removed.
    """
    token = secrets.token_hex(16)
    temp = tempfile.mkdtemp(prefix="rayjobs-", dir="/tmp")  # Ray's socket paths stay short
    ports = {name: free_port() for name in (
        "port", "dashboard-port", "dashboard-agent-listen-port", "dashboard-agent-grpc-port",
        "runtime-env-agent-port", "metrics-export-port", "ray-client-server-port",
        "node-manager-port", "object-manager-port")}
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    env.update(RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=token,
               MLFLOW_TRACKING_URI=module_mlflow_server.url,
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}")
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
           "--node-ip-address", "127.0.0.1", "--dashboard-host", "127.0.0.1",
           *[a for name, port in ports.items() for a in (f"--{name}", str(port))],
           "--num-cpus", "2", "--temp-dir", temp, "--disable-usage-stats"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env, cwd=temp)
    address = f"http://127.0.0.1:{ports['dashboard-port']}"
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert proc.poll() is None, "ray start exited"
            with contextlib.suppress(requests.RequestException):
                if requests.get(f"{address}/api/version", timeout=2,
                                headers={"Authorization": f"Bearer {token}"}).ok:
                    break
            time.sleep(0.5)
        else:
            pytest.fail("the Ray head's dashboard did not answer within 120 s")
        yield address, token, module_mlflow_server
    finally:
        proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def user_env(token, **changes):
    """A user's shell: this checkout importable, the cluster's token in RAY_AUTH_TOKEN."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "MLFLOW_TRACKING_URI")}
    env.update(PYTHONPATH=str(ROOT), RAY_AUTH_TOKEN=token)
    for key, value in changes.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


OUTPUTS = []  # every command's output, searched for the token at the end


def sweep_cli(args, token, **env):
    result = subprocess.run([sys.executable, "-m", "sweep.cli", *map(str, args)],
                            env=user_env(token, **env), capture_output=True, text=True,
                            timeout=600)
    OUTPUTS.append(result.stdout + result.stderr)
    return result


def one_line(result):
    return " ".join(result.stderr.split())


def jobs_client(address, token):
    from ray.job_submission import JobSubmissionClient

    return JobSubmissionClient(address, headers={"Authorization": f"Bearer {token}"})


def spec_file(tmp_path, name, tokens=4096, n_trials=2, **tracking):
    data = {
        "name": name,
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000",
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": 32, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": tokens, "batch_size": 4, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 1024},
        "search": {"executor": "ray", "sampler": "random", "scheduler": "none",
                   "n_trials": n_trials, "parallel": 2},
        "resources": {"cpus_per_trial": 1},
    }
    if tracking:
        data["tracking"] = tracking
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_bad_input_gives_one_message_each_and_submits_nothing(ray_jobs_head, tmp_path):
    address, token, server = ray_jobs_head
    client = jobs_client(address, token)
    other = client.submit_job(entrypoint="echo another tool")
    while not client.get_job_status(other).is_terminal():
        time.sleep(0.2)
    before = sorted(j.submission_id for j in client.list_jobs())
    good = spec_file(tmp_path, "bad-input")
    bad = tmp_path / "bad.yaml"
    bad.write_text(good.read_text().replace("seq_len: 32", "seq_len: thirty-two"))
    dead = f"http://127.0.0.1:{free_port()}"
    cases = [
        (["submit", good, "--address", address], {"RAY_AUTH_TOKEN": "not-the-token"},
         f"error: --address {address}: the cluster refused the token from RAY_AUTH_TOKEN"),
        (["submit", good, "--address", address], {"RAY_AUTH_TOKEN": None, "HOME": str(tmp_path)},
         f"error: --address {address}: the cluster uses token authentication "
         "(RAY_AUTH_MODE=token) and no token was found here"),
        (["submit", good, "--address", dead], {}, f"error: --address {dead}: no Ray dashboard "
                                                  "answers there"),
        (["submit", bad, "--address", address], {}, "model.seq_len"),
        (["submit", spec_file(tmp_path, "local-store", uri="sqlite:///x/mlflow.db"),
          "--address", address], {}, "error: tracking.uri sqlite:///x/mlflow.db: a store on "
                                     "the cluster's disk"),
        (["status", "raysubmit_nosuchjob", "--address", address], {},
         "error: JOB raysubmit_nosuchjob: no job with that id on the cluster"),
        (["logs", "raysubmit_nosuchjob", "--address", address], {},
         "error: JOB raysubmit_nosuchjob: no job with that id on the cluster"),
        (["stop", other, "--address", address], {},
         f"error: JOB {other}: not a transformer-sweep study (entrypoint 'echo another tool')"),
        (["logs", other, "--address", address], {}, f"error: JOB {other}: not a "
                                                    "transformer-sweep study"),
    ]
    for args, env, message in cases:
        result = sweep_cli(args, token, **env)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        assert one_line(result).startswith(message) or message in one_line(result), \
            (args, one_line(result))
        assert one_line(result).count("error:") == 1 and "Traceback" not in result.stderr
    assert sorted(j.submission_id for j in client.list_jobs()) == before  # nothing submitted
    assert client.get_job_status(other).value == "SUCCEEDED"  # the stop left it alone
    listed = sweep_cli(["jobs", "--address", address, "--json"], token)
    assert listed.returncode == 0, listed.stderr
    assert other not in {row["job"] for row in json.loads(listed.stdout)}


def test_two_submits_of_one_study_at_once_start_one_job_and_refuse_the_other(
        ray_jobs_head, tmp_path, monkeypatch, capsys):
    """Both submits read the cluster's jobs before either submits (they meet at the probe), so
    both pass the check for a running job; the cluster takes the study's next job id once."""
    import typer

    import sweep.cluster
    from sweep.cli import app

    address, token, _ = ray_jobs_head
    client = jobs_client(address, token)
    for key in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS", "MLFLOW_TRACKING_URI"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("RAY_AUTH_TOKEN", token)
    name = "submitted-twice"
    spec = spec_file(tmp_path, name)
    both_listed = threading.Barrier(2, timeout=300)
    probe = sweep.cluster.probe_cluster

    def probe_once_both_listed(*args, **kwargs):
        both_listed.wait()
        return probe(*args, **kwargs)

    monkeypatch.setattr(sweep.cluster, "probe_cluster", probe_once_both_listed)
    command, codes = typer.main.get_command(app), []

    def submit():
        codes.append(command.main(["submit", str(spec), "--address", address, "--out",
                                   str(tmp_path / "out"), "--no-wait"], prog_name="sweep",
                                  standalone_mode=False) or 0)

    threads = [threading.Thread(target=submit) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=600)
    printed = capsys.readouterr()
    OUTPUTS.append(printed.out + printed.err)
    assert sorted(codes) == [0, 2], printed
    (job,) = re.findall(r"submitted job (\S+): study submitted-twice", printed.out)
    assert job == "sweep-submitted-twice-1"
    refusal = " ".join(printed.err.split())
    assert refusal.startswith(f"error: study {name} already runs on the cluster as job {job} ("), \
        refusal
    assert refusal.count("error:") == 1 and "Traceback" not in printed.err
    ours = [j for j in client.list_jobs() if (j.metadata or {}).get("sweep.study") == name
            and j.metadata.get("sweep.kind") == "study"]
    assert [j.submission_id for j in ours] == [job]  # exactly one job of the study
    client.stop_job(job)
    deadline = time.monotonic() + 120
    while not client.get_job_status(job).is_terminal() and time.monotonic() < deadline:
        time.sleep(0.5)


def study_runs(url, experiment):
    client = MlflowClient(url)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        return [], []
    runs = client.search_runs([found.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("sweep.kind") == "study"]
    return parents, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def wait_mid_trial(url, experiment, job, client, n_finished):
    """Until ``n_finished`` trials are done and another is training, early in its budget."""
    mlflow = MlflowClient(url)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        assert not client.get_job_status(job).is_terminal(), client.get_job_logs(job)[-3000:]
        _, runs = study_runs(url, experiment)
        states = [r.data.tags.get("sweep.state") for r in runs]
        early = [r for r in runs if r.data.tags.get("sweep.state") == "RUNNING"
                 and "val_loss" in r.data.metrics and max(
                     m.step for m in mlflow.get_metric_history(r.info.run_id, "val_loss"))
                 <= TOKENS // 4]
        if sum(s in FINISHED for s in states) >= n_finished and early:
            return runs
        time.sleep(0.2)
    raise AssertionError("no trial was caught early in its budget")


def config(run):
    return tuple(sorted(run.data.params.items()))


def test_submit_stop_and_resubmit_resume_the_study_with_nothing_lost(ray_jobs_head, tmp_path):
    address, token, server = ray_jobs_head
    client = jobs_client(address, token)
    name = "on-the-cluster"
    spec = spec_file(tmp_path, name, tokens=TOKENS, n_trials=N_TRIALS)
    out = tmp_path / "cluster-out"  # the study folder on the cluster (the same machine here)

    start = time.monotonic()
    first = sweep_cli(["submit", spec, "--address", address, "--out", out, "--no-wait"], token)
    assert first.returncode == 0, first.stderr
    job = re.search(r"submitted job (\S+): study on-the-cluster \((\w{16})\)", first.stdout)
    assert job, first.stdout
    job = job.group(1)
    # The cluster's Python imports the installed project (``pip install -e`` of some checkout)
    # or none; this source is shipped unless that is this very checkout.
    installed = subprocess.run([sys.executable, "-c", "import sweep; print(sweep.__file__)"],
                               capture_output=True, text=True, cwd="/",
                               env=user_env(token, PYTHONPATH=None)).stdout.strip()
    same = installed == str(ROOT / "sweep" / "__init__.py")
    assert ("code: the cluster's installed" if same else "code: shipped with the job") \
        in first.stdout
    assert f"runs: MLflow {server.url} (the cluster's MLFLOW_TRACKING_URI)" in first.stdout
    while client.get_job_status(job).value == "PENDING":
        time.sleep(0.1)
    submit_to_running = time.monotonic() - start
    follower = subprocess.Popen([sys.executable, "-m", "sweep.cli", "logs", job, "--follow",
                                 "--address", address], env=user_env(token),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        status = sweep_cli(["status", job, "--address", address], token)
        assert status.returncode == 0, status.stderr
        assert f"job {job}: RUNNING, study on-the-cluster" in " ".join(status.stdout.split())
        before = wait_mid_trial(server.url, name, job, client, n_finished=1)
        stop_start = time.monotonic()
        stopped = sweep_cli(["stop", job, "--address", address], token)
        stop_to_ended = time.monotonic() - stop_start
        assert stopped.returncode == 0, stopped.stderr
        text = " ".join(stopped.stdout.split())
        assert f"job {job} (study on-the-cluster): STOPPED" in text
        assert "driver: stopped: study on-the-cluster: interrupted by SIGTERM" in text, \
            client.get_job_logs(job)[-3000:]
        listed = json.loads(sweep_cli(["jobs", "--address", address, "--json"], token).stdout)
        assert [r["state"] for r in listed if r["job"] == job] == ["STOPPED"]
        followed, _ = follower.communicate(timeout=60)  # --follow ends with the job
    finally:
        if follower.poll() is None:
            follower.kill()
    OUTPUTS.append(followed)
    assert follower.returncode == 0
    assert "trial " in followed and "stopped: study on-the-cluster: interrupted by SIGTERM" \
        in followed

    parents, after_stop = study_runs(server.url, name)
    (parent,) = parents
    assert parent.info.status == "KILLED" and parent.data.tags["sweep.state"] == "INTERRUPTED"
    states = [r.data.tags["sweep.state"] for r in after_stop]
    assert "RUNNING" not in states and "INTERRUPTED" in states, states
    assert all(r.info.status == "KILLED" for r in after_stop
               if r.data.tags["sweep.state"] == "INTERRUPTED")
    done_before = {r.info.run_id: r for r in after_stop if r.data.tags["sweep.state"] in FINISHED}
    assert 1 <= len(done_before) < N_TRIALS
    assert {r.info.run_id for r in before} <= {r.info.run_id for r in after_stop}

    second = sweep_cli(["submit", spec, "--address", address, "--out", out], token)
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr
    assert "ray: resuming on-the-cluster" in second.stdout
    job2 = re.search(r"submitted job (\S+):", second.stdout).group(1)
    assert second.stdout.strip().endswith(f"job {job2}: SUCCEEDED")

    parents, after = study_runs(server.url, name)
    assert [p.info.run_id for p in parents] == [parent.info.run_id]  # the same study
    assert parents[0].info.status == "FINISHED" and parents[0].data.tags["sweep.state"] == \
        "COMPLETE"
    done = [r for r in after if r.data.tags["sweep.state"] in FINISHED]
    assert len(done) == N_TRIALS
    assert len({config(r) for r in done}) == N_TRIALS  # no finished config trained again
    by_id = {r.info.run_id: r for r in after}
    for run_id, run in done_before.items():  # kept as they were
        assert by_id[run_id].data.metrics == run.data.metrics
    interrupted = [r for r in after if r.data.tags["sweep.state"] == "INTERRUPTED"]
    retried = sorted(int(r.data.tags["sweep.retry_of"]) for r in done
                     if "sweep.retry_of" in r.data.tags)
    assert retried == sorted(int(r.data.tags["sweep.trial_number"]) for r in interrupted
                             if r.data.params)
    counts = {s: sum(r.data.tags["sweep.state"] == s for r in after) for s in set(
        r.data.tags["sweep.state"] for r in after)}

    results = sweep_cli(["results", name, "--tracking-uri", server.url, "--json"], token)
    assert results.returncode == 0, results.stderr
    assert sorted(r["trial"] for r in json.loads(results.stdout)
                  if r["state"] == "COMPLETE") == sorted(
        int(r.data.tags["sweep.trial_number"]) for r in done)
    assert json.loads(sweep_cli(["status", job2, "--address", address, "--json"],
                                token).stdout)["state"] == "SUCCEEDED"

    # The token is nowhere: not in what the commands printed, the jobs' logs and metadata,
    # the MLflow runs' params, tags and artifacts, the server's store, the study folder.
    records = json.dumps([j.model_dump() for j in client.list_jobs()], default=str)
    logs = client.get_job_logs(job) + client.get_job_logs(job2)
    stored = []
    for run in [*parents, *after]:
        stored.append(json.dumps([run.data.params, run.data.tags]))
    files = [p for root in (server.root, out) for p in Path(root).rglob("*") if p.is_file()]
    assert len(files) > 10
    for place, text in [("outputs", "\n".join(OUTPUTS)), ("job records", records),
                        ("job logs", logs), ("MLflow runs", "\n".join(stored))]:
        assert token not in text, place
    leaked = [p for p in files if token.encode() in p.read_bytes()]
    assert not leaked, leaked
    print(f"\nsubmit to RUNNING {submit_to_running:.1f} s; stop to STOPPED {stop_to_ended:.1f} s;"
          f" after the stop {sorted(states)}; after the resubmit {counts}; "
          f"{len(files)} files searched for the token")
