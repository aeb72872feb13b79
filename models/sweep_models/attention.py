"""Multi-head and grouped-query self-attention with temperature and sparse patterns, two backends.

Backends, with identical outputs (within float rounding):

- ``sdpa``: `torch.nn.functional.scaled_dot_product_attention` with ``is_causal=True`` for dense
  causal attention and a boolean ``(T, T)`` mask for sparse patterns. Fused kernels do not store
  the score matrix, but they compute every block, masked or not.
- ``flex``: FlexAttention (`torch.nn.attention.flex_attention`) with a block mask built from
  the same boolean mask; compiled, it skips blocks in which every pair is masked. It is the
  default on CUDA for sparse patterns; on CPU only when asked (``attn_backend="flex"``),
  because its first compile takes tens of seconds, and CPU training falls back to ``sdpa``
  (FlexAttention has no CPU backward). FlexAttention applies no dropout to the attention
  weights.

`CrossAttention` (Vaswani et al. 2017, sec. 3.2.3, "encoder-decoder attention") takes its
queries from the decoder and its keys and values from the encoder output, over every source
position (no mask), with the same temperature, scale and key/value grouping.

The temperature tau is folded into the softmax scale: scale = 1 / (sqrt(d_head) * tau), or
1 / (d_head * tau) under muP and CompleteP (`sweep_models.parametrization.attn_scale`).

Grouped-query attention (Ainslie et al. 2023, "GQA"; ``n_kv_heads = 1`` is multi-query
attention, Shazeer 2019): the fused projection makes H query heads and ``n_kv_heads`` key and
value heads, Linear(d, d + 2 * n_kv_heads * d_head); each key/value head serves
H / n_kv_heads consecutive query heads (SDPA's and FlexAttention's ``enable_gqa``). With
``n_kv_heads = n_heads`` it is the multi-head Linear(d, 3d), and the same module.

What depends only on the config is settled at construction: the path (dense SDPA with
``is_causal``, or a sparse mask), the scale and the tables. The RoPE tables (`RotaryEmbedding`)
and a sparse pattern's keep-mask (`SparseMask`) are modules whose buffers are built once per
model and shared by every layer: nothing is threaded through the blocks' calls, and
``model.to(...)`` converts one copy.
"""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from sweep_models.config import ModelConfig
from sweep_models.errors import required
from sweep_models.parametrization import attn_scale
from sweep_models.patterns import AttnLayout

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

__all__ = [
    "CrossAttention",
    "RotaryEmbedding",
    "SelfAttention",
    "SparseMask",
    "apply_rope",
    "attention_mask",
    "rope_tables",
]


def attention_mask(layout: AttnLayout, device: torch.device | str | None = None) -> torch.Tensor:
    """The boolean mask of a layout: ``True`` where query i may attend to key j.

    Args:
        layout: A derived attention layout (see `sweep_models.patterns`).
        device: Where to put the mask.

    Returns:
        Bool tensor of shape ``(T, T)``; ``mask.sum() == layout.kept_pairs``.
    """
    t = layout.seq_len
    pos = torch.arange(t)
    dist = pos[:, None] - pos[None, :]  # (T, T): i - j
    keep = dist >= 0 if layout.causal else torch.ones(t, t, dtype=torch.bool)
    d = dist.abs()
    if layout.pattern == "local":
        keep &= d < required("window", layout.window)
    elif layout.pattern == "strided":
        stride = required("stride", layout.stride)
        keep &= (d < stride) | (d % stride == 0)
    elif layout.pattern == "block_sparse":
        key_blocks = required("key_blocks", layout.key_blocks)
        n_blocks = len(key_blocks)
        blocks = torch.zeros(n_blocks, n_blocks, dtype=torch.bool)
        for qb, row in enumerate(key_blocks):
            blocks[qb, list(row)] = True
        b = required("block_size", layout.block_size)
        keep &= blocks.repeat_interleave(b, 0).repeat_interleave(b, 1)[:t, :t]
    return keep.to(device) if device is not None else keep


