"""The transformer built from a `ModelConfig`: a GPT-2 style causal LM or a bidirectional encoder.

Layout follows nanoGPT's ``model.py`` (Karpathy) and GPT-2 (Radford et al. 2019): token
embedding, optional position table, ``n_layers`` blocks of attention and MLP with residual
connections, a final norm for pre-norm models, and an output projection tied to the token
embedding when ``tie_embeddings``. Initialisation as GPT-2: N(0, 0.02) weights, zero biases, and
residual output projections scaled by 1/sqrt(2 * n_layers).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from models.attention import SelfAttention, attention_mask, rope_tables
from models.config import ModelConfig

__all__ = ["Block", "MLP", "Transformer", "build_model"]


def _norm(config: ModelConfig) -> nn.Module:
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias)


class MLP(nn.Module):
    """Feed-forward block, ``(B, T, d_model) -> (B, T, d_model)``.

    ``relu``/``gelu``: Linear(d, d_ff), activation, Linear(d_ff, d). ``swiglu`` (Shazeer 2020,
    "GLU Variants Improve Transformer", eq. 6): Linear(d_ff, d)(SiLU(x W_gate) * (x W_up)).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.activation = config.activation
        self.c_fc = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        if config.activation == "swiglu":
            self.c_gate = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.c_proj = nn.Linear(config.d_ff, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.c_fc(x)  # (B, T, d_ff)
        if self.activation == "swiglu":
            h = F.silu(self.c_gate(x)) * h
        elif self.activation == "gelu":
            h = F.gelu(h, approximate="tanh")
        else:
            h = F.relu(h)
        return self.c_proj(h)


class Block(nn.Module):
    """One transformer block; ``pre`` norm (GPT-2) or ``post`` norm (Vaswani et al. 2017)."""

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.ln_1 = _norm(config)
        self.attn = SelfAttention(config)
        self.ln_2 = _norm(config)
        self.mlp = MLP(config)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x, mask=None, rope=None) -> torch.Tensor:
        if self.pre_norm:
            x = x + self.drop(self.attn(self.ln_1(x), mask, rope))
            return x + self.drop(self.mlp(self.ln_2(x)))
        x = self.ln_1(x + self.drop(self.attn(x, mask, rope)))
        return self.ln_2(x + self.drop(self.mlp(x)))


class Transformer(nn.Module):
    """Language model over token ids.

    ``forward(idx)`` maps ``(B, T)`` int64 token ids (T <= seq_len) to logits
    ``(B, T, vocab_size)``; ``forward(idx, targets)`` also returns the mean cross-entropy in nats
    per token over targets ``(B, T)`` (entries of -1 are ignored).
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.wte = nn.Embedding(config.vocab_size, config.d_model)
        if config.pos_encoding == "learned":
            self.wpe = nn.Embedding(config.seq_len, config.d_model)
        self.drop = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = _norm(config) if config.norm_position == "pre" else None
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight

        # Buffers are derived from the config, so they are not saved in state dicts.
        if config.attn_pattern != "dense":
            self.register_buffer("attn_mask", attention_mask(config.attn_layout), persistent=False)
        else:
            self.attn_mask = None
        if config.pos_encoding == "rope":
            cos, sin = rope_tables(config.seq_len, config.d_head, config.rope_base)
            self.register_buffer("rope_cos", cos, persistent=False)
            self.register_buffer("rope_sin", sin, persistent=False)
        if config.pos_encoding == "sinusoidal":
            self.register_buffer("pos_table", _sinusoidal(config.seq_len, config.d_model),
                                 persistent=False)
        self.apply(self._init_weights)
        residual_std = 0.02 / math.sqrt(2 * config.n_layers)
        for block in self.blocks:
            nn.init.normal_(block.attn.c_proj.weight, mean=0.0, std=residual_std)
            nn.init.normal_(block.mlp.c_proj.weight, mean=0.0, std=residual_std)

    @staticmethod
    def _init_weights(module: nn.Module) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def num_params(self) -> int:
        """Number of parameters, shared (tied) tensors counted once."""
        return sum(p.numel() for p in self.parameters())

    def set_attn_temperature(self, tau: float) -> None:
        """Change the attention temperature of every layer in place (population-based training).

        Shapes and weights are untouched.

        Raises:
            ConfigError: If ``tau`` is not a number > 0.
        """
        self.config = self.config.replace(attn_temperature=tau)
        for block in self.blocks:
            block.attn.set_temperature(tau)

    def set_dropout(self, p: float) -> None:
        """Change the dropout probability everywhere in place.

        Raises:
            ConfigError: If ``p`` is outside [0, 1).
        """
        self.config = self.config.replace(dropout=p)
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = p
            elif isinstance(module, SelfAttention):
                module.dropout = p

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        b, t = idx.shape
        if t > self.config.seq_len:
            raise ValueError(f"sequence of length {t} exceeds seq_len={self.config.seq_len}")
        x = self.wte(idx)  # (B, T, d_model)
        if self.config.pos_encoding == "learned":
            x = x + self.wpe(torch.arange(t, device=idx.device))
        elif self.config.pos_encoding == "sinusoidal":
            x = x + self.pos_table[:t]
        x = self.drop(x)
        rope = (self.rope_cos, self.rope_sin) if self.config.pos_encoding == "rope" else None
        for block in self.blocks:
            x = block(x, self.attn_mask, rope)
        if self.ln_f is not None:
            x = self.ln_f(x)
        logits = self.lm_head(x)  # (B, T, V)
        if targets is None:
            return logits
        loss = F.cross_entropy(
            logits.view(-1, logits.size(-1)), targets.reshape(-1), ignore_index=-1
        )
        return logits, loss


def _sinusoidal(seq_len: int, d_model: int) -> torch.Tensor:
    """Sinusoidal position table (Vaswani et al. 2017, sec. 3.5), shape ``(T, d_model)``."""
    pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
    div = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(1e4) / d_model))
    table = torch.zeros(seq_len, d_model)
    table[:, 0::2] = torch.sin(pos * div)
    table[:, 1::2] = torch.cos(pos * div)
    return table


def build_model(config: ModelConfig, device: torch.device | str | None = None) -> Transformer:
    """Build the model of ``config`` on ``device``.

    Args:
        config: A validated model config.
        device: Where to allocate parameters; ``"meta"`` builds shapes only (for counting
            parameters of large models without memory). ``None``: the default device.

    Returns:
        A `Transformer` in training mode.
    """
    if device is None:
        return Transformer(config)
    with torch.device(device):
        return Transformer(config)
