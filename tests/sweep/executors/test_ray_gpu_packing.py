"""Trials packed on GPUs: ``resources.gpus_per_trial: 0.5`` on a Ray instance with two GPUs.

This machine has no GPU, so the Ray instance only declares two (``ray.init(num_gpus=2)``) and
the study declares their memory (``resources.gpu_memory_gb``). Ray places the trials by those
declarations, as on a real cluster, and sets each trial process's ``CUDA_VISIBLE_DEVICES`` to
the GPU it was placed on; training itself runs on CPU: ``train.device`` is ``auto``, which
picks CUDA only where torch finds a device, and there is none here (each run's tag
``sweep.device`` says ``cpu``). The study is given the instance's address, as a cluster's
would be, since preflight refuses GPUs per trial on a Ray it starts itself on a machine with
no GPU (`sweep.study.preflight.check_gpus`).
"""

import logging
from collections import Counter

import pytest
from mlflow import MlflowClient

from sweep import space
from sweep.spec import parse_spec
from sweep.study import run_study
from sweep.train.config import TrainConfig
from sweep.train.cuda_probe import no_cuda_driver
from sweep_models.config import ModelConfig

ray = pytest.importorskip("ray")

pytestmark = [pytest.mark.ray, pytest.mark.slow]

N_TRIALS = 5
SMALL, LARGE = 16, 64  # d_model: four trials of the small shape train, the large one may not


@pytest.fixture
def two_gpu_ray():
    ray.init(num_cpus=8, num_gpus=2, include_dashboard=False, _node_ip_address="127.0.0.1",
             log_to_driver=False, logging_level=logging.WARNING)
    try:
        yield ray.get_runtime_context().gcs_address
    finally:
        ray.shutdown()


def make_spec(seed, gpu_memory_gb):
    return parse_spec({
        "name": "gpu-packing",
        "data": "synthetic:markov?order=1&vocab=16&seed=0&tokens=60000",
        "model": {"vocab_size": 16, "seq_len": 32, "d_model": {"choice": [SMALL, LARGE]},
                  "n_heads": 2, "n_layers": 1},
        # Long enough that four trials, started as their processes come up, overlap.
        "train": {"seconds": 8, "batch_size": 4, "lr": {"float": [1e-3, 3e-2], "log": True},
                  "eval_every": 2048, "eval_tokens": 256},
        # More trials may run than the GPUs hold, so the GPUs alone bound the concurrency.
        "search": {"executor": "ray", "sampler": "random", "scheduler": "none",
                   "n_trials": N_TRIALS, "parallel": N_TRIALS, "seed": seed},
        "resources": {"cpus_per_trial": 1, "gpus_per_trial": 0.5,
                      "gpu_memory_gb": gpu_memory_gb},
    })


def memory_estimate(d_model):
    """The cost model's training memory of the spec's shape at ``d_model``, bytes."""
    model = ModelConfig(vocab_size=16, seq_len=32, d_model=d_model, n_heads=2, n_layers=1)
    return space.training_cost(model, TrainConfig(seconds=8, batch_size=4), "cpu").memory.total


def most_at_once(runs):
    """The most runs open at one instant, and one such set of runs (MLflow times, ms)."""
    best, best_set = 0, []
    for r in runs:
        t = r.info.start_time
        open_now = [o for o in runs if o.info.start_time <= t < o.info.end_time]
        if len(open_now) > best:
            best, best_set = len(open_now), open_now
    return best, best_set


def test_half_a_gpu_per_trial_runs_four_trials_on_two_gpus(tmp_path, two_gpu_ray, new_store):
    assert no_cuda_driver()  # the premise of this test: Ray's GPUs are declared, not real
    small, large = memory_estimate(SMALL), memory_estimate(LARGE)
    # The large shape fits a whole GPU of this size but not half of one; the small one does.
    gpu_memory_gb = 1.5 * large / 1e9
    assert small < gpu_memory_gb * 1e9 / 2 < large < gpu_memory_gb * 1e9
    # A seed whose first four draws are small shapes (those run at once) and the fifth large.
    for seed in range(500):
        draws = space.sample_params(make_spec(seed, gpu_memory_gb), N_TRIALS, seed=seed)
        if [d["model.d_model"] for d in draws] == [SMALL] * 4 + [LARGE]:
            break
    else:
        raise AssertionError("no seed draws four small shapes, then a large one")
    spec = make_spec(seed, gpu_memory_gb)
    new_store(tmp_path)
    summary = run_study(spec, out_dir=tmp_path, quiet=True, ray_address=two_gpu_ray)
    assert {k: n for k, n in summary.counts.items() if n} == {"COMPLETE": 4, "INFEASIBLE": 1}

    client = MlflowClient(summary.tracking_uri)
    runs = client.search_runs(
        [client.get_run(summary.parent_run_id).info.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{summary.parent_run_id}'")
    by_state = {}
    for r in runs:
        by_state.setdefault(r.data.tags["sweep.state"], []).append(r)
    (infeasible,) = by_state["INFEASIBLE"]
    assert infeasible.data.params["model.d_model"] == str(LARGE)
    half = gpu_memory_gb * 1e9 / 2
    assert infeasible.data.tags["sweep.fail_reason"] == (
        f"estimated memory {large / 1e9:.3g} GB > resources.gpus_per_trial=0.5 of "
        f"resources.gpu_memory_gb ({half / 1e9:.3g} GB)")
    trained = by_state["COMPLETE"]
    assert {r.data.params["model.d_model"] for r in trained} == {str(SMALL)}
    assert {r.data.tags["sweep.device"] for r in trained} == {"cpu"}  # no GPU here, see above

    # Two GPUs at half a GPU each: four trials at once, never more, two on each GPU.
    count, together = most_at_once(runs)
    assert count == 4
    assert Counter(r.data.tags["sweep.cuda_visible_devices"] for r in together) == \
        {"0": 2, "1": 2}
    assert infeasible.data.tags["sweep.cuda_visible_devices"] in {"0", "1"}