def rope_tables(seq_len: int, d_head: int, base: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Cosine and sine tables of rotary position embeddings (Su et al. 2021, "RoFormer", eq. 34).

    Returns:
        ``(cos, sin)``, each of shape ``(T, d_head)`` (the half-size tables repeated twice, as
        in the GPT-NeoX "rotate half" layout).
    """
    inv_freq = 1.0 / (base ** (torch.arange(0, d_head, 2, dtype=torch.float32) / d_head))
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float32), inv_freq)  # (T, q/2)
    angles = torch.cat([angles, angles], dim=-1)  # (T, q)
    return angles.cos(), angles.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate ``x`` of shape ``(B, H, T, q)`` by position; ``cos``/``sin`` are ``(T, q)``."""
    x1, x2 = x.chunk(2, dim=-1)
    rotated = torch.cat([-x2, x1], dim=-1)
    return (x * cos + rotated * sin).to(x.dtype)


_compiled_flex = None


def _flex_attention():
    global _compiled_flex
    if _compiled_flex is None:
        from torch.nn.attention.flex_attention import flex_attention

        _compiled_flex = torch.compile(flex_attention, dynamic=False)
    return _compiled_flex


class RotaryEmbedding(nn.Module):
    """Rotary position embedding (Su et al. 2021) of queries and keys, ``(B, H, T, q)``.

    Holds the ``(T_max, q)`` cosine and sine tables as non-persistent buffers (derived from the
    config, so not in state dicts); one instance serves every layer of a model.
    """

    cos: torch.Tensor
    sin: torch.Tensor

    def __init__(self, seq_len: int, d_head: int, base: float) -> None:
        super().__init__()
        cos, sin = rope_tables(seq_len, d_head, base)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Rotate ``q`` and ``k`` of shape ``(B, H, T, q)``, T <= T_max, by position."""
        t = q.shape[-2]
        cos, sin = self.cos[:t], self.sin[:t]
        return apply_rope(q, cos, sin), apply_rope(k, cos, sin)


class SparseMask(nn.Module):
    """A sparse pattern's keep-mask, one ``(T_max, T_max)`` bool buffer for every layer.

    Also caches the FlexAttention block masks built from it, once per sequence length and
    device rather than once per layer.
    """

    mask: torch.Tensor

    def __init__(self, layout: AttnLayout) -> None:
        super().__init__()
        self.register_buffer("mask", attention_mask(layout), persistent=False)
        self._block_masks: dict[tuple[int, torch.device, int], BlockMask] = {}

    def keep(self, t: int) -> torch.Tensor:
        """The bool ``(t, t)`` keep-mask of the first ``t`` positions."""
        return self.mask[:t, :t]

    def block_mask(self, t: int) -> BlockMask:
        """The FlexAttention ``BlockMask`` of the first ``t`` positions."""
        from torch.nn.attention.flex_attention import create_block_mask

        mask = self.mask
        key = (t, mask.device, mask.data_ptr())
        if key not in self._block_masks:
            sub = mask[:t, :t]

            def mask_mod(b, h, q_idx, kv_idx):
                return sub[q_idx, kv_idx]

            self._block_masks[key] = create_block_mask(
                mask_mod, None, None, t, t, device=mask.device
            )
        return self._block_masks[key]


class SelfAttention(nn.Module):
    """Multi-head or grouped-query self-attention with one fused QKV projection.

    Input and output shape ``(B, T, d_model)``, T <= ``seq_len``.

    Args:
        config: The model config.
        rope: The model's shared `RotaryEmbedding` for ``pos_encoding="rope"``; ``None``: the
            layer builds its own.
        mask: The model's shared `SparseMask` for sparse patterns; ``None``: the layer builds
            its own.
        causal: Overrides ``config.causal`` (an encoder-decoder model's encoder layers are
            bidirectional, its decoder layers causal).
    """

    def __init__(
        self,
        config: ModelConfig,
        rope: RotaryEmbedding | None = None,
        mask: SparseMask | None = None,
        *,
        causal: bool | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.n_heads = config.n_heads
        self.n_kv_heads = required("n_kv_heads", config.n_kv_heads)
        self.d_head = config.d_head
        # queries (d), keys (d_kv), values (d_kv); d_kv = d_model without grouping
        self._widths = (config.d_model, config.d_kv, config.d_kv)
        self._gqa = self.n_kv_heads != self.n_heads
        self.c_attn = nn.Linear(config.d_model, sum(self._widths), bias=config.bias)
        self.c_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        if config.pos_encoding == "rope" and rope is None:
            rope = RotaryEmbedding(config.seq_len, config.d_head, config.rope_base)
        self.rope = rope if config.pos_encoding == "rope" else None
        dense = config.attn_pattern == "dense"
        if not dense and mask is None:
            mask = SparseMask(config.attn_layout)
        self.sparse_mask = None if dense else mask
        self.causal = config.causal if causal is None else causal
        self.backend = config.attn_backend
        # FlexAttention runs for sparse patterns only: "auto" picks it on CUDA, "flex" anywhere.
        self._flex_on_cuda = not dense and self.backend in ("auto", "flex")
        self._flex_elsewhere = not dense and self.backend == "flex"
        self.dropout = config.dropout
        self.set_temperature(config.attn_temperature)
        self._warned_cpu_backward = False

    def set_temperature(self, tau: float) -> None:
        """Set tau; the softmax scale becomes 1 / (sqrt(d_head) * tau) (muP: 1 / (d_head * tau))."""
        self.scale = attn_scale(self.config, tau)

    def resolved_backend(self, device: torch.device) -> str:
        """The backend used for inputs on ``device``: ``sdpa`` or ``flex``."""
        flex = self._flex_on_cuda if device.type == "cuda" else self._flex_elsewhere
        return "flex" if flex else "sdpa"

    def _use_flex(self, x: torch.Tensor) -> bool:
        if not (self._flex_on_cuda if x.is_cuda else self._flex_elsewhere):
            return False
        if x.device.type == "cpu" and torch.is_grad_enabled() and x.requires_grad:
            # FlexAttention has no backward on CPU; the boolean-mask path gives the same output.
            if not self._warned_cpu_backward:
                warnings.warn(
                    "attn_backend='flex' has no backward pass on CPU; training uses the "
                    "boolean-mask SDPA path instead (same outputs)",
                    stacklevel=3,
                )
                self._warned_cpu_backward = True
            return False
        return True

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Attend.

        Args:
            x: ``(B, T, d_model)``.

        Returns:
            ``(B, T, d_model)``.
        """
        b, t, d = x.shape
        # Views of the fused projection, no copies: q (B, T, H, q) -> (B, H, T, q); k and v
        # (B, T, H_kv, q) -> (B, H_kv, T, q).
        q, k, v = self.c_attn(x).split(self._widths, dim=-1)
        q = q.view(b, t, self.n_heads, self.d_head).transpose(1, 2)
        k = k.view(b, t, self.n_kv_heads, self.d_head).transpose(1, 2)
        v = v.view(b, t, self.n_kv_heads, self.d_head).transpose(1, 2)
        if self.rope is not None:
            q, k = self.rope(q, k)
        dropout_p = self.dropout if self.training else 0.0
        if self.sparse_mask is None:
            y = F.scaled_dot_product_attention(
                q, k, v, dropout_p=dropout_p, is_causal=self.causal, scale=self.scale,
                enable_gqa=self._gqa,
            )
        elif self._use_flex(x):
            y = _flex_attention()(
                q, k, v, block_mask=self.sparse_mask.block_mask(t), scale=self.scale,
                enable_gqa=self._gqa,
            )
        else:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=self.sparse_mask.keep(t), dropout_p=dropout_p,
                scale=self.scale, enable_gqa=self._gqa,
            )
        # Fused kernels lay y out as (B, T, H, q): the reshape is then a view, not a copy.
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))


