"""The transformer built from a `ModelConfig`: a GPT-2 style causal LM or a bidirectional encoder.

Layout follows nanoGPT's ``model.py`` (Karpathy) and GPT-2 (Radford et al. 2019): token
embedding, optional position table, ``n_layers`` blocks of attention and MLP with residual
connections, a final norm for pre-norm models, and an output projection tied to the token
embedding when ``tie_embeddings``. Initialisation as GPT-2: N(0, 0.02) weights, zero biases, and
residual output projections scaled by 1/sqrt(2 * n_layers).

Under muP and CompleteP (``config.parametrization``) the standard deviations, the output
logits' multiplier, the attention scale and the residual branches' multiplier come from
`sweep_models.parametrization`, each with its source; ``param_roles`` tells the optimizer which
learning-rate rule each parameter follows. Under ``sp`` none of it runs: the model, its
parameter names and its random draws are GPT-2's.

Every option is resolved when the model is built: the norm class, the activation module, the
block's norm position (`PreNormBlock` or `PostNormBlock`), the position encoding (an embedding
module, or a `RotaryEmbedding` shared by the attention layers) and the attention path. The
forward pass runs modules only, with no dispatch on config strings. The blocks and
`LanguageModel` are `sweep_models.blocks`', which the encoder-decoder model builds on too.

State dict keys are those of nanoGPT-style checkpoints (``wte``, ``wpe``, ``blocks.{i}.ln_1``,
``blocks.{i}.attn.c_attn``, ``blocks.{i}.mlp.c_fc`` ...); derived tables and masks are
non-persistent buffers, rebuilt from the config.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from sweep_models import parametrization
from sweep_models.attention import RotaryEmbedding, SelfAttention, SparseMask
from sweep_models.blocks import Block, LanguageModel, SinusoidalEmbedding
from sweep_models.config import ModelConfig
from sweep_models.encoder_decoder import EncoderDecoder

__all__ = ["Transformer", "build_model"]


class Transformer(LanguageModel):
    """Language model over token ids.

    ``forward(idx)`` maps ``(B, T)`` int64 token ids (T <= seq_len) to logits
    ``(B, T, vocab_size)``; ``forward(idx, targets)`` also returns the mean cross-entropy in nats
    per token over targets ``(B, T)`` (entries of -1 are ignored).

    Raises:
        ValueError: From ``forward``, for a sequence longer than ``seq_len``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        # Added to the token embedding: a learned table (GPT-2) or a fixed one; RoPE acts in
        # the attention layers instead.
        self.wpe: nn.Module | None = None
        if config.pos_encoding == "learned":
            self.wpe = nn.Embedding(config.seq_len, config.d_model)
        elif config.pos_encoding == "sinusoidal":
            self.wpe = SinusoidalEmbedding(config.seq_len, config.d_model)
        # One RoPE table and one sparse mask for all layers (non-persistent buffers).
        self.rope = (RotaryEmbedding(config.seq_len, config.d_head, config.rope_base)
                     if config.pos_encoding == "rope" else None)
        self.sparse_mask = (SparseMask(config.attn_layout)
                            if config.attn_pattern != "dense" else None)
        self.drop = nn.Dropout(config.dropout)
        blocks = [Block.build(config, SelfAttention(config, rope=self.rope, mask=self.sparse_mask))
                  for _ in range(config.n_layers)]
        self.blocks = nn.ModuleList(blocks)
        self._build_readout(config)

        # GPT-2's order of draws (every Linear and Embedding, then the residual projections
        # again), each with its role's standard deviation
        self._init_by_role()
        residual_std = parametrization.init_std(config, "hidden_out")
        for block in blocks:
            nn.init.normal_(block.attn.c_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.c_proj.weight, mean=0.0, std=residual_std)

    @property
    def attn_mask(self) -> torch.Tensor | None:
        """The bool ``(seq_len, seq_len)`` keep-mask of a sparse pattern; ``None`` if dense."""
        return None if self.sparse_mask is None else self.sparse_mask.mask

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        t = idx.shape[1]
        if t > self.config.seq_len:
            raise ValueError(f"sequence of length {t} exceeds seq_len={self.config.seq_len}")
        x = self.wte(idx)  # (B, T, d_model)
        if self.wpe is not None:
            x = x + self.wpe(torch.arange(t, device=idx.device))
        x = self.drop(x)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.readout_scale(self.ln_f(x)))  # (B, T, V)
        if targets is None:
            return logits
        loss = F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
        )
        return logits, loss


def build_model(config: ModelConfig,
                device: torch.device | str | None = None) -> LanguageModel:
    """Build the model of ``config`` on ``device``.

    A `Transformer`, or for ``arch="encoder_decoder"`` a
    `sweep_models.encoder_decoder.EncoderDecoder`.

    Args:
        config: A validated model config.
        device: Where to allocate parameters; ``"meta"`` builds shapes only (for counting
            parameters of large models without memory). ``None``: the default device.

    Returns:
        The model, in training mode.
    """
    cls: type[LanguageModel] = EncoderDecoder if config.arch == "encoder_decoder" else Transformer
    if device is None:
        return cls(config)
    with torch.device(device):
        return cls(config)
