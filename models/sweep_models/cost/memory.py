"""Training-step memory of `sweep_models.transformer`, in bytes, derived op by op.

Notation: V vocab, T sequence length, d = d_model, L layers, H heads, q = d / H, f = d_ff,
B batch size, N parameters.

Persistent: weights (4 bytes/param, fp32 master weights also under bf16 autocast) and buffers,
optimizer state (AdamW 8 bytes/param; ``sgd`` means SGD with momentum, 4 bytes/param);
gradients (4 bytes/param) exist from backward until ``zero_grad(set_to_none=True)``. With AdamW
that is 16 bytes/param, as ZeRO (Rajbhandari et al. 2020) sec. 3.1 counts mixed precision
(2 + 2 + 12) and fp32 (4 + 4 + 8).

Activations are what the autograd graph of `sweep_models.transformer` holds at the end of the
forward pass, derived op by op rather than from Korthikanti et al. 2022 table 2 (T*B*d*(34 +
5*H*T/d) bytes per layer at 16 bits), whose layout (dropout everywhere, scores stored) differs. Per
block and token, in units of d elements: each Linear saves its input (norm outputs, the attention
output) and the fused QKV output (3d; d + 2 d_kv with grouped-query attention) is held through the
q, k, v views SDPA saves; the residual stream (block input and the sum after attention) is held by
the norms (plus 2 fp32 stats per token; RMSNorm decomposes and also saves x*rsqrt); RoPE adds the
rotated q and k. The MLP saves f (ReLU saves its output only), 2f (GELU: its input and output) or 4f
(SwiGLU: gate, up, SiLU output and product). Fused attention (SDPA flash/memory-efficient kernels,
and the CPU flash kernel ``_scaled_dot_product_flash_attention_for_cpu``, which PyTorch runs for
both ``is_causal`` and a mask) saves its output and the logsumexp (B, H, T) and never the scores;
with a mask it saves the mask converted to the query's dtype, (T, T) per layer. The math path
(``attn_backend="math"``, and what CPU dispatches to when attention dropout is on) stores the (B, H,
T, T) softmax output, and with dropout its mask and the dropped weights. Dropout masks are in the
input's dtype on CPU (``input * bernoulli``) and 1-byte bools on CUDA. Under bf16 autocast
(activation bytes 2), norms and the residual stream stay fp32, each Linear saves a bf16 copy of its
input and of its weight.

The loss: the (B*T, V) logits (held by the caller), the log-softmax cross-entropy saves, and at
the start of backward the gradient of the log-softmax and of the logits: 16 bytes per logit in
fp32 (under autocast: 2 + 4 + 4 + 4). For small models this dominates.

The peak (``total``) is the largest of four moments of a steady-state step (optimizer state
already allocated, gradients set to None before forward): the start of backward (weights, state,
activations, loss); the first block's backward (activations, held logits, the output
projection's gradient and the block's transient gradients, e.g. two (B, H, T, T) tensors on the
math path); with tied embeddings, the end of backward (every gradient, held logits, and the
token table's lookup gradient added out of place to the output projection's: two more V x d);
the optimizer step (weights, state, gradients, held logits and the update's
temporaries, for the optimizer the trainer builds: ``foreach`` AdamW on CPU allocates one tensor
the size of the parameter group it updates, ``fused`` AdamW on CUDA none). Kernel workspaces and
allocator rounding are not modelled.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal, get_args

from sweep_models.config import ModelConfig
from sweep_models.cost.optimizer import update_temp_bytes
from sweep_models.cost.params import block_linear_params, param_count, position_rows
from sweep_models.errors import required

__all__ = [
    "BlockTerms",
    "DEVICES",
    "DTYPES",
    "MEMORY_BACKENDS",
    "OPTIMIZERS",
    "Device",
    "Dtype",
    "MemoryBackend",
    "MemoryEstimate",
    "Optimizer",
    "TrainingStep",
    "block_terms",
    "resolve_backend",
    "step_memory",
    "training_memory",
]

Dtype = Literal["fp32", "bf16"]
Optimizer = Literal["adamw", "sgd"]
Device = Literal["cuda", "cpu"]
# "math" is SDPA's unfused fallback (what CPU runs with attention dropout, or what
# ``sdpa_kernel(SDPBackend.MATH)`` forces): the only path that stores the (B, H, T, T) scores.
MemoryBackend = Literal["auto", "sdpa", "flex", "math"]

DTYPES: tuple[str, ...] = get_args(Dtype)
OPTIMIZERS: tuple[str, ...] = get_args(Optimizer)
DEVICES: tuple[str, ...] = get_args(Device)
MEMORY_BACKENDS: tuple[str, ...] = get_args(MemoryBackend)

FP32_BYTES = 4
BF16_BYTES = 2
INT64_BYTES = 8  # token ids, position ids
BOOL_BYTES = 1  # sparse keep-mask, CUDA dropout masks
#: Optimizer state per parameter: AdamW exp_avg and exp_avg_sq, SGD its momentum buffer.
OPTIMIZER_STATE_BYTES_PER_PARAM = {"adamw": 2 * FP32_BYTES, "sgd": FP32_BYTES}


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


def resolve_backend(config: ModelConfig, backend: str, device: str) -> str:
    """The attention backend that runs in training: ``sdpa``, ``flex`` (CUDA only) or ``math``.

    ``auto`` is FlexAttention on CUDA for sparse patterns and SDPA otherwise, as
    `sweep_models.attention.SelfAttention` picks it.
    """
    if backend == "auto":
        backend = "flex" if device == "cuda" and config.attn_pattern != "dense" else "sdpa"
    if backend == "flex" and device == "cpu":
        backend = "sdpa"  # FlexAttention has no CPU backward; the model trains with SDPA
    return backend


@dataclass(frozen=True)
class TrainingStep:
    """One training step: what its memory depends on besides the model.

    Attributes:
        batch_size: Sequences (windows) per step B.
        seq_len: Tokens per sequence T (<= the config's ``seq_len``).
        dtype: ``fp32`` or ``bf16`` (bf16 autocast with fp32 weights).
        optimizer: ``adamw`` or ``sgd`` (with momentum).
        backend: The resolved attention backend, ``sdpa``, ``flex`` or ``math``
            (`resolve_backend`).
        device: ``cuda`` or ``cpu``.
    """

    batch_size: int
    seq_len: int
    dtype: Dtype
    optimizer: Optimizer
    backend: str
    device: Device

    @property
    def matmul_bytes(self) -> int:
        """Bytes of a matmul output element: 2 under bf16 autocast, else 4."""
        return BF16_BYTES if self.dtype == "bf16" else FP32_BYTES


@dataclass(frozen=True)
class BlockTerms:
    """Per-token bytes of one block and its surroundings, the pieces of `training_memory`.

    Attributes:
        layer: Saved for backward by one block, per token.
        final: The final norm's saved tensors (and the head's saved input), per token.
        embedding: The embedding sum and its dropout mask, per token.
        ids: Input and target ids, per token.
        mlp_grad: The MLP's backward transient, per token.
        mlp_half: What the MLP half of a block frees once its backward is done, per token.
        attn_transient: The attention's backward transient, per token.
        matmul: Bytes of a matmul output element (2 under bf16 autocast, else 4).
        residual: Bytes of a residual-stream element (4).
        autocast_copy: Bytes of the bf16 copy a Linear saves of an fp32 input (0 in fp32).
        norm_stats: A norm's saved statistics per token (RMSNorm: also x * rsqrt).
        dropout_matmul: A dropout mask's bytes per element on a matmul output (0 without).
        dropout_residual: A dropout mask's bytes per element on an fp32 tensor (0 without).
        math_path: Whether attention runs SDPA's unfused math path.
    """

    layer: int
    final: int
    embedding: int
    ids: int
    mlp_grad: int
    mlp_half: int
    attn_transient: int
    matmul: int
    residual: int
    autocast_copy: int
    norm_stats: int
    dropout_matmul: int
    dropout_residual: int
    math_path: bool

    @property
    def backward_transient(self) -> int:
        """The most a block's backward holds at once beyond the saved tensors, per token."""
        return max(self.attn_transient - self.mlp_half, self.mlp_grad)