class CrossAttention(nn.Module):
    """Attention of decoder queries over encoder keys and values (Vaswani et al. 2017, 3.2.3).

    ``c_q`` is Linear(d, d) on the decoder stream, ``c_kv`` Linear(d, 2 d_kv) on the encoder
    output (d_kv = n_kv_heads * d_head: grouped-query attention groups the encoder's key/value
    heads as `SelfAttention` does), ``c_proj`` Linear(d, d). Every query meets every source
    position (no mask, no position rotation: positions enter through each stack's own
    self-attention). Always SDPA: with no mask there is nothing for FlexAttention to skip.

    Args:
        config: The model config.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        self.n_heads = config.n_heads
        self.n_kv_heads = required("n_kv_heads", config.n_kv_heads)
        self.d_head = config.d_head
        self._gqa = self.n_kv_heads != self.n_heads
        self.c_q = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.c_kv = nn.Linear(config.d_model, 2 * config.d_kv, bias=config.bias)
        self.c_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = config.dropout
        self.set_temperature(config.attn_temperature)

    def set_temperature(self, tau: float) -> None:
        """Set tau; the softmax scale becomes 1 / (sqrt(d_head) * tau) (muP: 1 / (d_head * tau))."""
        self.scale = attn_scale(self.config, tau)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> torch.Tensor:
        """Attend from the decoder stream to the encoder output.

        Args:
            x: Decoder stream ``(B, T_dec, d_model)``.
            memory: Encoder output ``(B, T_enc, d_model)``.

        Returns:
            ``(B, T_dec, d_model)``.
        """
        b, t, d = x.shape
        s = memory.shape[1]
        q = self.c_q(x).view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T_dec, q)
        k, v = self.c_kv(memory).split(self.n_kv_heads * self.d_head, dim=-1)
        k = k.view(b, s, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, H_kv, T_enc, q)
        v = v.view(b, s, self.n_kv_heads, self.d_head).transpose(1, 2)
        dropout_p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, dropout_p=dropout_p, scale=self.scale,
                                           enable_gqa=self._gqa)
        return self.c_proj(y.transpose(1, 2).reshape(b, t, d))
