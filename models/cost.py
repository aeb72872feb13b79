"""Analytic cost model: parameters, FLOPs per token and training memory of a `ModelConfig`.

Pure arithmetic on the config (no torch import), a few microseconds per config, so a sweep can
filter thousands of candidate shapes before building any of them. The counts follow the modules
of `models.transformer` exactly; the tests check them against the built module's ``numel``,
``torch.utils.flop_counter.FlopCounterMode`` and a measured training-step peak.

Notation: V vocab, T sequence length, d = d_model, L layers, H heads, q = d / H, f = d_ff,
B batch size.

Parameters
    Token embedding V*d; learned position table T*d; per block: fused QKV Linear(d, 3d), output
    projection Linear(d, d), MLP Linear(d, f) + Linear(f, d) (SwiGLU: two Linear(d, f)), two
    norms; a final norm for pre-norm models; the output projection V*d unless tied.
    `non_embedding_param_count` is Kaplan et al. 2020 (sec. 2.1) N: everything except the token
    embedding, the position table and (untied models) the output projection; biases and norm
    weights are included. For GPT-2 small this is 85,056,000.

FLOPs per token (2 FLOPs per multiply-add of each matmul; bias adds, norms, softmax and
embedding lookups are not counted, as in ``FlopCounterMode``)
    ``flops_per_token``: the matmuls of the QKV, output and MLP projections and the output
    projection (2*d*V), plus attention at 4*q FLOPs per head per query-key pair the mask keeps
    (QK^T and AV), i.e. 4*d*kept_pairs/T per token per layer: causal and sparse masks are
    discounted. Training = 3 x forward (backward = 2 x forward; Kaplan et al. 2020 sec. 2.1).
    ``flops_per_token_dense``: the nanoGPT/PaLM convention (Chowdhery et al. 2022, "PaLM",
    appendix B; nanoGPT ``estimate_mfu``): 6*N + 12*L*H*q*T for training (2*N + 4*L*d*T forward)
    with N every parameter except the position table (and, untied, the input embedding, whose
    lookup is no matmul), and every query attending to all T keys. It charges 2 FLOPs per bias
    and norm weight and ignores masks; Kaplan et al. 2020 table 1 (2*N + 2*L*T*d forward, N
    non-embedding) charges half the attention term and no output projection.

Memory: see `estimate`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from models import patterns
from models.config import ModelConfig
from models.errors import ConfigError
from models.patterns import AttnLayout

__all__ = [
    "DEVICES",
    "DTYPES",
    "MEMORY_BACKENDS",
    "OPTIMIZERS",
    "CostEstimate",
    "MemoryEstimate",
    "attention_pairs",
    "estimate",
    "flops_per_token",
    "non_embedding_param_count",
    "param_count",
]

DTYPES = ("fp32", "bf16")
OPTIMIZERS = ("adamw", "sgd")
DEVICES = ("cuda", "cpu")
# "math" is SDPA's unfused fallback (what CPU runs with attention dropout, or what
# ``sdpa_kernel(SDPBackend.MATH)`` forces): the only path that stores the (B, H, T, T) scores.
MEMORY_BACKENDS = ("auto", "sdpa", "flex", "math")

_FP32 = 4
_INT64 = 8


# ----------------------------------------------------------------------------- parameters
def _norm_params(config: ModelConfig) -> int:
    d = config.d_model
    if config.norm == "rmsnorm":
        return d
    return 2 * d if config.bias else d


def _block_matmul_params(config: ModelConfig) -> int:
    """Weights of one block's Linear layers (no biases)."""
    d, f = config.d_model, config.d_ff
    n_in = 2 if config.activation == "swiglu" else 1
    return 4 * d * d + (n_in + 1) * d * f


def _block_params(config: ModelConfig) -> int:
    d, f = config.d_model, config.d_ff
    n = _block_matmul_params(config) + 2 * _norm_params(config)
    if config.bias:
        n_in = 2 if config.activation == "swiglu" else 1
        n += 3 * d + d + n_in * f + d
    return n


