"""FLOPs per token of `models.transformer`, forward and training.

Notation: V vocab, T sequence length, d = d_model, L layers, H heads, q = d / H, f = d_ff,
d_kv = n_kv_heads * q, N parameters.

Two counts, both at 2 FLOPs per multiply-add of each matmul (a (m x k)(k x n) matmul is 2mkn
FLOPs, as ``torch.utils.flop_counter.FlopCounterMode`` counts mm/addmm/bmm); bias adds, norms,
softmax, activations and embedding lookups are not counted.

- Exact (`flops_per_token`, default): the matmuls the model runs, with attention charged only
  for the query-key pairs its mask keeps, so causal and sparse masks are discounted.
- Dense convention (``dense=True``): the nanoGPT/PaLM figure (Chowdhery et al. 2022, "PaLM",
  appendix B; nanoGPT ``estimate_mfu``), 2N + 4*L*d*T forward and 6N + 12*L*H*q*T for
  training, with every query attending to all T keys. It charges 2 FLOPs per bias and norm
  weight and ignores masks. For nanoGPT's default config (V = 50304, T = 1024, L = 12, d = 768,
  H = 12, no bias) it is 854,770,176 per training token. Kaplan et al. 2020 table 1
  (2N + 2*L*T*d forward, N non-embedding) charges half this attention term and no output
  projection.

Training is 3 x forward in both: the backward pass computes the gradients of each matmul's
input and weight, two matmuls of the forward's size (Kaplan et al. 2020, sec. 2.1). Recomputation
(e.g. the scores a flash-attention backward recomputes) is not counted, as in torchtitan's
``get_dense_model_nparams_and_flops``.
"""

from __future__ import annotations

from models import patterns
from models.config import ModelConfig
from models.cost.params import dense_convention_params, n_mlp_inputs, qkv_width
from models.errors import ConfigError
from models.patterns import AttnLayout

__all__ = [
    "TRAIN_FLOPS_PER_FORWARD_FLOP",
    "attention_pairs",
    "dense_forward_flops_per_token",
    "flops_per_token",
    "forward_flops_per_token",
]

#: Forward + backward, the backward being 2 x forward (Kaplan et al. 2020, sec. 2.1).
TRAIN_FLOPS_PER_FORWARD_FLOP = 3.0


def attention_pairs(layout: AttnLayout, seq_len: int | None = None) -> int:
    """Query-key pairs a layout's mask keeps on the first ``seq_len`` positions, per head.

    ``seq_len=None`` (or the layout's own length) gives ``layout.kept_pairs``; a shorter
    sequence sees the top-left ``(seq_len, seq_len)`` block of the mask, as the model slices it
    (counted by `models.patterns.kept_pairs`).

    Raises:
        ConfigError: If ``seq_len`` is outside [1, the layout's length].
    """
    t_max = layout.seq_len
    t = t_max if seq_len is None else seq_len
    if t == t_max:
        return layout.kept_pairs
    if not 0 < t <= t_max:
        raise ConfigError(f"seq_len={t} must be in [1, {t_max}] (the config's seq_len)")
    return patterns.kept_pairs(
        layout.pattern, t, causal=layout.causal, window=layout.window, stride=layout.stride,
        block_size=layout.block_size, key_blocks=layout.key_blocks,
    )


def forward_flops_per_token(config: ModelConfig, seq_len: int, kept_pairs: int) -> float:
    """Forward FLOPs per token of the matmuls the model runs, over the pairs the mask keeps.

    Args:
        config: The model.
        seq_len: Tokens per sequence T.
        kept_pairs: Query-key pairs the mask keeps per head on T positions (`attention_pairs`).

    Returns:
        FLOPs per token (module docstring: what is counted).
    """
    d, f, v = config.d_model, config.d_ff, config.vocab_size
    qkv = 2 * d * qkv_width(config)  # fused QKV projection Linear(d, d + 2 d_kv); MHA: 3d
    attn_out = 2 * d * d  # attention output projection Linear(d, d)
    mlp = 2 * (n_mlp_inputs(config) + 1) * d * f  # Linear(d, f) (SwiGLU: two) + Linear(f, d)
    # QK^T and AV: 2*q FLOPs each per query head and kept pair, 4*d over the H heads (with
    # grouped-query attention too: every query head still meets every kept key); a sequence
    # has kept_pairs of them over its T tokens (the causal mask keeps T(T+1)/2, not T^2)
    attention = 4 * d * kept_pairs / seq_len
    head = 2 * d * v  # output projection Linear(d, V) to the logits, tied or not
    return float(config.n_layers * (qkv + attn_out + mlp + attention) + head)


def dense_forward_flops_per_token(config: ModelConfig, seq_len: int) -> float:
    """Forward FLOPs per token in the nanoGPT/PaLM dense convention: 2N + 4*L*d*T.

    Args:
        config: The model.
        seq_len: Tokens per sequence T.

    Returns:
        FLOPs per token (module docstring: the convention and its sources).
    """
    # 2 FLOPs per parameter a token multiplies: all but the position table and, untied, the
    # input embedding (PaLM appendix B; nanoGPT estimate_mfu's N = get_num_params())
    weights = 2 * dense_convention_params(config)
    # QK^T and AV of every query with all T keys, 2 matmuls of 2*q*T per head: 4*L*d*T, a
    # third of PaLM appendix B's training term 12*L*H*q*T; no causal discount
    attention = 4 * config.n_layers * config.d_model * seq_len
    return float(weights + attention)


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
        fwd = dense_forward_flops_per_token(config, t)
    else:
        fwd = forward_flops_per_token(config, t, config.attn_layout.kept_pairs)
    return TRAIN_FLOPS_PER_FORWARD_FLOP * fwd if train else fwd
