import os

import pytest
import torch

# CI machines have 2 cores; keep intra-op threads bounded so parallel Ray/Optuna workers in
# tests do not oversubscribe them.
torch.set_num_threads(min(2, os.cpu_count() or 1))


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    skip_gpu = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip_gpu)
