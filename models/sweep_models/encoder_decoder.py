"""The encoder-decoder transformer (Vaswani et al. 2017, "Attention Is All You Need", sec. 3.1).

An encoder of ``n_encoder_layers`` blocks of bidirectional self-attention and FFN reads the
source; a decoder of ``n_decoder_layers`` blocks of causal self-attention, cross-attention over
the encoder output (sec. 3.2.3: queries from the decoder, keys and values from the encoder) and
FFN reads the target, and the output projection maps the decoder stream to logits. The blocks'
modules are `sweep_models.blocks`' (norms, MLP or SwiGLU, `SelfAttention` with grouped-query
heads, RoPE), as the decoder-only model's, so every option of a decoder-only model means the same
here.

How a window is read: the trainer's batches are windows ``x`` of ``seq_len`` tokens with
targets ``y`` (``x`` shifted by one). The first ``src_len`` tokens of ``x`` are the source (the
encoder input); the remaining ``tgt_len = seq_len - src_len`` are the decoder input, and the
loss is on ``y[:, src_len:]`` only, the tokens after each decoder-input token. A sequence-to-
sequence corpus lays out each example as ``source, separator, target`` of ``seq_len + 1`` tokens
(`sweep.data.synthetic.reverse_stream`): the separator is the decoder's start token and the
loss covers exactly the target, teacher-forced. The model's forward never looks at the source
part of the targets.

One token embedding serves the encoder, the decoder and (tied) the output projection (sec.
3.4: "we share the same weight matrix between the two embedding layers and the pre-softmax
linear transformation"). Positions count from 0 in each stack: a learned or sinusoidal table of
``max(src_len, tgt_len)`` rows (shared by both stacks), or RoPE in each stack's self-attention
(none in cross-attention). A pre-norm model ends each stack in a norm (``ln_enc``, ``ln_f``);
post-norm blocks (Vaswani et al.) need none.

Initialisation as `sweep_models.transformer.Transformer`: N(0, 0.02) weights (their muP standard
deviations under ``mup``), zero biases, and each residual projection scaled by
1/sqrt(N) with N the residual branches of its stack, 2 per encoder and 3 per decoder block
(GPT-2, Radford et al. 2019, sec. 2.3: "a factor of 1/sqrt(N) where N is the number of
residual layers").
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sweep_models import parametrization
from sweep_models.attention import CrossAttention, RotaryEmbedding, SelfAttention
from sweep_models.blocks import Block, LanguageModel, SinusoidalEmbedding, feed_forward, norm_layer
from sweep_models.config import ModelConfig
from sweep_models.errors import required

__all__ = ["DecoderBlock", "EncoderDecoder", "PostNormDecoderBlock", "PreNormDecoderBlock"]


class DecoderBlock(nn.Module):
    """One decoder block's modules: causal self-attention, cross-attention, MLP, three norms.

    ``forward(x, memory)``: the decoder stream ``x`` ``(B, T_dec, d_model)`` and the encoder
    output ``memory`` ``(B, T_enc, d_model)`` to ``(B, T_dec, d_model)``. The forward pass is
    `PreNormDecoderBlock`'s or `PostNormDecoderBlock`'s; `DecoderBlock.build` picks it.
    """

    def __init__(self, config: ModelConfig, rope: RotaryEmbedding | None) -> None:
        super().__init__()
        self.ln_1 = norm_layer(config)
        self.attn = SelfAttention(config, rope=rope, causal=True)
        self.ln_cross = norm_layer(config)
        self.cross_attn = CrossAttention(config)
        self.ln_2 = norm_layer(config)
        self.mlp = feed_forward(config)
        self.drop = nn.Dropout(config.dropout)

    @staticmethod
    def build(config: ModelConfig, rope: RotaryEmbedding | None) -> DecoderBlock:
        """A `PreNormDecoderBlock` or `PostNormDecoderBlock` (``config.norm_position``)."""
        cls = PreNormDecoderBlock if config.norm_position == "pre" else PostNormDecoderBlock
        return cls(config, rope)


class PreNormDecoderBlock(DecoderBlock):
    """``x + attn(ln_1(x))``, ``x + cross_attn(ln_cross(x), memory)``, ``x + mlp(ln_2(x))``."""

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x)))
        x = x + self.drop(self.cross_attn(self.ln_cross(x), memory))
        return x + self.drop(self.mlp(self.ln_2(x)))


class PostNormDecoderBlock(DecoderBlock):
    """Post-norm (Vaswani et al. 2017, fig. 1).

    ``ln_1(x + attn(x))``, ``ln_cross(x + cross_attn(x, memory))``, ``ln_2(x + mlp(x))``.
    """

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.drop(self.attn(x)))
        x = self.ln_cross(x + self.drop(self.cross_attn(x, memory)))
        return self.ln_2(x + self.drop(self.mlp(x)))


class EncoderDecoder(LanguageModel):
    """Sequence-to-sequence model over windows of source then target tokens (module docstring).

    ``forward(idx)`` maps ``(B, T)`` int64 token ids, ``src_len < T <= seq_len``, to the
    decoder's logits ``(B, T - src_len, vocab_size)``; ``forward(idx, targets)`` also returns
    the mean cross-entropy in nats per target token over ``targets[:, src_len:]`` (targets
    ``(B, T)``; entries of -1 are ignored; the source part of ``targets`` is never read).

    State dict keys: ``wte``, ``wpe``, ``encoder.{i}`` (a `sweep_models.blocks.Block`:
    ``ln_1``, ``attn.c_attn``, ``attn.c_proj``, ``ln_2``, ``mlp``), ``ln_enc``,
    ``decoder.{i}`` (``ln_1``, ``attn``, ``ln_cross``, ``cross_attn.c_q``, ``cross_attn.c_kv``,
    ``cross_attn.c_proj``, ``ln_2``, ``mlp``), ``ln_f``, ``lm_head``.

    Raises:
        ValueError: From ``forward``, for a window longer than ``seq_len`` or with no target
            token (T <= src_len).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        src_len = required("src_len", config.src_len)
        n_enc = required("n_encoder_layers", config.n_encoder_layers)
        n_dec = required("n_decoder_layers", config.n_decoder_layers)
        n_pos = max(src_len, config.seq_len - src_len)  # the longer stack's tokens
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        self.wpe: nn.Module | None = None
        if config.pos_encoding == "learned":
            self.wpe = nn.Embedding(n_pos, config.d_model)
        elif config.pos_encoding == "sinusoidal":
            self.wpe = SinusoidalEmbedding(n_pos, config.d_model)
        self.rope = (RotaryEmbedding(n_pos, config.d_head, config.rope_base)
                     if config.pos_encoding == "rope" else None)
        self.drop = nn.Dropout(config.dropout)
        encoder = [Block.build(config, SelfAttention(config, rope=self.rope, causal=False))
                   for _ in range(n_enc)]
        self.encoder = nn.ModuleList(encoder)
        self.ln_enc = norm_layer(config) if config.norm_position == "pre" else nn.Identity()
        decoder = [DecoderBlock.build(config, self.rope) for _ in range(n_dec)]
        self.decoder = nn.ModuleList(decoder)
        self._build_readout(config)
        self._init_by_role()  # then the residual projections again, as GPT-2 does
        hidden_std = parametrization.init_std(config, "hidden")
        enc_std = hidden_std / math.sqrt(2 * n_enc)
        dec_std = hidden_std / math.sqrt(3 * n_dec)
        for block in encoder:
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                nn.init.normal_(proj.weight, mean=0.0, std=enc_std)
        for dec_block in decoder:
            for proj in (dec_block.attn.c_proj, dec_block.cross_attn.c_proj,
                         dec_block.mlp.c_proj):
                nn.init.normal_(proj.weight, mean=0.0, std=dec_std)

    def _embed(self, idx: torch.Tensor) -> torch.Tensor:
        x = self.wte(idx)  # (B, t, d_model)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(idx.shape[1], device=idx.device))
        return self.drop(x)

    def encode(self, src: torch.Tensor) -> torch.Tensor:
        """The encoder output ``(B, S, d_model)`` of source ids ``(B, S)``, after ``ln_enc``."""
        x = self._embed(src)
        for block in self.encoder:
            x = block(x)
        return self.ln_enc(x)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        t, s = idx.shape[1], required("src_len", self.config.src_len)
        if t > self.config.seq_len:
            raise ValueError(f"sequence of length {t} exceeds seq_len={self.config.seq_len}")
        if t <= s:
            raise ValueError(f"sequence of length {t} has no target token after the "
                             f"src_len={s} source tokens")
        memory = self.encode(idx[:, :s])  # (B, S, d_model)
        x = self._embed(idx[:, s:])  # (B, T - S, d_model)
        for block in self.decoder:
            x = block(x, memory)
        logits = self.lm_head(self.readout_scale(self.ln_f(x)))  # (B, T - S, V)
        if targets is None:
            return logits
        loss = F.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets[:, s:].reshape(-1), ignore_index=-1
        )
        return logits, loss
