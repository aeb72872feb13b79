"""The modules both models are built from, and `LanguageModel`, the base both models share.

`sweep_models.transformer.Transformer` (decoder-only) and
`sweep_models.encoder_decoder.EncoderDecoder` import their parts from here, so neither imports
the other. Layout and initialisation follow nanoGPT's ``model.py`` (Karpathy) and GPT-2
(Radford et al. 2019): blocks of attention and MLP with residual connections, N(0, 0.02)
weights and zero biases, each standard deviation its parameter role's under muP and CompleteP
(`sweep_models.parametrization`).

Every option is resolved when a module is built: the norm class (`norm_layer`), the
feed-forward block (`feed_forward`), the block's norm position (`PreNormBlock` or
`PostNormBlock`) and the multipliers (`Scale`, or an identity where the multiplier is 1).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sweep_models import parametrization
from sweep_models.attention import CrossAttention, SelfAttention
from sweep_models.config import ModelConfig
from sweep_models.errors import required

__all__ = [
    "MLP",
    "Block",
    "LanguageModel",
    "PostNormBlock",
    "PreNormBlock",
    "Scale",
    "SinusoidalEmbedding",
    "SwiGLU",
    "feed_forward",
    "norm_layer",
]


def norm_layer(config: ModelConfig) -> nn.Module:
    """The config's norm over ``d_model``: ``nn.RMSNorm`` or ``nn.LayerNorm`` (bias if ``bias``)."""
    if config.norm == "rmsnorm":
        return nn.RMSNorm(config.d_model, eps=config.norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.norm_eps, bias=config.bias)


class Scale(nn.Module):
    """Multiply by a constant: the multipliers of a parametrization, ``(*) -> (*)``.

    Not a parameter: AdamW's update of the weights before it is the same whatever the
    constant, which is what muP's multipliers rely on (Yang et al. 2022, Table 3).
    """

    def __init__(self, mult: float) -> None:
        super().__init__()
        self.mult = mult

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.mult

    def extra_repr(self) -> str:
        return f"mult={self.mult:g}"


def _scale(mult: float) -> nn.Module:
    """`Scale` by ``mult``, or ``nn.Identity`` (no op, the same tensor) for 1."""
    return nn.Identity() if mult == 1.0 else Scale(mult)


