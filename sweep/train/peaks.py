"""Datasheet peaks of the GPUs the service knows, and a named GPU's time for a number of FLOPs.

Model FLOPs utilisation (MFU; Chowdhery et al. 2022, "PaLM", appendix B) is the model FLOPs
per second a run achieves divided by the device's peak, so a run of F FLOPs takes
F / (peak x MFU) seconds. Peaks are dense (no 2:4 sparsity) tensor throughput from the vendors'
datasheets; ``fp32`` is the non-tensor FP32 rate, since PyTorch does not use TF32 for matmuls
unless asked to. No torch here: ``sweep validate`` prices a study on a named GPU without it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sweep.errors import InputError

__all__ = ["DEFAULT_GPU", "DEFAULT_MFU", "PEAK_FLOPS", "NamedGpu", "UnknownGpuError",
           "check_mfu", "named_gpu"]

# Substring of torch.cuda.get_device_name -> (bf16 dense, fp32) FLOP/s and the source. Order
# matters: the first key found in the name wins ("H100 PCIe" before "H100").
PEAK_FLOPS: dict[str, tuple[float, float, str]] = {
    "H200": (989.4e12, 67.0e12, "NVIDIA H200 Tensor Core GPU datasheet (SXM), 2024"),
    "H100 PCIe": (756.0e12, 51.0e12, "NVIDIA H100 Tensor Core GPU datasheet (PCIe), 2023"),
    "H100": (989.4e12, 67.0e12, "NVIDIA H100 Tensor Core GPU datasheet (SXM), 2023"),
    "A100": (312.0e12, 19.5e12, "NVIDIA A100 Tensor Core GPU datasheet, 2021"),
    "L40S": (362.05e12, 91.6e12, "NVIDIA L40S datasheet, 2023"),
    "L4": (121.0e12, 30.3e12, "NVIDIA L4 Tensor Core GPU datasheet, 2023"),
    "A10": (125.0e12, 31.2e12, "NVIDIA A10 Tensor Core GPU datasheet, 2021"),
}

#: The GPU ``sweep validate --gpu`` prices a study on when not told.
DEFAULT_GPU = "H100"
#: The MFU it assumes when not told: about what large dense transformers reach in bf16
#: (PaLM reports 46.2% at 540B, Chowdhery et al. 2022 table 3); small models reach less.
DEFAULT_MFU = 0.4


class UnknownGpuError(InputError, LookupError):
    """A GPU name that is not a key of `PEAK_FLOPS`."""


@dataclass(frozen=True)
class NamedGpu:
    """A GPU by name at an assumed MFU.

    Attributes:
        name: The `PEAK_FLOPS` key.
        precision: ``bf16`` (tensor cores) or ``fp32``: which datasheet peak.
        peak_flops: Its datasheet peak at ``precision``, FLOP/s.
        mfu: The fraction of the peak a run is assumed to reach, in (0, 1].
        source: The datasheet.
    """

    name: str
    precision: str
    peak_flops: float
    mfu: float
    source: str

    def seconds(self, flops: float) -> float:
        """Seconds ``flops`` FLOPs take: flops / (peak x MFU) (PaLM appendix B)."""
        return flops / (self.peak_flops * self.mfu)


def check_mfu(mfu: float) -> float:
    """``mfu`` if it is a fraction in (0, 1].

    Raises:
        InputError: Naming ``--mfu`` and the rule.
    """
    if not 0 < mfu <= 1:
        raise InputError(f"--mfu {mfu:g}: MFU is the fraction of the peak a run reaches, "
                         "in (0, 1] (e.g. 0.4)")
    return mfu


def named_gpu(name: str, mfu: float = DEFAULT_MFU, precision: str = "bf16") -> NamedGpu:
    """The GPU ``name`` (case, spaces and hyphens ignored: ``h100-pcie``) at ``mfu``.

    ``precision`` ``fp32`` takes the FP32 peak; anything else (``bf16``, ``auto``) the bf16
    tensor peak, since ``auto`` trains in bf16 on every GPU listed.

    Raises:
        UnknownGpuError: ``name`` is not listed; the message lists the known names.
        InputError: ``mfu`` outside (0, 1].
    """
    check_mfu(mfu)
    wanted = _squash(name)
    key = next((k for k in PEAK_FLOPS if _squash(k) == wanted), None)
    if key is None:
        raise UnknownGpuError(f"--gpu {name!r} is not a GPU whose peak is known; known: "
                              f"{', '.join(PEAK_FLOPS)}")
    bf16, fp32, source = PEAK_FLOPS[key]
    exact = "fp32" if precision == "fp32" else "bf16"
    return NamedGpu(key, exact, fp32 if exact == "fp32" else bf16, mfu, source)


def _squash(name: str) -> str:
    return "".join(ch for ch in name.lower() if ch.isalnum())
