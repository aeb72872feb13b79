"""FLOPs per token of `sweep_models.transformer`, forward and training.

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

Encoder-decoder models (``arch="encoder_decoder"``): a token is a position of the window,
source or target, so FLOPs per token are the FLOPs of one window of T = S + T_dec tokens
divided by T (S = src_len source tokens, T_dec = T - S target tokens): the trainer counts
tokens the same way (batch_size * seq_len a step), so FLOPs per token times tokens trained is
the training compute. Per window: each encoder layer's projections and MLP on S tokens and its
bidirectional attention over S^2 pairs; each decoder layer's self-attention projections and
MLP on T_dec tokens, its causal attention over T_dec (T_dec + 1) / 2 pairs, and its
cross-attention (Vaswani et al. 2017, sec. 3.2.3): the query and output projections on T_dec
tokens, the key and value projection Linear(d, 2 d_kv) on the S encoder outputs, and
QK^T and AV over T_dec * S pairs (queries T_dec, keys S); the output projection on T_dec tokens
only. The dense convention generalises 2N: 2 FLOPs per parameter for each token that
parameter multiplies (encoder parameters on S tokens, the cross-attention's keys and values on
S, the rest of the decoder and the output projection on T_dec), plus attention over every
pair, the decoder's causal mask ignored.

Training is 3 x forward in both: the backward pass computes the gradients of each matmul's
input and weight, two matmuls of the forward's size (Kaplan et al. 2020, sec. 2.1). Recomputation
(e.g. the scores a flash-attention backward recomputes) is not counted, as in torchtitan's
``get_dense_model_nparams_and_flops``.
"""

from __future__ import annotations

from sweep_models import patterns
from sweep_models.config import ModelConfig
from sweep_models.cost.params import (
    block_params,
    cross_attn_params,
    dense_convention_params,
    n_mlp_inputs,
    norm_params,
    qkv_width,
    stack_depths,
)
from sweep_models.errors import ConfigError, required
from sweep_models.patterns import AttnLayout

__all__ = [
    "TRAIN_FLOPS_PER_FORWARD_FLOP",
    "attention_pairs",
    "dense_forward_flops_per_token",
    "encoder_decoder_pairs",
    "flops_per_token",
    "forward_flops_per_token",
]

#: Forward + backward, the backward being 2 x forward (Kaplan et al. 2020, sec. 2.1).
TRAIN_FLOPS_PER_FORWARD_FLOP = 3.0


def attention_pairs(layout: AttnLayout, seq_len: int | None = None) -> int:
    """Query-key pairs a layout's mask keeps on the first ``seq_len`` positions, per head.

    ``seq_len=None`` (or the layout's own length) gives ``layout.kept_pairs``; a shorter
    sequence sees the top-left ``(seq_len, seq_len)`` block of the mask, as the model slices it
    (counted by `sweep_models.patterns.kept_pairs`).

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


def encoder_decoder_pairs(config: ModelConfig, seq_len: int | None = None) -> dict[str, int]:
    """Query-key pairs per head of an encoder-decoder model's three attentions on one window.

    Args:
        config: An ``arch="encoder_decoder"`` model.
        seq_len: Window length T (S = src_len < T <= config.seq_len); ``None``: the config's.

    Returns:
        ``encoder`` S^2 (bidirectional), ``decoder`` T_dec (T_dec + 1) / 2 (causal) and
        ``cross`` T_dec * S (queries T_dec, keys S), with T_dec = T - S.

    Raises:
        ConfigError: If ``seq_len`` leaves no target token or exceeds the config's.
    """
    t = config.seq_len if seq_len is None else seq_len
    s = required("src_len", config.src_len)
    if not s < t <= config.seq_len:
        raise ConfigError(f"seq_len={t} must be in [{s + 1}, {config.seq_len}] (src_len={s} "
                          "source tokens and at least one target token)")
    t_dec = t - s
    return {"encoder": s * s, "decoder": t_dec * (t_dec + 1) // 2, "cross": t_dec * s}


def _layer_flops(config: ModelConfig) -> tuple[int, int, int]:
    """Per token: the fused QKV projection, the attention output projection and the MLP."""
    d, f = config.d_model, required("d_ff", config.d_ff)
    qkv = 2 * d * qkv_width(config)  # fused QKV projection Linear(d, d + 2 d_kv); MHA: 3d
    attn_out = 2 * d * d  # attention output projection Linear(d, d)
    mlp = 2 * (n_mlp_inputs(config) + 1) * d * f  # Linear(d, f) (SwiGLU: two) + Linear(f, d)
    return qkv, attn_out, mlp


def _encoder_decoder_forward_flops(config: ModelConfig, seq_len: int, *, dense: bool) -> float:
    """Forward FLOPs per token of an encoder-decoder window (module docstring)."""
    d, v, d_kv = config.d_model, config.vocab_size, config.d_kv
    pairs = encoder_decoder_pairs(config, seq_len)
    s = required("src_len", config.src_len)
    t_dec = seq_len - s
    n_enc, n_dec = stack_depths(config)
    if dense:
        pairs["decoder"] = t_dec * t_dec  # the causal mask ignored
        kv = 2 * d * d_kv + (2 * d_kv if config.bias else 0)  # cross keys and values
        head = dense_convention_params(config) - n_enc * block_params(config) \
            - n_dec * (block_params(config) + norm_params(config) + cross_attn_params(config))
        enc_norm = norm_params(config) if config.norm_position == "pre" else 0
        # head: the output projection (the tied embedding, or the untied head) and ln_f
        weights = 2 * (s * (n_enc * block_params(config) + enc_norm + n_dec * kv)
                       + t_dec * (n_dec * (block_params(config) + norm_params(config)
                                           + cross_attn_params(config) - kv)
                                  + head - enc_norm))
    else:
        qkv, attn_out, mlp = _layer_flops(config)
        cross_proj = 2 * (2 * d * d)  # cross-attention queries Linear(d, d) and output
        cross_kv = 2 * d * 2 * d_kv  # keys and values Linear(d, 2 d_kv) of an encoder output
        weights = (n_enc * s * (qkv + attn_out + mlp)
                   + n_dec * (t_dec * (qkv + attn_out + mlp + cross_proj) + s * cross_kv)
                   + t_dec * 2 * d * v)  # output projection on the target tokens only
    # QK^T and AV: 4*d FLOPs per pair over the H query heads (GQA included, as below)
    attention = 4 * d * (n_enc * pairs["encoder"] + n_dec * (pairs["decoder"] + pairs["cross"]))
    return float(weights + attention) / seq_len


def forward_flops_per_token(config: ModelConfig, seq_len: int, kept_pairs: int) -> float:
    """Forward FLOPs per token of the matmuls the model runs, over the pairs the mask keeps.

    Args:
        config: The model.
        seq_len: Tokens per sequence T.
        kept_pairs: Query-key pairs the mask keeps per head on T positions (`attention_pairs`);
            not used for an encoder-decoder model, whose pairs follow from ``src_len``
            (`encoder_decoder_pairs`).

    Returns:
        FLOPs per token (module docstring: what is counted; for an encoder-decoder model, per
        source or target token of the window).
    """
    if config.arch == "encoder_decoder":
        return _encoder_decoder_forward_flops(config, seq_len, dense=False)
    d, v = config.d_model, config.vocab_size
    qkv, attn_out, mlp = _layer_flops(config)
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
        FLOPs per token (module docstring: the convention and its sources; for an
        encoder-decoder model its generalisation, per source or target token).
    """
    if config.arch == "encoder_decoder":
        return _encoder_decoder_forward_flops(config, seq_len, dense=True)
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