def param_count(config: ModelConfig) -> int:
    """Exact number of parameters of ``build_model(config)``, tied weights counted once.

    Per block 12d^2 + 13d for GPT-2 (d_ff = 4d, biases, LayerNorm); total
    V*d + T*d + L*(12d^2 + 13d) + 2d (nanoGPT ``scaling_laws.ipynb``; HF ``GPT2LMHeadModel``).
    """
    d, v = config.d_model, config.vocab_size
    n = v * d + config.n_layers * _block_params(config)
    if config.pos_encoding == "learned":
        n += config.seq_len * d
    if config.norm_position == "pre":
        n += _norm_params(config)
    if not config.tie_embeddings:
        n += v * d
    return n


def non_embedding_param_count(config: ModelConfig) -> int:
    """Kaplan et al. 2020 (sec. 2.1) N: parameters minus token embedding and position table.

    Untied models also exclude the output projection, so that N describes the transformer body
    alone and is the same tied or untied. Biases and norm weights are included.
    """
    n = param_count(config) - config.vocab_size * config.d_model
    if config.pos_encoding == "learned":
        n -= config.seq_len * config.d_model
    if not config.tie_embeddings:
        n -= config.vocab_size * config.d_model
    return n


def _dense_convention_params(config: ModelConfig) -> int:
    """N of nanoGPT ``estimate_mfu``: all parameters but the position table (tied)."""
    n = param_count(config)
    if config.pos_encoding == "learned":
        n -= config.seq_len * config.d_model
    if not config.tie_embeddings:
        n -= config.vocab_size * config.d_model
    return n