class MLP(nn.Module):
    """Feed-forward block Linear(d, d_ff), activation, Linear(d_ff, d); ``(B, T, d_model)``.

    The activation is ``nn.GELU(approximate="tanh")`` (GPT-2's ``gelu_new``) or ``nn.ReLU``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d_ff = required("d_ff", config.d_ff)
        self.c_fc = nn.Linear(config.d_model, d_ff, bias=config.bias)
        self.act = nn.GELU(approximate="tanh") if config.activation == "gelu" else nn.ReLU()
        self.c_proj = nn.Linear(d_ff, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class SwiGLU(nn.Module):
    """SwiGLU feed-forward block (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6).

    ``Linear(d_ff, d)(SiLU(x W_gate) * (x W_up))``, ``(B, T, d_model) -> (B, T, d_model)``; the
    up projection is ``c_fc``, the gate ``c_gate``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        d_ff = required("d_ff", config.d_ff)
        self.c_fc = nn.Linear(config.d_model, d_ff, bias=config.bias)
        self.c_gate = nn.Linear(config.d_model, d_ff, bias=config.bias)
        self.c_proj = nn.Linear(d_ff, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # up before gate: the order autograd accumulates the two gradients of x in
        up = self.c_fc(x)  # (B, T, d_ff)
        return self.c_proj(F.silu(self.c_gate(x)) * up)


def feed_forward(config: ModelConfig) -> MLP | SwiGLU:
    """The config's feed-forward block: `SwiGLU` for ``activation="swiglu"``, else `MLP`."""
    return SwiGLU(config) if config.activation == "swiglu" else MLP(config)


class Block(nn.Module):
    """One transformer block's modules: norms, attention, MLP and residual dropout.

    The forward pass is `PreNormBlock`'s (GPT-2) or `PostNormBlock`'s (Vaswani et al. 2017);
    `Block.build` picks the one of the config. Input and output ``(B, T, d_model)``. Each
    residual branch ends in ``branch_scale``: CompleteP's (n_layers / base_n_layers)^-alpha
    (`sweep_models.parametrization.residual_mult`), an identity otherwise.
    """

    def __init__(self, config: ModelConfig, attn: SelfAttention) -> None:
        super().__init__()
        self.ln_1 = norm_layer(config)
        self.attn = attn
        self.ln_2 = norm_layer(config)
        self.mlp = feed_forward(config)
        self.drop = nn.Dropout(config.dropout)
        self.branch_scale = _scale(parametrization.residual_mult(config))

    @staticmethod
    def build(config: ModelConfig, attn: SelfAttention) -> Block:
        """A `PreNormBlock` or `PostNormBlock` (``config.norm_position``) around ``attn``."""
        cls = PreNormBlock if config.norm_position == "pre" else PostNormBlock
        return cls(config, attn)


class PreNormBlock(Block):
    """``x + attn(ln_1(x))``, then ``x + mlp(ln_2(x))`` (GPT-2)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.branch_scale(self.attn(self.ln_1(x))))
        return x + self.drop(self.branch_scale(self.mlp(self.ln_2(x))))


class PostNormBlock(Block):
    """``ln_1(x + attn(x))``, then ``ln_2(x + mlp(x))`` (Vaswani et al. 2017, BERT)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.ln_1(x + self.drop(self.branch_scale(self.attn(x))))
        return self.ln_2(x + self.drop(self.branch_scale(self.mlp(x))))


class SinusoidalEmbedding(nn.Module):
    """Fixed sinusoidal position table (Vaswani et al. 2017, sec. 3.5) looked up like an embedding.

    ``forward(pos)`` maps int64 positions of shape ``(T,)`` to ``(T, d_model)``. The table is a
    non-persistent buffer: it is not in state dicts.
    """

    table: torch.Tensor

    def __init__(self, seq_len: int, d_model: int) -> None:
        super().__init__()
        pos = torch.arange(seq_len, dtype=torch.float32)[:, None]
        div = torch.exp(
            torch.arange(0, d_model, 2, dtype=torch.float32) * (-math.log(1e4) / d_model)
        )
        table = torch.zeros(seq_len, d_model)
        table[:, 0::2] = torch.sin(pos * div)
        table[:, 1::2] = torch.cos(pos * div)
        self.register_buffer("table", table, persistent=False)

    def forward(self, pos: torch.Tensor) -> torch.Tensor:
        return self.table[pos]


class LanguageModel(nn.Module):
    """What every model of `build_model` shares: parameter roles, counts and live changes.

    Subclasses set ``self.config`` and the token embedding ``self.wte`` and build their modules:
    `sweep_models.transformer.Transformer` (decoder-only) and
    `sweep_models.encoder_decoder.EncoderDecoder`.
    """

    config: ModelConfig
    wte: nn.Embedding

    @staticmethod
    def _init_weights(module: nn.Module, stds: dict[int, float]) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=stds[id(module.weight)])
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _build_readout(self, config: ModelConfig) -> None:
        """``ln_f``, the readout multiplier and ``lm_head`` (tied to ``wte`` when configured)."""
        self.ln_f = norm_layer(config) if config.norm_position == "pre" else nn.Identity()
        # muP's output multiplier 1/width_mult on the readout's input (MuReadout's form)
        self.readout_scale = _scale(parametrization.output_mult(config))
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        if config.tie_embeddings:
            self.lm_head.weight = self.wte.weight

    def _init_by_role(self) -> None:
        """Draw every Linear and Embedding in module order, biases zero: GPT-2's first pass.

        Each weight's standard deviation is its role's (`sweep_models.parametrization.init_std`).
        """
        stds = {id(p): parametrization.init_std(self.config, role)
                for _, p, role in self.param_roles()}
        self.apply(lambda module: self._init_weights(module, stds))

    def param_roles(self) -> list[tuple[str, nn.Parameter, str]]:
        """Every parameter with its role in `sweep_models.parametrization` (``ROLES``).

        Returns:
            ``(name, parameter, role)`` in ``named_parameters`` order, a tied output projection
            once, as the token embedding (``wte.weight``, role ``embedding``). Roles: ``wte``
            and ``wpe`` are ``embedding``, an untied ``lm_head`` is ``readout``, ``ln_f`` (and
            an encoder-decoder model's ``ln_enc``) is ``final_norm``; in the blocks the
            ``c_proj`` weights are ``hidden_out``, the other matrices ``hidden`` and the biases
            and norms ``hidden_vector``.
        """
        out = []
        for name, p in self.named_parameters():
            if name.startswith(("wte.", "wpe.")):
                role = "embedding"
            elif name.startswith("lm_head."):
                role = "readout"
            elif name.startswith(("ln_f.", "ln_enc.")):
                role = "final_norm"
            elif name.endswith("c_proj.weight"):
                role = "hidden_out"
            elif p.ndim == 2:
                role = "hidden"
            else:
                role = "hidden_vector"
            out.append((name, p, role))
        return out

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
        for module in self.modules():
            if isinstance(module, (SelfAttention, CrossAttention)):
                module.set_temperature(tau)

    def set_dropout(self, p: float) -> None:
        """Change the dropout probability everywhere in place.

        Raises:
            ConfigError: If ``p`` is outside [0, 1).
        """
        self.config = self.config.replace(dropout=p)
        for module in self.modules():
            if isinstance(module, nn.Dropout):
                module.p = p
            elif isinstance(module, (SelfAttention, CrossAttention)):
                module.dropout = p
