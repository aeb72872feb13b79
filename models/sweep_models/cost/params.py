"""Parameter counts of `sweep_models.transformer`, exact, tied weights counted once.

Notation: V vocab, T sequence length, d = d_model, L layers, f = d_ff, d_kv = n_kv_heads *
d_head the width of the keys and of the values (d without grouped-query attention).

Per block: fused QKV Linear(d, d + 2 d_kv) (Linear(d, 3d) for multi-head attention; grouped-query
attention, Ainslie et al. 2023, shares each key/value head among n_heads / n_kv_heads query
heads), output projection Linear(d, d), MLP Linear(d, f) +
Linear(f, d) (SwiGLU: two Linear(d, f)), two norms (LayerNorm d weights + d biases, or d without
bias; RMSNorm d). Around the blocks: token embedding V*d, learned position table T*d, a final
norm for pre-norm models, the output projection V*d unless tied to the token embedding.

Encoder-decoder models (``arch="encoder_decoder"``, `sweep_models.encoder_decoder`): encoder blocks
are the blocks above; a decoder block adds a third norm and the cross-attention, queries
Linear(d, d), keys and values Linear(d, 2 d_kv) and output Linear(d, d) (Vaswani et al. 2017,
sec. 3.2.3). One token embedding V*d serves both stacks (and the tied output projection, sec.
3.4), a learned position table has max(S, T_dec) rows (S = src_len, T_dec = seq_len - S), and a
pre-norm model has two final norms (encoder and decoder).

For GPT-2 (d_ff = 4d, biases, LayerNorm) a block has 12d^2 + 13d parameters and the model
V*d + T*d + L*(12d^2 + 13d) + 2d (nanoGPT ``scaling_laws.ipynb``; HF ``GPT2LMHeadModel``):
124,439,808 for GPT-2 small.
"""

from __future__ import annotations

from sweep_models.config import ModelConfig
from sweep_models.errors import required

__all__ = [
    "block_bias_params",
    "block_linear_params",
    "block_matmul_params",
    "block_params",
    "cross_attn_params",
    "decoder_block_params",
    "dense_convention_params",
    "position_rows",
    "n_mlp_inputs",
    "non_embedding_param_count",
    "norm_params",
    "param_count",
    "qkv_width",
    "role_param_counts",
    "stack_depths",
]


def norm_params(config: ModelConfig) -> int:
    """Parameters of one norm layer: LayerNorm weight (and bias), RMSNorm weight."""
    d = config.d_model
    if config.norm == "rmsnorm":
        return d
    return 2 * d if config.bias else d


def n_mlp_inputs(config: ModelConfig) -> int:
    """Input projections Linear(d, f) of the MLP: SwiGLU has a gate beside the up one."""
    return 2 if config.activation == "swiglu" else 1


def qkv_width(config: ModelConfig) -> int:
    """Output width of the fused QKV projection: d + 2 d_kv (3d for multi-head attention)."""
    return config.d_model + 2 * config.d_kv


def block_matmul_params(config: ModelConfig) -> int:
    """Weights of one block's Linear layers (no biases): QKV d(d + 2 d_kv), output d^2, MLP."""
    d, f = config.d_model, required("d_ff", config.d_ff)
    return d * qkv_width(config) + d * d + (n_mlp_inputs(config) + 1) * d * f


def block_bias_params(config: ModelConfig) -> int:
    """Biases of one block's Linear layers: QKV d + 2 d_kv, output d, MLP inputs f each and d."""
    if not config.bias:
        return 0
    d, f = config.d_model, required("d_ff", config.d_ff)
    return qkv_width(config) + d + n_mlp_inputs(config) * f + d


def block_params(config: ModelConfig) -> int:
    """Parameters of one transformer block: Linear weights and biases, and its two norms."""
    return block_matmul_params(config) + 2 * norm_params(config) + block_bias_params(config)


def cross_attn_params(config: ModelConfig) -> int:
    """One cross-attention: queries d*d, keys and values d * 2 d_kv, output d*d, and biases."""
    d, d_kv = config.d_model, config.d_kv
    n = d * d + d * 2 * d_kv + d * d
    return n + (2 * d + 2 * d_kv if config.bias else 0)


def decoder_block_params(config: ModelConfig) -> int:
    """One block of an encoder-decoder model's decoder: a block, a third norm, cross-attention."""
    return block_params(config) + norm_params(config) + cross_attn_params(config)


def block_linear_params(config: ModelConfig) -> int:
    """Weights and biases of every block's Linear layers, a decoder block's cross-attention too.

    What bf16 autocast copies, with the output projection.
    """
    per_block = block_matmul_params(config) + block_bias_params(config)
    if config.arch == "encoder_decoder":
        n_enc, n_dec = stack_depths(config)
        return (n_enc + n_dec) * per_block + n_dec * cross_attn_params(config)
    return config.n_layers * per_block


