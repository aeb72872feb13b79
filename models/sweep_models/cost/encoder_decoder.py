"""Training-step memory of an encoder-decoder model (`sweep_models.encoder_decoder`), in bytes.

The same op-by-op model as `sweep_models.cost.memory` (its docstring: what each op saves, the three
moments of a step whose largest is the peak), over the encoder-decoder's modules; what every model
shares (weights, optimizer state, the loss, the moments) is its `step_memory`. Notation:
S = src_len source tokens, T_dec = T - S target tokens of a window of T, B batch size,
d = d_model, d_kv = n_kv_heads * d / n_heads, H heads, V vocab.

- Encoder blocks are decoder-only blocks (`sweep_models.cost.memory.block_terms`) over B*S tokens;
  decoder blocks are those over B*T_dec tokens plus their cross-attention.
- A decoder block's cross-attention saves, per target token, what a self-attention branch
  saves but for the keys and values: its norm's input and statistics (pre-norm: the residual
  sum before it and the norm output the query projection reads; post-norm: the sum, the norm's
  output and, under autocast, the query projection's bf16 copy), the queries (d), the attention
  output the output projection reads (d) and the logsumexp (H fp32); per source token, the
  keys and values (2 d_kv) its Linear(d, 2 d_kv) produced from the encoder output. SDPA's math
  path (CPU with dropout) saves the scaled queries, a copy of the output, the (H, S) softmax
  (and its dropout mask and the dropped weights) per target token, and the scaled keys and a
  copy of the values, repeated to H heads (2d), per source token.
- The encoder output (the final norm's, or the last block's for post-norm) is read by every
  decoder layer's key/value projection: fp32, one tensor for all of them; under autocast each
  projection saves its own bf16 copy (d per source token and layer). Its gradient, (B, S, d)
  fp32, accumulates over the decoder's backward, so it is held in the first block's backward.
- The loss is over the B*T_dec target tokens only (the logits are (B, T_dec, V)); the targets'
  slice ``targets[:, S:]`` is copied into a new (B*T_dec,) int64 tensor that the loss saves.
"""

from __future__ import annotations

from sweep_models.config import ModelConfig
from sweep_models.cost.memory import (
    FP32_BYTES,
    INT64_BYTES,
    BlockTerms,
    MemoryEstimate,
    TrainingStep,
    block_terms,
    step_memory,
)
from sweep_models.cost.params import stack_depths
from sweep_models.errors import required

__all__ = ["encoder_decoder_memory"]


def _cross_bytes(config: ModelConfig, b: BlockTerms, s: int) -> tuple[int, int]:
    """Bytes one cross-attention saves per target token and per source token (docstring).

    ``b``: the terms of the step's blocks (any sequence length: these do not depend on it).
    """
    d, h, d_kv = config.d_model, config.n_heads, config.d_kv
    if config.norm_position == "pre":
        norm = b.residual * d + b.norm_stats + b.matmul * d
    else:
        norm = 2 * b.residual * d + b.norm_stats + b.autocast_copy * d
    dropout = b.dropout_matmul * d
    if b.math_path:
        per_target = 2 * b.matmul * d + h * s * b.matmul * (3 if config.dropout > 0 else 1)
        per_source = 2 * b.matmul * d
    else:
        per_target = 2 * b.matmul * d + FP32_BYTES * h
        per_source = b.matmul * 2 * d_kv
    return norm + dropout + per_target, per_source


def encoder_decoder_memory(config: ModelConfig, step: TrainingStep) -> MemoryEstimate:
    """Memory of one steady-state training step of an encoder-decoder model.

    Args:
        config: An ``arch="encoder_decoder"`` model.
        step: The training step: B windows of T tokens (S = src_len < T <= ``config.seq_len``).

    Returns:
        A `sweep_models.cost.MemoryEstimate`, in bytes (module docstring: the model). The arguments
        are not checked; `sweep_models.cost.estimate` checks them.
    """
    d = config.d_model
    s = required("src_len", config.src_len)
    t_dec = step.seq_len - s
    n_enc, n_dec = stack_depths(config)
    enc = block_terms(config, step, s)
    dec = block_terms(config, step, t_dec)
    cross_target, cross_source = _cross_bytes(config, enc, s)

    # the encoder output read by every decoder layer: a pre-norm model's ln_enc output (and
    # its statistics) is new; a post-norm one's is the last block's output, already counted
    if config.norm_position == "pre":
        enc_final = enc.norm_stats + enc.residual * d
    else:
        enc_final = 0
    enc_final += n_dec * enc.autocast_copy * d
    per_source = n_enc * enc.layer + enc.embedding + enc_final + n_dec * cross_source
    per_target = n_dec * (dec.layer + cross_target) + dec.embedding + dec.final
    ids = enc.ids * (s + t_dec) + INT64_BYTES * t_dec  # idx and targets; the targets' slice
    target_tokens = step.batch_size * t_dec
    memory_grad = FP32_BYTES * d * step.batch_size * s  # the encoder output's gradient
    return step_memory(
        config, step, saved=step.batch_size * (per_source * s + per_target * t_dec + ids),
        backward=dec.backward_transient * target_tokens + memory_grad,
        logit_tokens=target_tokens)
