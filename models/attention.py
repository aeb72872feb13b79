"""Multi-head self-attention with temperature and sparse patterns, on two backends.

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

The temperature tau is folded into the softmax scale: scale = 1 / (sqrt(d_head) * tau).
"""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from models.config import ModelConfig
from models.patterns import AttnLayout

__all__ = ["SelfAttention", "apply_rope", "attention_mask", "rope_tables"]


def attention_mask(layout: AttnLayout, device: torch.device | str | None = None) -> torch.Tensor:
    """The boolean mask of a layout: ``True`` where query i may attend to key j.

    Args:
        layout: A derived attention layout (see `models.patterns`).
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
        keep &= d < layout.window
    elif layout.pattern == "strided":
        keep &= (d < layout.stride) | (d % layout.stride == 0)
    elif layout.pattern == "block_sparse":
        n_blocks = len(layout.key_blocks)
        blocks = torch.zeros(n_blocks, n_blocks, dtype=torch.bool)
        for qb, row in enumerate(layout.key_blocks):
            blocks[qb, list(row)] = True
        b = layout.block_size
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


class SelfAttention(nn.Module):
    """Multi-head self-attention with one fused QKV projection.

    Input and output shape ``(B, T, d_model)``.
    """

    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.d_head = config.d_head
        self.c_attn = nn.Linear(config.d_model, 3 * config.d_model, bias=config.bias)
        self.c_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.causal = config.causal
        self.dense = config.attn_pattern == "dense"
        self.backend = config.attn_backend
        self.dropout = config.dropout
        self.set_temperature(config.attn_temperature)
        self._block_masks: dict[tuple, object] = {}
        self._warned_cpu_backward = False

    def set_temperature(self, tau: float) -> None:
        """Set tau; the softmax scale becomes 1 / (sqrt(d_head) * tau)."""
        self.scale = 1.0 / (math.sqrt(self.d_head) * tau)

    def resolved_backend(self, device: torch.device) -> str:
        """The backend used for inputs on ``device``: ``sdpa`` or ``flex``."""
        if self.backend != "auto":
            return self.backend
        return "flex" if device.type == "cuda" and not self.dense else "sdpa"

    def _block_mask(self, mask: torch.Tensor, t: int):
        from torch.nn.attention.flex_attention import create_block_mask

        key = (t, mask.device, mask.data_ptr())
        if key not in self._block_masks:
            sub = mask[:t, :t]

            def mask_mod(b, h, q_idx, kv_idx):
                return sub[q_idx, kv_idx]

            self._block_masks[key] = create_block_mask(
                mask_mod, None, None, t, t, device=mask.device
            )
        return self._block_masks[key]

    def forward(
        self,
        x: torch.Tensor,
        mask: torch.Tensor | None = None,
        rope: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> torch.Tensor:
        """Attend.

        Args:
            x: ``(B, T, d_model)``.
            mask: Bool ``(T_max, T_max)`` keep-mask for sparse patterns, or ``None`` (dense).
            rope: ``(cos, sin)`` tables of shape ``(T_max, d_head)``, or ``None``.

        Returns:
            ``(B, T, d_model)``.
        """
        b, t, d = x.shape
        q, k, v = self.c_attn(x).split(d, dim=2)
        q = q.view(b, t, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, q)
        k = k.view(b, t, self.n_heads, self.d_head).transpose(1, 2)
        v = v.view(b, t, self.n_heads, self.d_head).transpose(1, 2)
        if rope is not None:
            cos, sin = rope[0][:t], rope[1][:t]
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        use_flex = mask is not None and self.resolved_backend(x.device) == "flex"
        if use_flex and x.device.type == "cpu" and torch.is_grad_enabled() and x.requires_grad:
            # FlexAttention has no backward on CPU; the boolean-mask path gives the same output.
            if not self._warned_cpu_backward:
                warnings.warn(
                    "attn_backend='flex' has no backward pass on CPU; training uses the "
                    "boolean-mask SDPA path instead (same outputs)",
                    stacklevel=2,
                )
                self._warned_cpu_backward = True
            use_flex = False
        if use_flex:
            y = _flex_attention()(q, k, v, block_mask=self._block_mask(mask, t), scale=self.scale)
        else:
            y = F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=None if mask is None else mask[:t, :t],
                dropout_p=self.dropout if self.training else 0.0,
                is_causal=self.causal and mask is None,
                scale=self.scale,
            )
        y = y.transpose(1, 2).contiguous().view(b, t, d)  # (B, T, d_model)
        return self.c_proj(y)
