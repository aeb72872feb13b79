"""Studies against an MLflow tracking server over HTTP (`mlflow server` on 127.0.0.1).

The cluster setup (docker/) logs to a tracking server, not to a SQLite file: runs, batched
metrics and the parent's artifacts (proxied by the server) must all get there. A server that
does not answer is a bad address: exit 2 at once, nothing written, not minutes of retries.
"""

from pathlib import Path

import pytest
import yaml
from mlflow import MlflowClient
from testsupport import free_port
from typer.testing import CliRunner

from sweep.cli import app
from sweep.results import load_results, start_ui, stop_ui

DATA = "synthetic:markov?order=1&vocab=16&seed=0&tokens=40000"


def spec_file(tmp_path, name, uri):
    data = {
        "name": name,
        "data": DATA,
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": 16, "n_heads": 2, "n_layers": 1},
        "train": {"tokens": 4096, "batch_size": 8, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 1024},
        "search": {"executor": "optuna", "sampler": "random", "pruner": "none", "n_trials": 2},
    }
    if uri:
        data["tracking"] = {"uri": uri}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def server(tmp_path_factory, new_store):
    """A real ``mlflow server`` on loopback with its own SQLite store and artifact folder."""
    root = tmp_path_factory.mktemp("mlflow-server")
    new_store(root)
    port = free_port()
    proc = start_ui(f"sqlite:///{root / 'mlflow.db'}", port=port, log_path=root / "server.log")
    yield f"http://127.0.0.1:{port}", root
    stop_ui(proc)


@pytest.mark.server
def test_study_logs_runs_metrics_and_artifacts_through_the_server(server, tmp_path):
    url, root = server
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path, "over-http", url)),
                                      "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    assert not (out / "mlflow.db").exists()  # everything went to the server
    frame = load_results("over-http", tracking_uri=url)
    assert sorted(frame["trial"]) == [0, 1]
    assert (frame["state"] == "COMPLETE").all()
    assert (frame["n_params"] > 0).all() and frame["best_val_loss"].notna().all()
    client = MlflowClient(url)
    parent = frame.attrs["parent_run_id"]
    artifacts = {a.path for a in client.list_artifacts(parent)}
    assert {"trials.csv", "best_config.yaml", "plots"} <= artifacts, artifacts
    assert any((root / "mlartifacts").rglob("trials.csv"))  # stored by the server
    history = client.get_metric_history(frame["run_id"].iloc[0], "val_loss")
    assert sorted(m.step for m in history) == [2048, 4096]
    shown = CliRunner().invoke(app, ["results", "over-http", "--tracking-uri", url])
    assert shown.exit_code == 0 and "COMPLETE" in shown.output


@pytest.fixture
def dead_url():
    """An address on loopback where nothing listens."""
    return f"http://127.0.0.1:{free_port()}"


def test_run_with_an_unreachable_server_exits_2_and_writes_nothing(tmp_path, dead_url):
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path, "nowhere", dead_url)),
                                      "--out", str(out)])
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert f"tracking.uri {dead_url}: no MLflow server answers there" in text
    assert not out.exists()


def test_unreachable_server_from_the_environment_is_named(tmp_path, dead_url, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", dead_url)
    out = tmp_path / "out"
    path = spec_file(tmp_path, "nowhere-env", None)
    for command in (["run", str(path), "--out", str(out)],
                    ["worker", str(path), "--out", str(out)]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert f"MLFLOW_TRACKING_URI {dead_url}" in " ".join(result.output.split())
        assert not out.exists()


def test_results_from_an_unreachable_server_exits_2(dead_url):
    result = CliRunner().invoke(app, ["results", "some-study", "--tracking-uri", dead_url])
    assert result.exit_code == 2
    assert f"--tracking-uri {dead_url}: no MLflow server answers" in " ".join(
        result.output.split())


def test_a_server_that_asks_for_credentials_counts_as_reachable(dead_url):
    import http.server
    import threading

    from sweep.tracking import UnreachableStoreError, check_reachable

    class Guarded(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            self.send_response(401)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Guarded)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        check_reachable(f"http://127.0.0.1:{httpd.server_port}", "tracking.uri")
    finally:
        httpd.shutdown()
        httpd.server_close()
    with pytest.raises(UnreachableStoreError, match="tracking.uri"):
        check_reachable(dead_url, "tracking.uri")
    check_reachable("sqlite:////nonexistent/mlflow.db")  # files are not this check's business


@pytest.mark.server
def test_urls_that_name_no_mlflow_server_are_refused_without_their_password(server, dead_url):
    import http.server
    import threading

    from sweep.tracking import UnreachableStoreError, check_reachable

    url, _ = server
    port = url.rsplit(":", 1)[1]
    check_reachable(f"http://user:s3cret@127.0.0.1:{port}")  # basic auth, like MLflow sends it
    with pytest.raises(UnreachableStoreError) as info:
        check_reachable(dead_url.replace("http://", "http://user:s3cret@"), "tracking.uri")
    assert "user:***@" in str(info.value) and "s3cret" not in str(info.value)
    for bad in ("http://127.0.0.1:abc", "http://127.0.0.1:99999"):
        with pytest.raises(UnreachableStoreError, match="not a valid URL"):
            check_reachable(bad, "tracking.uri")

    class Other(http.server.BaseHTTPRequestHandler):  # a web server, but not MLflow
        def do_GET(self):  # noqa: N802
            self.send_error(404)

        def log_message(self, *args):
            pass

    httpd = http.server.HTTPServer(("127.0.0.1", 0), Other)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with pytest.raises(UnreachableStoreError, match="not an MLflow tracking server"):
            check_reachable(f"http://127.0.0.1:{httpd.server_port}", "tracking.uri")
        with pytest.raises(UnreachableStoreError, match="404"):  # a wrong path prefix
            check_reachable(f"{url}/mlflow", "tracking.uri")
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.mark.server
def test_json_summary_is_the_only_stdout_with_a_tracking_server(server, tmp_path):
    import json

    url, _ = server
    result = CliRunner().invoke(app, ["run", str(spec_file(tmp_path, "json-over-http", url)),
                                      "--out", str(tmp_path / "out"), "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # no "View run ..." lines from MLflow around it
    assert summary["study"] == "json-over-http" and summary["counts"]["complete"] == 2


def _processes():
    """``(pid, parent pid, argv)`` of every live process, from /proc."""
    found = []
    for task in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = task.read_text().rsplit(")", 1)[1].split()
            argv = (task.parent / "cmdline").read_bytes().decode().split("\0")
        except (OSError, IndexError):  # gone meanwhile
            continue
        if fields[0] != "Z":
            found.append((int(task.parent.name), int(fields[1]), argv))
    return found


@pytest.mark.server
def test_the_server_runs_without_mlflows_job_runner(server):
    # `mlflow server` starts uvicorn and, unless told not to, MLflow's GenAI job runner: a
    # second process importing all of MLflow while the server starts (`start_ui` turns it off).
    url, _ = server
    port = url.rsplit(":", 1)[1]
    processes = _processes()
    (parent,) = [pid for pid, _, argv in processes
                 if argv[1:4] == ["-m", "mlflow", "server"] and port in argv]
    children = [argv for _, ppid, argv in processes if ppid == parent]
    assert len(children) == 1 and "uvicorn" in children[0], children
