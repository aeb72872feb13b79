"""The device a trial runs on: which one, which precision, and its datasheet peak for MFU.

Model FLOPs utilisation (MFU; Chowdhery et al. 2022, "PaLM", appendix B) is the model FLOPs
per second a run achieves divided by the device's peak; the peaks are `sweep.train.peaks`'s
datasheet figures. CPUs and unlisted devices have no peak, so no MFU.
"""

from __future__ import annotations

import torch

from sweep.train.config import Precision
from sweep.train.peaks import PEAK_FLOPS

__all__ = ["PEAK_FLOPS", "autocast_dtype", "peak_flops", "pick_device"]


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