def _dropout_mask_bytes(config: ModelConfig, device: str, elem_bytes: int) -> int:
    """A dropout mask's bytes per element of a tensor of ``elem_bytes`` (0 without dropout).

    CPU ``F.dropout`` is ``input * bernoulli mask`` with the mask in the input's dtype; CUDA
    uses ``native_dropout`` with a bool mask.
    """
    if config.dropout == 0:
        return 0
    return BOOL_BYTES if device == "cuda" else elem_bytes


def _norm_stats_bytes(config: ModelConfig) -> int:
    """A norm's saved statistics per token, beyond its input.

    ``native_layer_norm`` saves mean and rstd; RMSNorm is decomposed and saves
    x * rsqrt(mean(x^2)) (d elements) and the rsqrt.
    """
    if config.norm == "rmsnorm":
        return FP32_BYTES * config.d_model + FP32_BYTES
    return 2 * FP32_BYTES


def _attention_bytes(config: ModelConfig, seq_len: int, matmul_bytes: int,
                     math_path: bool) -> tuple[int, int]:
    """Bytes one self-attention saves per token, and its backward transient per token."""
    d, h, t = config.d_model, config.n_heads, seq_len
    d_kv = config.d_kv  # keys' and values' width: d, or less with grouped-query attention
    if math_path:
        # Saves q*scale, k^T*scale, a contiguous copy of v (so the QKV output and the rotated
        # q, k are freed), the softmax output and, with dropout, its mask and the dropped
        # weights; the (B, H, T, q) output is copied into the projection's (B, T, d) input.
        # Grouped-query keys and values are first repeated to H heads, so all are d wide.
        saved = 4 * matmul_bytes * d + h * t * matmul_bytes * (3 if config.dropout > 0 else 1)
        return saved, 2 * matmul_bytes * h * t  # the two score gradients (B, H, T, T)
    # The fused QKV output (d + 2 d_kv) is held by the q, k, v views the kernel saves
    # (grouped-query kernels read the H_kv key and value heads without copying them);
    # RoPE's rotated q and k are new tensors. The kernels lay their output out as
    # (B, T, H, q) (the layout of q, and the native layout of the CUDA kernels), so the
    # output projection's (B, T, d) input is the same storage; plus the logsumexp (B, H, T).
    saved = matmul_bytes * (d + 2 * d_kv)
    if config.pos_encoding == "rope":
        saved += matmul_bytes * (d + d_kv)
    saved += matmul_bytes * d + FP32_BYTES * h
    return saved, matmul_bytes * (2 * d + 2 * d_kv)  # the gradients of q, k, v and the output


