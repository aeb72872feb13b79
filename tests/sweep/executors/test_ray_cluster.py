"""`sweep run --address`: a study on a Ray cluster started with ``ray start --head``.

The cluster is a real head node on 127.0.0.1 in its own temp folder and process group; the
study's trials run in its workers. Addresses where no cluster answers exit 2 at once (Ray
itself would wait for minutes), with nothing written.
"""

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import yaml
from testsupport import free_port
from typer.testing import CliRunner

from sweep.cli import app
from sweep.results import load_results

ray = pytest.importorskip("ray")

# Only the tests that start a head node (`head_node`) are marked ``ray`` and ``slow``; the
# others check addresses before Ray starts, in well under a second each.


def spec_file(tmp_path, executor="ray"):
    data = {
        "name": "on-a-cluster",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=40000",
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 4096, "batch_size": 8, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 1024},
        "search": {"executor": executor, "sampler": "random", "scheduler": "none",
                   "n_trials": 2, "parallel": 2},
        "resources": {"cpus_per_trial": 1},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def head_node():
    """``ray start --head --block`` on 127.0.0.1, with token authentication, for the module.

    Yields ``(address, env)``: ``env`` holds ``RAY_AUTH_MODE=token`` and the cluster's token,
    as a user's shell would. Ray reads them when it is imported, so the study runs in its own
    process (`sweep_cli`). The head is stopped with SIGTERM (it stops its own processes), then
    its process group is killed.
    """
    env = {**os.environ, "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(16)}
    temp = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # Ray's socket paths must stay short
    port = free_port()
    cmd = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", "--block",
           "--node-ip-address", "127.0.0.1", "--port", str(port), "--num-cpus", "2",
           "--include-dashboard", "false", "--temp-dir", temp, "--disable-usage-stats"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True, env=env)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            assert proc.poll() is None, "ray start exited"
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        else:
            pytest.fail("the Ray head node did not open its port within 90 s")
        yield f"127.0.0.1:{port}", env
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        shutil.rmtree(temp, ignore_errors=True)


def sweep_cli(args, env):
    """``sweep ARGS`` in a fresh process with ``env``."""
    return subprocess.run([sys.executable, "-m", "sweep.cli", *args], env=env,
                          capture_output=True, text=True, timeout=300)


def run_on_head(head_node, tmp_path, **env):
    """``sweep run`` of the two-trial spec on the head node; (result, output folder)."""
    address, head_env = head_node
    out = tmp_path / "out"
    result = sweep_cli(["run", str(spec_file(tmp_path)), "--out", str(out), "--address",
                        address, "--quiet"], {**head_env, **env})
    return result, out


