import os
import shutil

import pytest
import torch
from testsupport import free_port

pytest_plugins = ["time_limit", "pytester"]  # time_limit: tests/time_limit.py

# Test models are tiny: one intra-op thread is as fast as two and leaves the second core to
# the worker processes (Optuna, Ray, MLflow servers) that tests start. A trial sets its own
# threads (`sweep.train.hardware.default_threads`), where OMP_NUM_THREADS wins over its share.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

# Fixtures that start a server or Ray, and the markers a test using one must carry, so that
# `pytest -m "not slow and not ray and not server and not browser"` never starts one.
MARKERS_OF_FIXTURE = {
    "postgres": {"server"},  # tests/sweep/executors/test_postgres_storage.py: initdb + pg_ctl
    "server": {"server"},  # tests/sweep/tracking/test_tracking_server.py: mlflow server
    "stoppable_server": {"server"},  # MlflowServer below, one per test
    "module_mlflow_server": {"server"},  # MlflowServer below, one per test module
    "ray_jobs_head": {"ray", "slow", "server"},  # tests/sweep/cli/test_submit_cluster.py
    "head_node": {"ray", "slow"},  # tests/sweep/executors/test_ray_cluster.py: ray start --head
    "local_ray": {"ray"},  # tests/sweep/executors/test_ray_executor.py: ray.init
    "chromium": {"browser"},  # tests/sweep/results/test_browser.py: headless Chromium
    "ui_url": {"server"},  # tests/sweep/results/test_browser.py: `sweep ui` (mlflow server)
}


@pytest.fixture(scope="session")
def empty_store(tmp_path_factory):
    """An MLflow SQLite store as `sweep.tracking.ensure_store` creates it, made once.

    Creating one runs MLflow's schema migrations (5-15 s on a 2-core machine); a copy of this
    one (`new_store`) takes a fraction of a second and is what a study finds and accepts
    (`sweep.study.preflight.check_stores`) where it would otherwise create its own.
    """
    from sweep.tracking import ensure_store

    folder = tmp_path_factory.mktemp("empty-store")
    cwd = os.getcwd()
    os.chdir(folder)  # MLflow's Default experiment keeps its artifacts under the cwd: not here
    try:
        ensure_store(f"sqlite:///{folder / 'mlflow.db'}")
    finally:
        os.chdir(cwd)
    return folder / "mlflow.db"


@pytest.fixture(scope="session")
def new_store(empty_store):
    """``new_store(folder)``: a copy of the empty store at ``folder/mlflow.db``; its URI.

    The folder is created if need be; the URI is ``default_tracking_uri(folder)``.
    """
    def copy(folder):
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(empty_store, folder / "mlflow.db")
        return f"sqlite:///{(folder / 'mlflow.db').resolve()}"

    return copy


class MlflowServer:
    """A real ``mlflow server`` on 127.0.0.1 that a test can stop and start again."""

    def __init__(self, root):
        self.root, self.port = root, free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc = None

    def start(self):
        from sweep.results import start_ui

        self.proc = start_ui(f"sqlite:///{self.root / 'mlflow.db'}", port=self.port,
                             log_path=self.root / "server.log")

    def stop(self):
        from sweep.results import stop_ui

        stop_ui(self.proc)
        self.proc = None


@pytest.fixture
def stoppable_server(tmp_path, new_store):
    new_store(tmp_path)  # the server's store, as a new one (migrated once per session)
    server = MlflowServer(tmp_path)
    server.start()
    yield server
    if server.proc is not None:
        server.stop()


@pytest.fixture(scope="module")
def module_mlflow_server(tmp_path_factory, new_store):
    """One `MlflowServer` for all the tests of a module (its store collects their studies)."""
    server = MlflowServer(tmp_path_factory.mktemp("mlflow-server"))
    new_store(server.root)
    server.start()
    yield server
    if server.proc is not None:
        server.stop()


def pytest_collection_modifyitems(config, items):
    unmarked = [
        f"{item.nodeid} uses fixture {name!r}: mark it {', '.join(sorted(missing))}"
        for item in items
        for name, markers in MARKERS_OF_FIXTURE.items()
        if name in getattr(item, "fixturenames", ())
        and (missing := {m for m in markers if item.get_closest_marker(m) is None})
    ]
    if unmarked:
        raise pytest.UsageError("tests without the markers of what they start:\n"
                                + "\n".join(unmarked))
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
