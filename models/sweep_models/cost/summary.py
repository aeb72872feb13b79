"""`estimate`: parameters, FLOPs per token and training memory of one config and step shape."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sweep_models import patterns
from sweep_models.config import ModelConfig
from sweep_models.cost.encoder_decoder import encoder_decoder_memory
from sweep_models.cost.flops import (
    TRAIN_FLOPS_PER_FORWARD_FLOP,
    attention_pairs,
    dense_forward_flops_per_token,
    encoder_decoder_pairs,
    forward_flops_per_token,
)
from sweep_models.cost.memory import (
    DEVICES,
    DTYPES,
    MEMORY_BACKENDS,
    OPTIMIZERS,
    Device,
    Dtype,
    MemoryBackend,
    MemoryEstimate,
    Optimizer,
    TrainingStep,
    resolve_backend,
    training_memory,
)
from sweep_models.cost.params import non_embedding_param_count, param_count
from sweep_models.errors import ConfigError, check_choice
from sweep_models.patterns import AttnLayout

__all__ = ["CostEstimate", "estimate"]


@dataclass(frozen=True)
class CostEstimate:
    """Parameters, FLOPs per token and training memory of one config (see `estimate`).

    Attributes:
        n_params: Parameters, tied weights counted once (`sweep_models.cost.params.param_count`).
        n_params_non_embedding: Kaplan et al. 2020's N (`non_embedding_param_count`).
        flops_per_token_fwd: Forward FLOPs per token over the kept query-key pairs.
        flops_per_token_train: Forward + backward FLOPs per token, 3 x forward.
        flops_per_token_dense_fwd: Forward FLOPs per token, nanoGPT/PaLM dense convention.
        flops_per_token_dense_train: Training FLOPs per token, dense convention (6N + 12LHqT).
        memory: Bytes of one training step (`sweep_models.cost.memory`).
        batch_size: Sequences per step B.
        seq_len: Tokens per sequence T the FLOPs and memory are counted at.
        dtype: ``fp32`` or ``bf16``.
        optimizer: ``adamw`` or ``sgd``.
        attn_backend: The backend that runs in training (``sdpa``, ``flex`` or ``math``).
        device: ``cuda`` or ``cpu``.
        attn_layout: The pattern, its size and the pairs it keeps at ``seq_len``; for an
            encoder-decoder model, also ``encoder_pairs``, ``decoder_pairs`` and
            ``cross_pairs`` (`sweep_models.cost.flops.encoder_decoder_pairs`), whose sum is
            ``kept_pairs``.
    """

    n_params: int
    n_params_non_embedding: int
    flops_per_token_fwd: float
    flops_per_token_train: float
    flops_per_token_dense_fwd: float
    flops_per_token_dense_train: float
    memory: MemoryEstimate
    batch_size: int
    seq_len: int
    dtype: str
    optimizer: str
    attn_backend: str
    device: str
    attn_layout: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        """Plain values; memory under ``memory_bytes``, the attention layout under ``attn``."""
        out = {k: getattr(self, k) for k in (
            "n_params", "n_params_non_embedding", "flops_per_token_fwd",
            "flops_per_token_train", "flops_per_token_dense_fwd", "flops_per_token_dense_train",
            "batch_size", "seq_len", "dtype", "optimizer", "attn_backend", "device")}
        out["memory_bytes"] = self.memory.to_dict()
        out["attn"] = dict(self.attn_layout)
        return out


def _layout_summary(layout: AttnLayout, kept_pairs: int, seq_len: int,
                    config: ModelConfig) -> dict[str, Any]:
    if config.arch == "encoder_decoder":
        pairs = encoder_decoder_pairs(config, seq_len)
        return {"pattern": layout.pattern, "requested_sparsity": layout.requested_sparsity,
                "sparsity": 0.0, "kept_pairs": kept_pairs, "total_pairs": kept_pairs,
                **{f"{k}_pairs": v for k, v in pairs.items()}}
    total = patterns.total_pairs(seq_len, layout.causal)
    out: dict[str, Any] = {
        "pattern": layout.pattern,
        "requested_sparsity": layout.requested_sparsity,
        "sparsity": 1.0 - kept_pairs / total,
        "kept_pairs": kept_pairs,
        "total_pairs": total,
    }
    for name in ("window", "stride", "block_size", "n_window_blocks", "n_global_blocks",
                 "n_random_blocks"):
        value = getattr(layout, name)
        if value is not None:
            out[name] = value
    return out


def estimate(
    config: ModelConfig,
    *,
    batch_size: int = 1,
    seq_len: int | None = None,
    dtype: Dtype = "fp32",
    optimizer: Optimizer = "adamw",
    attn_backend: MemoryBackend | None = None,
    device: Device = "cuda",
) -> CostEstimate:
    """Parameters, FLOPs per token and the memory of one training step.

    What each figure counts and its sources: `sweep_models.cost.params` (parameters),
    `sweep_models.cost.flops` (FLOPs per token, exact and the nanoGPT/PaLM dense convention) and
    `sweep_models.cost.memory` (the op-by-op memory model and the peak of a steady-state step).

    Args:
        config: The model.
        batch_size: Sequences per step B.
        seq_len: Tokens per sequence T (<= ``config.seq_len``); ``None``: ``config.seq_len``.
            FLOPs per token are counted at this length.
        dtype: ``fp32`` or ``bf16`` (bf16 autocast with fp32 weights, as the trainer on CUDA).
        optimizer: ``adamw`` or ``sgd`` (with momentum).
        attn_backend: ``auto``, ``sdpa``, ``flex`` or ``math``; ``None``: the config's.
        device: ``cuda`` or ``cpu``: which kernels run (see `sweep_models.cost.memory`).

    For an encoder-decoder model (``arch="encoder_decoder"``) a token is any position of the
    window, source or target (`sweep_models.cost.flops`), and the memory is
    `sweep_models.cost.encoder_decoder.encoder_decoder_memory`'s.

    Returns:
        A `CostEstimate`; memory in bytes, FLOPs per token.

    Raises:
        ConfigError: For an unknown dtype, optimizer, backend or device, a batch size < 1 or a
            sequence length outside [1, config.seq_len] (for an encoder-decoder model,
            [src_len + 1, config.seq_len]).
    """
    requested: MemoryBackend = config.attn_backend if attn_backend is None else attn_backend
    check_choice("dtype", dtype, DTYPES)
    check_choice("optimizer", optimizer, OPTIMIZERS)
    check_choice("attn_backend", requested, MEMORY_BACKENDS)
    check_choice("device", device, DEVICES)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer")
    t = config.seq_len if seq_len is None else seq_len
    layout = config.attn_layout
    backend = resolve_backend(config, requested, device)
    memory_of = training_memory
    if config.arch == "encoder_decoder":
        pairs = encoder_decoder_pairs(config, t)
        kept = sum(pairs.values())
        memory_of = encoder_decoder_memory
    else:
        kept = attention_pairs(layout, t)
    memory = memory_of(config, TrainingStep(batch_size=batch_size, seq_len=t, dtype=dtype,
                                            optimizer=optimizer, backend=backend, device=device))
    fwd = forward_flops_per_token(config, t, kept)
    dense_fwd = dense_forward_flops_per_token(config, t)
    return CostEstimate(
        n_params=param_count(config),
        n_params_non_embedding=non_embedding_param_count(config),
        flops_per_token_fwd=fwd,
        flops_per_token_train=TRAIN_FLOPS_PER_FORWARD_FLOP * fwd,
        flops_per_token_dense_fwd=dense_fwd,
        flops_per_token_dense_train=TRAIN_FLOPS_PER_FORWARD_FLOP * dense_fwd,
        memory=memory,
        batch_size=batch_size,
        seq_len=t,
        dtype=dtype,
        optimizer=optimizer,
        attn_backend=backend,
        device=device,
        attn_layout=_layout_summary(layout, kept, t, config),
    )