def stack_depths(config: ModelConfig) -> tuple[int, int]:
    """An encoder-decoder model's ``(n_encoder_layers, n_decoder_layers)``.

    Raises:
        ConfigError: For a decoder-only config, which has neither.
    """
    return (required("n_encoder_layers", config.n_encoder_layers),
            required("n_decoder_layers", config.n_decoder_layers))


def position_rows(config: ModelConfig) -> int:
    """Rows of the position table: seq_len, or max(src_len, tgt_len) for encoder-decoder."""
    if config.arch == "encoder_decoder":
        src_len = required("src_len", config.src_len)
        return max(src_len, config.seq_len - src_len)
    return config.seq_len


def param_count(config: ModelConfig) -> int:
    """Exact number of parameters of ``build_model(config)``, tied weights counted once.

    Per block 12d^2 + 13d for GPT-2 (d_ff = 4d, biases, LayerNorm); total
    V*d + T*d + L*(12d^2 + 13d) + 2d (nanoGPT ``scaling_laws.ipynb``; HF ``GPT2LMHeadModel``).
    Grouped-query attention takes 2(d - d_kv)(d + 1) per block off that (with biases).
    An encoder-decoder model has n_encoder_layers blocks, n_decoder_layers decoder blocks
    (`decoder_block_params`) and, pre-norm, two final norms (module docstring).
    The parametrization (`sweep_models.parametrization`) changes no count.
    """
    d, v = config.d_model, config.vocab_size
    if config.arch == "encoder_decoder":
        n_enc, n_dec = stack_depths(config)
        n = v * d + n_enc * block_params(config) + n_dec * decoder_block_params(config)
        n_final_norms = 2
    else:
        n = v * d + config.n_layers * block_params(config)
        n_final_norms = 1
    if config.pos_encoding == "learned":
        n += position_rows(config) * d
    if config.norm_position == "pre":
        n += n_final_norms * norm_params(config)
    if not config.tie_embeddings:
        n += v * d
    return n


def non_embedding_param_count(config: ModelConfig) -> int:
    """Kaplan et al. 2020 (sec. 2.1) N: parameters minus token embedding and position table.

    Untied models also exclude the output projection, so that N describes the transformer body
    alone and is the same tied or untied. Biases and norm weights are included. For GPT-2 small
    this is 85,056,000.
    """
    n = param_count(config) - config.vocab_size * config.d_model
    if config.pos_encoding == "learned":
        n -= position_rows(config) * config.d_model
    if not config.tie_embeddings:
        n -= config.vocab_size * config.d_model
    return n


def dense_convention_params(config: ModelConfig) -> int:
    """N of nanoGPT ``estimate_mfu`` (PaLM appendix B): the parameters a token multiplies.

    Every parameter but the position table (nanoGPT ``get_num_params(non_embedding=True)``)
    and, untied, the input embedding, whose lookup is no matmul; the tied embedding stays in as
    the output projection. For GPT-2 small this is 123,653,376.
    """
    n = param_count(config)
    if config.pos_encoding == "learned":
        n -= position_rows(config) * config.d_model
    if not config.tie_embeddings:
        n -= config.vocab_size * config.d_model
    return n


def role_param_counts(config: ModelConfig) -> dict[str, int]:
    """Parameters of each role of `sweep_models.parametrization.ROLES`, summing to `param_count`.

    The roles of `sweep_models.blocks.LanguageModel.param_roles`: ``embedding`` (token table,
    learned positions; a tied output projection counted here once), ``readout`` (an untied
    output projection), ``final_norm``, ``hidden`` (every block matrix, ``hidden_out`` included:
    they share their multipliers) and ``hidden_vector`` (the blocks' biases and norms).
    """
    d, v = config.d_model, config.vocab_size
    embedding = v * d + (position_rows(config) * d if config.pos_encoding == "learned" else 0)
    matrices = block_matmul_params(config)
    if config.arch == "encoder_decoder":
        n_enc, n_dec = stack_depths(config)
        hidden = (n_enc + n_dec) * matrices + n_dec * (2 * d * d + 2 * d * config.d_kv)
        n_final_norms = 2
    else:
        hidden = config.n_layers * matrices
        n_final_norms = 1
    counts = {
        "embedding": embedding,
        "readout": 0 if config.tie_embeddings else v * d,
        "final_norm": n_final_norms * norm_params(config) if config.norm_position == "pre" else 0,
        "hidden": hidden,
        "hidden_out": 0,
    }
    counts["hidden_vector"] = param_count(config) - sum(counts.values())
    return counts
