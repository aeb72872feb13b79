"""The spec's constraints, checked with the cost model before a trial trains.

An infeasible config costs no training; the constraint values also go to Optuna's
``constraints_func``.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sweep.schema import (
    ATTR_CONSTRAINTS,
    METRIC_FLOPS_PER_TOKEN,
    METRIC_MEM_ESTIMATE,
    METRIC_N_PARAMS,
)
from sweep.spec import StudySpec
from sweep.train.config import TrainConfig
from sweep_models.config import ModelConfig

if TYPE_CHECKING:
    from sweep_models.cost.memory import Device, Dtype

#: Constraint values per trial, in order: parameters, forward FLOPs per token, memory.
CONSTRAINT_NAMES = ("max_params", "max_flops_per_token", "max_memory")


N_CONSTRAINTS = len(CONSTRAINT_NAMES)


# ----------------------------------------------------------------------------- constraints
@functools.lru_cache(maxsize=8)
def device_memory_bytes(device: str = "auto") -> int:
    """Memory a trial on ``device`` may use: the CUDA device's total memory, else the host RAM.

    Raises:
        ValueError: For an unknown or unavailable device.
    """
    if _surely_cpu(device):
        return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    from sweep.train.hardware import pick_device

    dev = pick_device(device)
    if dev.type == "cuda":
        import torch

        return int(torch.cuda.get_device_properties(dev).total_memory)
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def gpu_share(spec: StudySpec) -> float:
    """The fraction of one GPU a trial of ``spec`` gets: 0 to 1, 0 without GPUs.

    ``resources.gpus_per_trial`` of a Ray study (the one executor that places trials on
    GPUs), at most 1: a trial trains on one device, whatever number of GPUs it holds.
    """
    if spec.search.executor != "ray":
        return 0.0
    return min(spec.resources.gpus_per_trial, 1.0)


def _gpu_memory_bytes(spec: StudySpec, device: str) -> float | None:
    """``resources.gpu_memory_gb`` in bytes, else the CUDA device's; None off a GPU."""
    if spec.resources.gpu_memory_gb:
        return spec.resources.gpu_memory_gb * 1e9
    if _surely_cpu(device):
        return None
    from sweep.train.hardware import pick_device

    if pick_device(device).type != "cuda":
        return None
    return float(device_memory_bytes(device))


def memory_limit(spec: StudySpec, device: str = "auto") -> tuple[float, str]:
    """The memory a trial on ``device`` may use, bytes, and where the limit comes from.

    In order: ``constraints.max_memory_gb``; for a trial holding a share of a GPU
    (`gpu_share`: ``resources.gpus_per_trial``) on a device other than ``cpu``, that share of
    the GPU's memory (``resources.gpu_memory_gb``, else the CUDA device's total memory), so
    trials packed on one GPU fit beside each other; else the memory of ``device`` (CUDA
    total memory or host RAM).

    Returns:
        ``(limit_bytes, what)``, ``what`` naming the limit for a message.

    Raises:
        ValueError: For an unknown or unavailable device.
    """
    gb = spec.constraints.max_memory_gb
    if gb:
        return gb * 1e9, "constraints.max_memory_gb"
    share = gpu_share(spec)
    if share and device != "cpu":
        gpu = _gpu_memory_bytes(spec, device)
        if gpu is not None:
            source = ("resources.gpu_memory_gb" if spec.resources.gpu_memory_gb
                      else f"the memory of {device}")
            return share * gpu, f"resources.gpus_per_trial={share:g} of {source}"
    return float(device_memory_bytes(device)), f"memory of {device}"


def memory_limit_bytes(spec: StudySpec, device: str = "auto") -> float:
    """The memory a trial on ``device`` may use, bytes (`memory_limit`).

    Raises:
        ValueError: For an unknown or unavailable device.
    """
    return memory_limit(spec, device)[0]


def training_cost(model_cfg: ModelConfig, train_cfg: TrainConfig, device: str) -> Any:
    """The cost model's estimate for one training micro-batch of this trial on ``device``.

    ``train.batch_size`` sequences of ``seq_len`` tokens, in the precision the trial will use
    (``auto``: bf16 autocast where the device supports it) and with the attention kernels of
    the device's type.

    Returns:
        A `sweep_models.cost.CostEstimate` (memory in bytes, FLOPs per token).

    Raises:
        ValueError: An unknown or unavailable device.
    """
    from sweep_models.cost import DEVICES, estimate
    from sweep_models.errors import check_choice

    kind: Device
    dtype: Dtype
    if _surely_cpu(device):  # no torch needed: autocast is bf16 on CPU only when asked for
        kind, dtype = "cpu", "bf16" if train_cfg.precision == "bf16" else "fp32"
    else:
        from sweep.train.hardware import autocast_dtype, pick_device

        dev = pick_device(device)
        check_choice("device", dev.type, DEVICES)  # another type (mps) as `estimate` refuses it
        kind = "cuda" if dev.type == "cuda" else "cpu"
        dtype = "bf16" if autocast_dtype(train_cfg.precision, dev) is not None else "fp32"
    return estimate(model_cfg, batch_size=train_cfg.batch_size, seq_len=model_cfg.seq_len,
                    dtype=dtype, device=kind)