@pytest.mark.ray
@pytest.mark.slow
def test_study_runs_on_the_cluster_at_address(head_node, tmp_path, new_store):
    new_store(tmp_path / "out")
    result, out = run_on_head(head_node, tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    frame = load_results(out)
    assert sorted(frame["trial"]) == [0, 1]
    assert (frame["state"] == "COMPLETE").all()
    # Ray's records of both trials are under the study folder.
    assert len(list((out / "ray").glob("*/*/result.json"))) == 2


@pytest.mark.ray
@pytest.mark.slow
def test_cluster_that_refuses_the_token_exits_2_and_writes_nothing(head_node, tmp_path):
    address = head_node[0]
    result, out = run_on_head(head_node, tmp_path, RAY_AUTH_TOKEN="not-the-clusters-token")
    assert result.returncode == 2, result.stdout + result.stderr
    text = " ".join(result.stderr.split())
    assert f"--address {address}: Ray could not connect" in text
    assert "RAY_AUTH_MODE=token" in text and "Traceback" not in text
    # Told by the cluster's first refusal (`refused_by_gcs`), not after ray.init's 20 retries.
    assert "the cluster refused this process" in text and "InvalidAuthToken" in text
    assert not out.exists()


@pytest.mark.parametrize("how", ["flag", "env"])
def test_address_where_no_cluster_answers_exits_2_and_writes_nothing(tmp_path, monkeypatch,
                                                                     how):
    address = f"127.0.0.1:{free_port()}"
    out = tmp_path / "out"
    command = ["run", str(spec_file(tmp_path)), "--out", str(out)]
    if how == "flag":
        command += ["--address", address]
    else:
        monkeypatch.setenv("RAY_ADDRESS", address)
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 2, result.output
    source = "--address" if how == "flag" else "RAY_ADDRESS"
    assert f"{source} {address}: no Ray cluster answers" in " ".join(result.output.split())
    assert not out.exists()


@pytest.fixture
def no_local_cluster(tmp_path, monkeypatch):
    """This machine as ``--address auto`` sees it when no Ray cluster was started on it.

    Ray resolves ``auto`` (`sweep.executors.ray.connection.check_address`, through
    ``ray._private.services.canonicalize_bootstrap_address``) from ``RAY_ADDRESS``, then the
    cluster ``ray start`` last recorded in Ray's temp folder (``ray_current_cluster``), then
    any raylet process it finds on the machine. So the test clears ``RAY_ADDRESS``, points
    ``RAY_TMPDIR`` at an empty folder and hides other processes' raylets: a cluster someone
    else runs on the same machine (a CI neighbour, a developer's ``ray start``) cannot answer.
    Returns the temp folder Ray reads (``<RAY_TMPDIR>/ray``).
    """
    from ray._private import services

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray-tmp"))

    def no_raylets():
        return frozenset()

    no_raylets.cache_clear = lambda: None  # ray.init and ray.shutdown clear Ray's cache
    monkeypatch.setattr(services, "find_gcs_addresses", no_raylets)
    return tmp_path / "ray-tmp" / "ray"


@pytest.mark.parametrize("address, rule", [
    ("nonsense", "not a Ray address"),
    ("127.0.0.1:99999", "not a Ray address"),
    ("auto", "no Ray cluster was started on this machine"),
])
def test_bad_address_exits_2(tmp_path, no_local_cluster, address, rule):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path)), "--out", str(out),
                                      "--address", address])
    assert result.exit_code == 2, result.output
    assert f"--address {address}: {rule}" in " ".join(result.output.split())
    assert not out.exists()


def test_auto_is_the_cluster_recorded_in_rays_temp_folder(tmp_path, no_local_cluster):
    # `ray start` records its cluster's address there and `auto` takes that one (Ray turns
    # 127.0.0.1 into this node's IP); nothing listens at this one.
    port = free_port()
    no_local_cluster.mkdir(parents=True)
    (no_local_cluster / "ray_current_cluster").write_text(f"127.0.0.1:{port}")
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path)), "--out", str(out),
                                      "--address", "auto"])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "--address auto: no Ray cluster answers at " in text
    assert f":{port} (" in text
    assert not out.exists()


def test_address_with_the_optuna_executor_exits_2(tmp_path):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path, "ray")), "--out", str(out),
                                      "--executor", "optuna", "--address", "127.0.0.1:6379"])
    assert result.exit_code == 2, result.output
    assert "--address: only the ray executor runs on a Ray cluster" in " ".join(
        result.output.split())
    assert not out.exists()


@pytest.fixture
def not_ray():
    """Two listeners on 127.0.0.1 that are not Ray: an HTTP/1 server and one that never answers."""
    import http.server
    import threading

    class Quiet(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    yield {"http": f"127.0.0.1:{httpd.server_port}",
           "silent": f"127.0.0.1:{silent.getsockname()[1]}"}
    httpd.shutdown()
    httpd.server_close()
    silent.close()


@pytest.mark.parametrize("kind, rule", [
    ("http", "is not a Ray cluster"),
    # the check waits out its 5-s timeout on a listener that never answers
    pytest.param("silent", "no Ray cluster answers", marks=pytest.mark.slow),
])
def test_address_of_a_server_that_is_not_ray_exits_2(tmp_path, not_ray, kind, rule):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path)), "--out", str(out),
                                      "--address", not_ray[kind]])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"--address {not_ray[kind]}: " in text and rule in text
    assert not out.exists()