# ----------------------------------------------------------------------------------- FLOPs
def attention_pairs(layout: AttnLayout, seq_len: int | None = None) -> int:
    """Query-key pairs a layout's mask keeps on the first ``seq_len`` positions, per head.

    ``seq_len=None`` (or the layout's own length) gives ``layout.kept_pairs``; a shorter
    sequence sees the top-left ``(seq_len, seq_len)`` block of the mask, as the model slices it.

    Raises:
        ConfigError: If ``seq_len`` exceeds the layout's length.
    """
    t_max = layout.seq_len
    t = t_max if seq_len is None else seq_len
    if t == t_max:
        return layout.kept_pairs
    if not 0 < t <= t_max:
        raise ConfigError(f"seq_len={t} must be in [1, {t_max}] (the config's seq_len)")
    causal = layout.causal
    if layout.pattern == "dense":
        return patterns.total_pairs(t, causal)
    if layout.pattern == "local":
        return patterns._pairs_within(t, layout.window, causal)
    if layout.pattern == "strided":
        kept = patterns._pairs_within(t, layout.stride, causal)
        if layout.stride < t:
            kept += patterns._pairs_multiple(t, layout.stride, causal)
        return kept
    b = layout.block_size
    n_blocks = -(-t // b)
    kept = 0
    for qb in range(n_blocks):
        sq = min(b, t - qb * b)
        for kb in layout.key_blocks[qb]:
            if kb >= n_blocks:
                continue
            if causal and kb == qb:
                kept += sq * (sq + 1) // 2
            elif not causal or kb < qb:
                kept += sq * min(b, t - kb * b)
    return kept


def _flops_fwd(config: ModelConfig, t: int, kept_pairs: int) -> float:
    d = config.d_model
    per_layer = 2 * _block_matmul_params(config) + 4 * d * kept_pairs / t
    return float(config.n_layers * per_layer + 2 * d * config.vocab_size)


def _flops_dense_fwd(config: ModelConfig, t: int) -> float:
    return float(2 * _dense_convention_params(config) + 4 * config.n_layers * config.d_model * t)


def flops_per_token(config: ModelConfig, *, train: bool = False, dense: bool = False) -> float:
    """FLOPs per token at the config's ``seq_len``.

    Args:
        config: The model.
        train: Forward + backward (3 x forward) instead of forward only.
        dense: The nanoGPT/PaLM dense-equivalent convention (6N + 12*L*H*q*T for training)
            instead of the exact matmul count over the pairs the mask keeps.

    Returns:
        FLOPs per token (module docstring: what is counted and the sources).
    """
    t = config.seq_len
    if dense:
        fwd = _flops_dense_fwd(config, t)
    else:
        fwd = _flops_fwd(config, t, config.attn_layout.kept_pairs)
    return 3.0 * fwd if train else fwd


# ---------------------------------------------------------------------------------- memory
@dataclass(frozen=True)
class MemoryEstimate:
    """Training-step memory in bytes.

    Attributes:
        weights: Parameters (fp32, also under bf16 autocast) and the model's buffers (sparse
            mask, RoPE / sinusoidal tables).
        grads: Parameter gradients (fp32), present from the backward pass to the next
            ``zero_grad(set_to_none=True)``.
        optimizer: Optimizer state: AdamW exp_avg and exp_avg_sq (8 bytes/param), SGD momentum
            buffer (4 bytes/param).
        activations: Tensors the forward pass saves for backward, the input and target ids and,
            under bf16 autocast, the bf16 weight copies the linears save.
        logits: Logits, the log-softmax the cross-entropy saves and the two (B*T, V) gradients
            the loss backward creates: the largest moment of the loss.
        total: The modelled peak of a steady-state step (optimizer state already allocated):
            the largest of the start of backward, the middle of backward and the optimizer step.
            It is not the sum of the parts, which do not peak together.
    """

    weights: int
    grads: int
    optimizer: int
    activations: int
    logits: int
    total: int

    def to_dict(self) -> dict[str, int]:
        return asdict(self)


@dataclass(frozen=True)
class CostEstimate:
    """Parameters, FLOPs per token and training memory of one config (see `estimate`)."""

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


def _layout_summary(layout: AttnLayout, kept_pairs: int, t: int) -> dict[str, Any]:
    total = t * (t + 1) // 2 if layout.causal else t * t
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


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ConfigError(f"{name}={value!r} is not one of {', '.join(allowed)}")


def _resolve_backend(config: ModelConfig, backend: str, device: str) -> str:
    """The backend that runs in training: ``sdpa``, ``flex`` (CUDA only) or ``math``."""
    if backend == "auto":
        backend = "flex" if device == "cuda" and config.attn_pattern != "dense" else "sdpa"
    if backend == "flex" and device == "cpu":
        backend = "sdpa"  # FlexAttention has no CPU backward; the model trains with SDPA
    return backend


def _per_token_activation_bytes(config: ModelConfig, t: int, dtype: str, backend: str,
                                device: str) -> tuple[float, float]:
    """Bytes saved for backward per token, and the backward transient per token.

    Returns:
        ``(saved, transient)``: ``saved`` covers the residual stream, every tensor an op saves
        for backward (see `estimate`) and the input and target ids; ``transient`` the largest
        extra a block's backward holds at once.
    """
    d, f, h = config.d_model, config.d_ff, config.n_heads
    a = 2 if dtype == "bf16" else _FP32  # matmul outputs (bf16 under autocast)
    r = _FP32  # residual stream, norm inputs and outputs: fp32 also under autocast
    cast = a if dtype == "bf16" else 0  # bf16 copy of an fp32 tensor a linear saves
    p = config.dropout

    def drop_mask(elem_bytes: int) -> int:
        # CPU F.dropout is `input * bernoulli mask` with the mask in the input's dtype;
        # CUDA uses native_dropout with a bool mask.
        if p == 0:
            return 0
        return 1 if device == "cuda" else elem_bytes

    if config.norm == "rmsnorm":
        norm_extra = r * d + _FP32  # decomposed: saves x * rsqrt(mean(x^2)) and the rsqrt
    else:
        norm_extra = 2 * _FP32  # native_layer_norm saves mean and rstd

    math = backend == "math" or (backend == "sdpa" and device == "cpu" and p > 0)
    if math:
        # Saves q*scale, k^T*scale, a contiguous copy of v (so the QKV output and the rotated
        # q, k are freed), the softmax output and, with dropout, its mask and the dropped
        # weights; the (B, H, T, q) output is copied into the projection's (B, T, d) input.
        attn = 4 * a * d + h * t * a * (3 if p > 0 else 1)
        transient_attn = 2 * a * h * t
    else:
        # The fused QKV output (3d) is held by the q, k, v views the kernel saves; RoPE's
        # rotated q and k are new tensors. The kernels lay their output out as (B, T, H, q)
        # (the layout of q, and the native layout of the CUDA kernels), so the output
        # projection's (B, T, d) input is the same storage; plus the logsumexp (B, H, T).
        attn = 3 * a * d + (2 * a * d if config.pos_encoding == "rope" else 0)
        attn += a * d + _FP32 * h
        transient_attn = 4 * a * d
    mlp = {"relu": 1, "gelu": 2, "swiglu": 4}[config.activation] * a * f
    drops = 2 * drop_mask(a) * d
    if config.norm_position == "pre":
        layer = 2 * a * d + attn + mlp + 2 * r * d + 2 * norm_extra + drops
        final = norm_extra + a * d  # final norm's stats and output (saved by the head)
    else:
        layer = 2 * cast * d + attn + mlp + 4 * r * d + 2 * norm_extra + drops
        final = cast * d  # the head saves the last block's output (a bf16 copy)
    saved = config.n_layers * layer + r * d + drop_mask(r) * d + final + 2 * _INT64
    # Backward of the last block: first the MLP's, which holds the gradients of the hidden
    # layer (GELU: one, as the projection's saved input is freed before the GELU backward
    # runs; ReLU: two, its saved output is still held; SwiGLU: two); then the attention's, once
    # the MLP half of the block is freed, holding the gradients of q, k, v and the output, or
    # the math path's two score gradients (B, H, T, T).
    mlp_grads = (1 if config.activation == "gelu" else 2) * a * f
    mlp_half = mlp + (a + r) * d + norm_extra + drop_mask(a) * d
    return saved, max(transient_attn - mlp_half, mlp_grads)


def estimate(
    config: ModelConfig,
    *,
    batch_size: int = 1,
    seq_len: int | None = None,
    dtype: str = "fp32",
    optimizer: str = "adamw",
    attn_backend: str | None = None,
    device: str = "cuda",
) -> CostEstimate:
    """Parameters, FLOPs per token and the memory of one training step.

    Memory model. Persistent: weights (4 bytes/param, fp32 master weights also under bf16
    autocast) and buffers, optimizer state (AdamW 8 bytes/param; ``sgd`` means SGD with
    momentum, 4 bytes/param); gradients (4 bytes/param) exist from backward until
    ``zero_grad(set_to_none=True)``. With AdamW that is 16 bytes/param, as ZeRO (Rajbhandari et
    al. 2020) sec. 3.1 counts mixed precision (2 + 2 + 12) and fp32 (4 + 4 + 8).

    Activations are what the autograd graph of `models.transformer` holds at the end of the
    forward pass, derived op by op rather than from Korthikanti et al. 2022 table 2
    (T*B*d*(34 + 5*H*T/d) bytes per layer at 16 bits), whose layout (dropout everywhere, scores
    stored) differs. Per block and token, in units of d elements: each Linear saves its input
    (norm outputs, the attention output) and the fused QKV output (3d) is held through the q, k,
    v views SDPA saves; the residual stream (block input and the sum after attention) is held
    by the norms (plus 2 fp32 stats per token; RMSNorm decomposes and also saves x*rsqrt);
    RoPE adds the rotated q and k. The MLP saves f (ReLU saves its output only), 2f (GELU: its
    input and output) or 4f (SwiGLU: gate, up, SiLU output and product). Fused attention (SDPA
    flash/memory-efficient kernels, and the CPU flash kernel ``_scaled_dot_product_flash_
    attention_for_cpu``, which PyTorch runs for both ``is_causal`` and a mask) saves its output
    and the logsumexp (B, H, T) and never the scores; with a mask it saves the mask converted
    to the query's dtype, (T, T) per layer. The math path (``attn_backend="math"``, and what CPU
    dispatches to when attention dropout is on) stores the (B, H, T, T) softmax output, and
    with dropout its mask and the dropped weights. Dropout masks are in the input's dtype on CPU
    (``input * bernoulli``) and 1-byte bools on CUDA. Under bf16 autocast (activation bytes 2),
    norms and the residual stream stay fp32, each Linear saves a bf16 copy of its input and of
    its weight.

    The loss: the (B*T, V) logits (held by the caller), the log-softmax cross-entropy saves,
    and at the start of backward the gradient of the log-softmax and of the logits: 16 bytes
    per logit in fp32 (under autocast: 2 + 4 + 4 + 4). For small models this dominates.

    ``total`` is the largest of three moments of a steady-state step (optimizer state already
    allocated, gradients set to None before forward): the start of backward (weights, state,
    activations, loss); the first block's backward (activations, held logits, the output
    projection's gradient and the block's transient gradients, e.g. two (B, H, T, T) tensors on
    the math path); the optimizer step (weights, state, gradients, held logits and the update's
    temporaries: single-tensor AdamW on CPU allocates two tensors the size of the largest
    parameter, ``foreach`` on CUDA one the size of all). Kernel workspaces and allocator
    rounding are not modelled.

    Args:
        config: The model.
        batch_size: Sequences per step B.
        seq_len: Tokens per sequence T (<= ``config.seq_len``); ``None``: ``config.seq_len``.
            FLOPs per token are counted at this length.
        dtype: ``fp32`` or ``bf16`` (bf16 autocast with fp32 weights, as the trainer on CUDA).
        optimizer: ``adamw`` or ``sgd`` (with momentum).
        attn_backend: ``auto``, ``sdpa``, ``flex`` or ``math``; ``None``: the config's.
        device: ``cuda`` or ``cpu``: which kernels run (see above).

    Returns:
        A `CostEstimate`; memory in bytes, FLOPs per token.

    Raises:
        ConfigError: For an unknown dtype, optimizer, backend or device, a batch size < 1 or a
            sequence length outside [1, config.seq_len].
    """
    backend = config.attn_backend if attn_backend is None else attn_backend
    _check_choice("dtype", dtype, DTYPES)
    _check_choice("optimizer", optimizer, OPTIMIZERS)
    _check_choice("attn_backend", backend, MEMORY_BACKENDS)
    _check_choice("device", device, DEVICES)
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer")
    t = config.seq_len if seq_len is None else seq_len
    layout = config.attn_layout
    kept = attention_pairs(layout, t)
    backend = _resolve_backend(config, backend, device)

    d, v, L = config.d_model, config.vocab_size, config.n_layers  # noqa: N806
    n = param_count(config)
    tokens = batch_size * t
    a = 2 if dtype == "bf16" else _FP32

    buffers = 0
    if config.attn_pattern != "dense":
        buffers += config.seq_len**2  # bool keep-mask
    if config.pos_encoding == "rope":
        buffers += 2 * _FP32 * config.seq_len * config.d_head
    elif config.pos_encoding == "sinusoidal":
        buffers += _FP32 * config.seq_len * d
    weights = _FP32 * n + buffers
    grads = _FP32 * n
    optim = (8 if optimizer == "adamw" else 4) * n

    saved, transient = _per_token_activation_bytes(config, t, dtype, backend, device)
    activations = saved * tokens
    if config.attn_pattern != "dense" and backend == "sdpa":
        activations += L * a * t * t  # the mask as an additive float mask, per layer
    if config.pos_encoding == "learned":
        activations += _INT64 * t  # position ids
    if dtype == "bf16":
        n_linear = L * _block_matmul_params(config) + v * d
        if config.bias:
            n_linear += L * (_block_params(config) - _block_matmul_params(config)
                             - 2 * _norm_params(config))
        activations += 2 * n_linear  # autocast's bf16 weight copies, saved by each Linear
    logits = (16 if dtype == "fp32" else 14) * tokens * v
    held_logits = a * tokens * v

    largest_param = max(v * d, 3 * d * d, d * config.d_ff,
                        config.seq_len * d if config.pos_encoding == "learned" else 0)
    if device == "cpu":
        step_temp = (2 if optimizer == "adamw" else 1) * _FP32 * largest_param
    else:
        step_temp = _FP32 * n
    start_backward = activations + logits
    first_block = activations + held_logits + _FP32 * v * d + transient * tokens
    step = grads + held_logits + 2 * _INT64 * tokens + step_temp
    total = weights + optim + max(start_backward, first_block, step)

    memory = MemoryEstimate(
        weights=int(weights), grads=int(grads), optimizer=int(optim),
        activations=int(activations), logits=int(logits), total=int(total),
    )
    fwd = _flops_fwd(config, t, kept)
    dense_fwd = _flops_dense_fwd(config, t)
    return CostEstimate(
        n_params=n,
        n_params_non_embedding=non_embedding_param_count(config),
        flops_per_token_fwd=fwd,
        flops_per_token_train=3.0 * fwd,
        flops_per_token_dense_fwd=dense_fwd,
        flops_per_token_dense_train=3.0 * dense_fwd,
        memory=memory,
        batch_size=batch_size,
        seq_len=t,
        dtype=dtype,
        optimizer=optimizer,
        attn_backend=backend,
        device=device,
        attn_layout=_layout_summary(layout, kept, t),
    )