def block_terms(config: ModelConfig, step: TrainingStep, seq_len: int) -> BlockTerms:
    """The per-token pieces of the activation memory of blocks over sequences of ``seq_len``.

    Args:
        config: The model.
        step: The training step: its dtype, backend and device.
        seq_len: Tokens each block attends over (the math path's scores are that wide): the
            step's T, or an encoder-decoder model's S or T_dec.

    Returns:
        A `BlockTerms`, in bytes (module docstring: what each tensor is).
    """
    d, f = config.d_model, required("d_ff", config.d_ff)
    # matmul outputs: bf16 under autocast; the residual stream, norm inputs and outputs: fp32
    # also under autocast, of which each Linear saves a bf16 copy
    matmul_bytes, residual_bytes = step.matmul_bytes, FP32_BYTES
    autocast_copy_bytes = BF16_BYTES if step.dtype == "bf16" else 0
    dropout_matmul = _dropout_mask_bytes(config, step.device, matmul_bytes)
    dropout_residual = _dropout_mask_bytes(config, step.device, residual_bytes)
    norm_stats_bytes = _norm_stats_bytes(config)
    math_path = step.backend == "math" or (step.backend == "sdpa" and step.device == "cpu"
                                           and config.dropout > 0)
    attn_bytes, attn_transient_bytes = _attention_bytes(config, seq_len, matmul_bytes, math_path)
    mlp_hidden_tensors = {"relu": 1, "gelu": 2, "swiglu": 4}[config.activation]
    mlp_bytes = mlp_hidden_tensors * matmul_bytes * f
    dropout_bytes = 2 * dropout_matmul * d  # after attention and MLP
    if config.norm_position == "pre":
        layer_bytes = (2 * matmul_bytes * d + attn_bytes + mlp_bytes + 2 * residual_bytes * d
                       + 2 * norm_stats_bytes + dropout_bytes)
        # final norm's stats and output (saved by the head)
        final_bytes = norm_stats_bytes + matmul_bytes * d
    else:
        layer_bytes = (2 * autocast_copy_bytes * d + attn_bytes + mlp_bytes
                       + 4 * residual_bytes * d + 2 * norm_stats_bytes + dropout_bytes)
        final_bytes = autocast_copy_bytes * d  # the head saves the last block's output
    # Backward of the last block: first the MLP's, which holds the gradients of the hidden
    # layer (GELU: one, as the projection's saved input is freed before the GELU backward
    # runs; ReLU: two, its saved output is still held; SwiGLU: two); then the attention's, once
    # the MLP half of the block is freed, holding the gradients of q, k, v and the output, or
    # the math path's two score gradients (B, H, T, T).
    mlp_grad_bytes = (1 if config.activation == "gelu" else 2) * matmul_bytes * f
    mlp_half_bytes = (mlp_bytes + (matmul_bytes + residual_bytes) * d + norm_stats_bytes
                      + dropout_matmul * d)
    return BlockTerms(
        layer=layer_bytes, final=final_bytes,
        embedding=residual_bytes * d + dropout_residual * d,
        ids=2 * INT64_BYTES,  # input and target ids
        mlp_grad=mlp_grad_bytes, mlp_half=mlp_half_bytes, attn_transient=attn_transient_bytes,
        matmul=matmul_bytes, residual=residual_bytes, autocast_copy=autocast_copy_bytes,
        norm_stats=norm_stats_bytes, dropout_matmul=dropout_matmul,
        dropout_residual=dropout_residual, math_path=math_path)


