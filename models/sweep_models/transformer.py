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
forward pass runs modules only, with no dispatch on config strings.

State dict keys are those of nanoGPT-style checkpoints (``wte``, ``wpe``, ``blocks.{i}.ln_1``,
``blocks.{i}.attn.c_attn``, ``blocks.{i}.mlp.c_fc`` ...); derived tables and masks are
non-persistent buffers, rebuilt from the config.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from sweep_models import parametrization
from sweep_models.attention import CrossAttention, RotaryEmbedding, SelfAttention, SparseMask
from sweep_models.config import ModelConfig

__all__ = [
    "MLP",
    "Block",
    "LanguageModel",
    "PostNormBlock",
    "PreNormBlock",
    "Scale",
    "SinusoidalEmbedding",
    "SwiGLU",
    "Transformer",
    "build_model",
]


def _norm(config: ModelConfig) -> nn.Module:
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
        self.c_fc = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.act = nn.GELU(approximate="tanh") if config.activation == "gelu" else nn.ReLU()
        self.c_proj = nn.Linear(config.d_ff, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.act(self.c_fc(x)))


class SwiGLU(nn.Module):
    """SwiGLU feed-forward block (Shazeer 2020, "GLU Variants Improve Transformer", eq. 6).

    ``Linear(d_ff, d)(SiLU(x W_gate) * (x W_up))``, ``(B, T, d_model) -> (B, T, d_model)``; the
    up projection is ``c_fc``, the gate ``c_gate``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.c_gate = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.c_proj = nn.Linear(config.d_ff, config.d_model, bias=config.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # up before gate: the order autograd accumulates the two gradients of x in
        up = self.c_fc(x)  # (B, T, d_ff)
        return self.c_proj(F.silu(self.c_gate(x)) * up)


class Block(nn.Module):
    """One transformer block's modules: norms, attention, MLP and residual dropout.

    The forward pass is `PreNormBlock`'s (GPT-2) or `PostNormBlock`'s (Vaswani et al. 2017);
    `Block.build` picks the one of the config. Input and output ``(B, T, d_model)``. Each
    residual branch ends in ``branch_scale``: CompleteP's (n_layers / base_n_layers)^-alpha
    (`sweep_models.parametrization.residual_mult`), an identity otherwise.
    """

    def __init__(self, config: ModelConfig, attn: SelfAttention) -> None:
        super().__init__()
        self.ln_1 = _norm(config)
        self.attn = attn
        self.ln_2 = _norm(config)
        self.mlp = SwiGLU(config) if config.activation == "swiglu" else MLP(config)
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

    Subclasses set ``self.config`` and build their modules; `Transformer` (decoder-only) and
    `sweep_models.encoder_decoder.EncoderDecoder`.
    """

    @staticmethod
    def _init_weights(module: nn.Module, stds: dict[int, float]) -> None:
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=stds[id(module.weight)])
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def _build_readout(self, config: ModelConfig) -> None:
        """``ln_f``, the readout multiplier and ``lm_head`` (tied to ``wte`` when configured)."""
        self.ln_f = _norm(config) if config.norm_position == "pre" else nn.Identity()
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
        self.blocks = nn.ModuleList(
            Block.build(config, SelfAttention(config, rope=self.rope, mask=self.sparse_mask))
            for _ in range(config.n_layers)
        )
        self._build_readout(config)

        # GPT-2's order of draws (every Linear and Embedding, then the residual projections
        # again), each with its role's standard deviation
        self._init_by_role()
        residual_std = parametrization.init_std(config, "hidden_out")
        for block in self.blocks:
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
    cls: type[LanguageModel] = Transformer
    if config.arch == "encoder_decoder":
        from sweep_models.encoder_decoder import EncoderDecoder  # it builds on this module's blocks

        cls = EncoderDecoder
    if device is None:
        return cls(config)
    with torch.device(device):
        return cls(config)
