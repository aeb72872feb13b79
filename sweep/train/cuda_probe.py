"""Whether a machine can have a CUDA device, decided without importing torch.

Light enough for the checks that run before anything heavy loads (`sweep.study.preflight`,
the cost check of `sweep.space.constraints` on a CPU-only machine).
"""

from __future__ import annotations

import ctypes
import os
import sys

__all__ = ["no_cuda_driver"]


def no_cuda_driver() -> bool:
    """Whether this machine surely has no CUDA device for torch, found without importing it.

    True on macOS (no CUDA builds of torch), and on Linux when neither NVIDIA's driver library
    (``libcuda.so.1``, which every CUDA build of torch loads) nor ROCm's kernel driver
    (``/dev/kfd``; ROCm builds answer ``torch.cuda`` too) is present. False where either is,
    or on other systems: then torch decides.
    """
    if sys.platform == "darwin":
        return True
    if not sys.platform.startswith("linux") or os.path.exists("/dev/kfd"):
        return False
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return True
    return False