def _buffer_bytes(config: ModelConfig) -> int:
    """The model's buffers, built at the config's sizes whatever the step's sequence length."""
    rows = position_rows(config)
    out = 0
    if config.attn_pattern != "dense":
        out += BOOL_BYTES * config.seq_len**2  # keep-mask
    if config.pos_encoding == "rope":
        out += 2 * FP32_BYTES * rows * config.d_head  # cos and sin tables
    elif config.pos_encoding == "sinusoidal":
        out += FP32_BYTES * rows * config.d_model
    return out


def step_memory(config: ModelConfig, step: TrainingStep, *, saved: int, backward: int,
                logit_tokens: int) -> MemoryEstimate:
    """The memory of a steady-state step from what a model's forward pass saves.

    What every model shares (module docstring: the model and its sources): weights and
    buffers, gradients and optimizer state; the position ids and autocast's weight copies among
    the activations; the loss over the logits of ``logit_tokens`` tokens; and the three moments
    of a step, whose largest is the peak.

    Args:
        config: The model.
        step: The training step.
        saved: Bytes the blocks, embeddings, final norms and ids save for backward, over the
            step's B sequences.
        backward: Bytes the first block's backward holds at once beyond the saved tensors.
        logit_tokens: Tokens whose logits the loss reads: B*T, or B*T_dec for an
            encoder-decoder model.

    Returns:
        A `MemoryEstimate`, in bytes.
    """
    d, v = config.d_model, config.vocab_size
    n_params = param_count(config)
    weight_bytes = FP32_BYTES * n_params + _buffer_bytes(config)
    grad_bytes = FP32_BYTES * n_params
    optimizer_bytes = OPTIMIZER_STATE_BYTES_PER_PARAM[step.optimizer] * n_params

    activation_bytes = saved
    if config.pos_encoding == "learned":
        activation_bytes += INT64_BYTES * step.seq_len  # position ids
    if step.dtype == "bf16":
        # autocast's bf16 weight (and bias) copies, saved by each Linear
        activation_bytes += BF16_BYTES * (block_linear_params(config) + v * d)
    # logits, log-softmax output (fp32) and the gradients of both (fp32)
    loss_bytes = (step.matmul_bytes + 3 * FP32_BYTES) * logit_tokens * v
    held_logit_bytes = step.matmul_bytes * logit_tokens * v

    step_temp_bytes = update_temp_bytes(config, step.optimizer, step.device)
    start_of_backward = activation_bytes + loss_bytes
    first_block_backward = activation_bytes + held_logit_bytes + FP32_BYTES * v * d + backward
    # A tied token table's two gradients, the output projection's and the lookup's (dense),
    # summed out of place at the end of backward.
    tied_table_sum = (grad_bytes + held_logit_bytes + 2 * FP32_BYTES * v * d
                      if config.tie_embeddings else 0)
    optimizer_step = (grad_bytes + held_logit_bytes
                      + 2 * INT64_BYTES * step.batch_size * step.seq_len + step_temp_bytes)
    total = weight_bytes + optimizer_bytes + max(start_of_backward, first_block_backward,
                                                 tied_table_sum, optimizer_step)
    return MemoryEstimate(
        weights=int(weight_bytes), grads=int(grad_bytes), optimizer=int(optimizer_bytes),
        activations=int(activation_bytes), logits=int(loss_bytes), total=int(total),
    )


def training_memory(config: ModelConfig, step: TrainingStep) -> MemoryEstimate:
    """Memory of one steady-state training step (module docstring: the model and its sources).

    Args:
        config: A decoder-only model.
        step: The training step (``step.seq_len <= config.seq_len``).

    Returns:
        A `MemoryEstimate`, in bytes. The arguments are not checked; `sweep_models.cost.estimate`
        checks them.
    """
    t, n_layers = step.seq_len, config.n_layers
    tokens = step.batch_size * t
    b = block_terms(config, step, t)
    saved = (n_layers * b.layer + b.embedding + b.final + b.ids) * tokens
    if config.attn_pattern != "dense" and step.backend == "sdpa":
        saved += n_layers * b.matmul * t * t  # the mask as a float mask
    return step_memory(config, step, saved=saved, backward=b.backward_transient * tokens,
                       logit_tokens=tokens)
