"""The device a trial runs on: which one, which precision, its datasheet peak for MFU, its threads.

Model FLOPs utilisation (MFU; Chowdhery et al. 2022, "PaLM", appendix B) is the model FLOPs
per second a run achieves divided by the device's peak; the peaks are `sweep.train.peaks`'s
datasheet figures. CPUs and unlisted devices have no peak, so no MFU.

CPU threads (`default_threads`). Trials that run at once share the machine's cores, so each trial's
torch intra-op threads (``torch.set_num_threads``) default to its share: the cores this process may
run on (`cpu_cores`) divided by the trials running at once, and no more than the cores idle when it
starts (`idle_cores`: 0.1 s of waiting, rounded, at least 1); a Ray trial's share is the whole CPUs
Ray reserved for it (``resources.cpus_per_trial``). ``OMP_NUM_THREADS``, when set, is the user's
choice and wins over the share. More threads than free cores is the slow case: on 2 cores that other
work kept busy (load average 14-16), a quickstart-sized trial of 8,192 tokens took 22.8 s with
torch's default 2 threads and 1.8 s with one, two such trials at once 53.3 s and 4.3 s
(``bench/threads.py``), while on an idle machine 2 threads were 1.1x faster than one (issue 23). The
thread count moves a loss by float noise only: one float32 ulp at most in the measurements of
`tests/sweep/study/test_threads.py`, none in the benchmark.
"""

from __future__ import annotations

import math
import os
import time

import torch

from sweep.train.config import Precision
from sweep.train.peaks import PEAK_FLOPS

__all__ = ["PEAK_FLOPS", "autocast_dtype", "cpu_cores", "default_threads", "idle_cores",
           "peak_flops", "pick_device", "set_threads"]


def pick_device(requested: str | None = "auto") -> torch.device:
    """``auto``/``None``: CUDA when present, else CPU; anything else is passed to torch.

    Raises:
        ValueError: For an unknown device string or an unavailable CUDA device.
    """
    if requested in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(requested)
    except RuntimeError as exc:
        raise ValueError(f"device={requested!r} is not a torch device (cpu, cuda, cuda:N, "
                         f"mps): {exc}") from None
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device={requested!r} requested but CUDA is not available")
    if device.type == "cuda" and device.index is not None \
            and device.index >= torch.cuda.device_count():
        raise ValueError(f"device={requested!r}: this machine has "
                         f"{torch.cuda.device_count()} CUDA device(s)")
    return device


def autocast_dtype(precision: Precision, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``, or ``None`` for plain fp32.

    ``auto`` is bf16 on CUDA devices that support it, fp32 elsewhere.
    """
    if precision == "fp32":
        return None
    if precision == "bf16":
        return torch.bfloat16
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return None


def peak_flops(device: torch.device, dtype: torch.dtype | None) -> float | None:
    """Datasheet peak FLOP/s of ``device`` at ``dtype`` (bf16 or fp32), ``None`` if unknown."""
    if device.type != "cuda":
        return None
    name = torch.cuda.get_device_name(device)
    for key, (bf16, fp32, _source) in PEAK_FLOPS.items():
        if key in name:
            return bf16 if dtype == torch.bfloat16 else fp32
    return None


def cpu_cores() -> int:
    """CPUs this process may run on: its affinity mask where the OS has one, else all of them."""
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return max(1, os.cpu_count() or 1)


#: How long a process reuses its last `idle_cores` reading, seconds: many short trials in a row
#: pay its 0.1 s wait once, not each.
IDLE_READING_TTL_S = 30.0
_last_idle: tuple[float, float | None] | None = None  # (time.monotonic() of the reading, value)


def idle_cores(window_s: float = 0.1) -> float | None:
    """CPUs of the machine left idle over ``window_s`` seconds; None where unknown.

    From the aggregate ``cpu`` line of Linux's ``/proc/stat`` (proc(5)): the idle and iowait
    share of the time of the first eight fields, times the CPU count. The kernel counts in
    ticks of 1/100 s (USER_HZ), so 0.1 s on 2 CPUs resolves a tenth of a core. A reading is
    reused for `IDLE_READING_TTL_S` seconds.
    """
    global _last_idle
    now = time.monotonic()
    if _last_idle is not None and now - _last_idle[0] < IDLE_READING_TTL_S:
        return _last_idle[1]
    value = _read_idle_cores(window_s)
    _last_idle = (time.monotonic(), value)
    return value


def _read_idle_cores(window_s: float) -> float | None:
    def sample() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as f:
            values = [int(v) for v in f.readline().split()[1:9]]
        return values[3] + values[4], sum(values)

    try:
        idle0, total0 = sample()
        time.sleep(window_s)
        idle1, total1 = sample()
    except (OSError, ValueError, IndexError):
        return None
    if total1 <= total0:
        return None
    return (os.cpu_count() or 1) * (idle1 - idle0) / (total1 - total0)


def default_threads(concurrent_trials: int = 1, cpus_per_trial: float | None = None) -> int:
    """A trial's torch intra-op threads when the spec does not set them (module docstring).

    Args:
        concurrent_trials: Trials training at once in this machine's processes (Optuna's
            ``search.parallel``); they share `cpu_cores`.
        cpus_per_trial: The CPUs Ray reserved for the trial; when given, its whole part is the
            share and ``OMP_NUM_THREADS`` is not read (Ray sets it to the same in its workers).

    Returns:
        At least 1: ``floor(cpus_per_trial)``; else ``OMP_NUM_THREADS`` when it is a positive
        integer; else ``cpu_cores() // concurrent_trials``, capped by ``round(idle_cores())``.
    """
    if cpus_per_trial is not None:
        return max(1, math.floor(cpus_per_trial))
    omp = os.environ.get("OMP_NUM_THREADS", "").strip()
    if omp.isdigit() and int(omp) > 0:
        return int(omp)
    share = cpu_cores() // max(1, concurrent_trials)
    idle = idle_cores() if share > 1 else None
    if idle is not None:
        share = min(share, round(idle))
    return max(1, share)


def set_threads(threads: int) -> int:
    """Set torch's intra-op threads for this process (``torch.set_num_threads``); ``threads``."""
    torch.set_num_threads(threads)
    return threads