def _surely_cpu(device: str | None) -> bool:
    """``cpu``, or ``auto`` on a machine without a CUDA driver: decided without torch."""
    from sweep.train.cuda_probe import no_cuda_driver

    return device == "cpu" or (device in (None, "auto") and no_cuda_driver())


def constraint_values(spec: StudySpec, cost: Mapping[str, float], *,
                      memory_limit_bytes: float) -> list[float]:
    """Optuna constraint values, <= 0 when feasible (`N_CONSTRAINTS` of them).

    Relative excess of parameters, forward FLOPs per token and training memory over the spec's
    limits; -1 where there is no limit.

    Args:
        spec: The study spec (its ``constraints``).
        cost: A trial's cost metrics by name (`sweep.schema.cost_metrics`, or its run's).
        memory_limit_bytes: The memory a trial may use (`memory_limit_bytes`).
    """
    c = spec.constraints
    return [
        cost[METRIC_N_PARAMS] / c.max_params - 1.0 if c.max_params else -1.0,
        cost[METRIC_FLOPS_PER_TOKEN] / c.max_flops_per_token - 1.0 if c.max_flops_per_token
        else -1.0,
        cost[METRIC_MEM_ESTIMATE] / memory_limit_bytes - 1.0,
    ]


def check_constraints(
    spec: StudySpec, model_cfg: ModelConfig, train_cfg: TrainConfig, device: str | None = None
) -> tuple[bool, str | None, Any]:
    """Price a config with the cost model and check ``spec.constraints``.

    Memory is the training estimate for one micro-batch (``train.batch_size`` sequences) in
    the precision the trial will use, against `memory_limit` on ``device`` (default:
    ``train.device``): ``max_memory_gb``, else a trial's share of a GPU, else the device's
    memory.

    Returns:
        ``(ok, reason, cost)``: ``reason`` names each broken limit (None when ok); ``cost`` is
        the `sweep_models.cost.CostEstimate`.
    """
    device = device or train_cfg.device
    cost = training_cost(model_cfg, train_cfg, device)
    c = spec.constraints
    limit, what = memory_limit(spec, device)
    reasons = []
    if c.max_params and cost.n_params > c.max_params:
        reasons.append(f"n_params={cost.n_params:,} > constraints.max_params={c.max_params:,}")
    if c.max_flops_per_token and cost.flops_per_token_fwd > c.max_flops_per_token:
        reasons.append(f"flops_per_token={cost.flops_per_token_fwd:.4g} > "
                       f"constraints.max_flops_per_token={c.max_flops_per_token:.4g}")
    if cost.memory.total > limit:
        reasons.append(f"estimated memory {cost.memory.total / 1e9:.3g} GB > {what} "
                       f"({limit / 1e9:.3g} GB)")
    return not reasons, "; ".join(reasons) or None, cost


def record_constraints(trial: Any, values: list[float]) -> None:
    """Attach constraint values (from `constraint_values`) to an Optuna trial.

    They go where Optuna 5 samplers read them (``Trial.set_constraint``, one key per entry of
    `CONSTRAINT_NAMES`; TPE, GP and NSGA-II rank infeasible trials below feasible ones) and, for
    the results table and `constraints_func`, into ``user_attrs["constraints"]``.
    """
    values = [float(v) for v in values]
    trial.set_user_attr(ATTR_CONSTRAINTS, values)
    for name, value in zip(CONSTRAINT_NAMES, values, strict=True):
        trial.set_constraint(name, value)


def constraints_func(trial: Any) -> list[float]:
    """``constraints_func`` for samplers built elsewhere: the values `record_constraints` stored.

    Optuna 5 deprecates ``constraints_func`` in favour of ``Trial.set_constraint``, which
    `record_constraints` already calls, so `make_sampler` does not pass this. A trial that
    stored none (it failed before the check) counts as feasible.
    """
    return list(trial.user_attrs.get(ATTR_CONSTRAINTS, [0.0] * N_CONSTRAINTS))
