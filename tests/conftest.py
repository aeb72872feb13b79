import pytest
import torch

# Test models are tiny: one intra-op thread is as fast as two and leaves the second core to
# the worker processes (Optuna, Ray, MLflow servers) that tests start.
torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
