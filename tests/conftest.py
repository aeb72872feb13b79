import pytest
import torch

# Test models are tiny: one intra-op thread is as fast as two and leaves the second core to
# the worker processes (Optuna, Ray, MLflow servers) that tests start.
torch.set_num_threads(1)

# Fixtures that start a server or Ray, and the markers a test using one must carry, so that
# `pytest -m "not slow and not ray and not server"` never starts one.
MARKERS_OF_FIXTURE = {
    "postgres": {"server"},  # tests/sweep/executors/test_postgres_storage.py: initdb + pg_ctl
    "server": {"server"},  # tests/sweep/tracking/test_tracking_server.py: mlflow server
    "head_node": {"ray", "slow"},  # tests/sweep/executors/test_ray_cluster.py: ray start --head
    "local_ray": {"ray"},  # tests/sweep/executors/test_ray_executor.py: ray.init
}


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
