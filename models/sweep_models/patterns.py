"""Sparse attention patterns: which query-key pairs a mask keeps, in pure Python.

A pattern is given by its name and ``attn_sparsity``, the fraction of the causal query-key pairs
(all T^2 pairs for an encoder) that it removes. The pattern's size is derived from the sparsity:
of all sizes the pattern can take at this sequence length, the one whose achieved sparsity is
closest to the requested one (ties go to the denser mask). `AttnLayout` exposes that size, the
number of kept pairs (what the cost model charges for attention) and the achieved sparsity.

Patterns, with d = i - j the distance from query i back to key j (|i - j| for encoders):

- ``dense``: every pair (j <= i when causal).
- ``local``: a sliding window, d < window (Beltagy et al. 2020, "Longformer", sec. 3.1).
- ``strided``: Child et al. 2019, "Generating Long Sequences with Sparse Transformers",
  sec. 4.2, the strided pattern: d < stride (previous ``stride`` keys) or d % stride == 0.
- ``block_sparse``: Zaheer et al. 2020, "Big Bird", sec. 2: in blocks of ``block_size``, each
  query block keeps ``n_window_blocks`` neighbouring blocks, the first ``n_global_blocks`` blocks
  (which in turn see every block), and ``n_random_blocks`` random blocks drawn with ``seed``.

Every pattern keeps the diagonal (d = 0), so no query is ever left with no key.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from functools import lru_cache
from typing import TypedDict

from sweep_models.errors import ConfigError, required

__all__ = ["AttnLayout", "PatternError", "derive_layout", "kept_pairs", "total_pairs"]


class PatternError(ConfigError):
    """The requested sparsity cannot be reached by the pattern at this sequence length."""


@dataclass(frozen=True)
class AttnLayout:
    """A pattern's derived size and what its mask keeps.

    Attributes:
        pattern: Pattern name.
        seq_len: Sequence length T.
        causal: Whether keys after the query are excluded.
        requested_sparsity: The ``attn_sparsity`` asked for.
        sparsity: The sparsity achieved, 1 - kept_pairs / total_pairs.
        kept_pairs: Query-key pairs the mask keeps, per head and sequence.
        total_pairs: Pairs of the unsparsified mask: T(T+1)/2 causal, T^2 otherwise.
        window: ``local``: window length in keys (d < window).
        stride: ``strided``: the stride l (d < l or d % l == 0); 1 at seq_len 1, whose one
            pair is the diagonal.
        block_size: ``block_sparse``: block size in tokens.
        n_window_blocks, n_global_blocks, n_random_blocks: ``block_sparse`` block counts.
        key_blocks: ``block_sparse``: for each query block, the sorted key blocks it keeps.
    """

    pattern: str
    seq_len: int
    causal: bool
    requested_sparsity: float
    sparsity: float
    kept_pairs: int
    total_pairs: int
    window: int | None = None
    stride: int | None = None
    block_size: int | None = None
    n_window_blocks: int | None = None
    n_global_blocks: int | None = None
    n_random_blocks: int | None = None
    key_blocks: tuple[tuple[int, ...], ...] | None = None

    def keeps(self, i: int, j: int) -> bool:
        """Whether query position i attends to key position j (slow; for tests and docs)."""
        if self.causal and j > i:
            return False
        d = abs(i - j)
        if self.pattern == "dense":
            return True
        if self.pattern == "local":
            return d < required("window", self.window)
        if self.pattern == "strided":
            stride = required("stride", self.stride)
            return d < stride or d % stride == 0
        block = required("block_size", self.block_size)
        return (j // block) in required("key_blocks", self.key_blocks)[i // block]


class _Size(TypedDict, total=False):
    """A pattern's size: the `AttnLayout` fields its pattern sets."""

    window: int
    stride: int
    block_size: int
    n_window_blocks: int
    n_global_blocks: int
    n_random_blocks: int
    key_blocks: tuple[tuple[int, ...], ...]


def total_pairs(seq_len: int, causal: bool) -> int:
    """Query-key pairs of a dense mask: T(T+1)/2 causal, T^2 bidirectional."""
    return seq_len * (seq_len + 1) // 2 if causal else seq_len * seq_len


def _pairs_within(seq_len: int, width: int, causal: bool) -> int:
    """Pairs with distance d < width (width <= T)."""
    t, w = seq_len, min(width, seq_len)
    one_side = w * t - w * (w - 1) // 2  # sum_{d=0}^{w-1} (T - d)
    return one_side if causal else 2 * one_side - t


def _pairs_multiple(seq_len: int, stride: int, causal: bool) -> int:
    """Pairs with distance d = k * stride, k >= 1, d < T."""
    m = (seq_len - 1) // stride
    one_side = m * seq_len - stride * m * (m + 1) // 2  # sum_{k=1}^{m} (T - k l)
    return one_side if causal else 2 * one_side


def kept_pairs(
    pattern: str,
    seq_len: int,
    *,
    causal: bool = True,
    window: int | None = None,
    stride: int | None = None,
    block_size: int | None = None,
    key_blocks: tuple[tuple[int, ...], ...] | None = None,
) -> int:
    """Query-key pairs a pattern's mask keeps on ``seq_len`` positions, per head and sequence.

    The one count of kept pairs: `derive_layout` ranks a pattern's sizes by it and the cost
    model charges attention by it. It equals ``attention_mask(layout)[:T, :T].sum()``, so for a
    ``seq_len`` shorter than the layout's it counts the top-left ``(T, T)`` block of the mask,
    the part the model uses on a shorter sequence.

    - ``dense``: T(T+1)/2 causal, T^2 bidirectional.
    - ``local``: pairs with d < window: sum_{d=0}^{w-1} (T - d) per side.
    - ``strided``: d < stride plus the multiples d = k * stride (Child et al. 2019, sec. 4.2).
    - ``block_sparse``: for each query block the sizes of the key blocks it keeps; the diagonal
      block of a causal mask keeps its lower triangle. Blocks past ``seq_len`` are skipped.

    Args:
        pattern: ``dense``, ``local``, ``strided`` or ``block_sparse``.
        seq_len: Sequence length T.
        causal: Whether keys after the query are excluded.
        window: ``local``: window length in keys.
        stride: ``strided``: the stride.
        block_size: ``block_sparse``: block size in tokens.
        key_blocks: ``block_sparse``: for each query block, the key blocks it keeps (at least
            ``ceil(seq_len / block_size)`` rows).

    Returns:
        The number of kept pairs.

    Raises:
        PatternError: For an unknown pattern, or a pattern without the size it needs.
    """
    t = seq_len
    if pattern == "dense":
        return total_pairs(t, causal)
    if pattern == "local" and window is not None:
        return _pairs_within(t, window, causal)
    if pattern == "strided" and stride is not None:
        return _pairs_within(t, stride, causal) + _pairs_multiple(t, stride, causal)
    if pattern == "block_sparse" and block_size is not None and key_blocks is not None:
        n_blocks = -(-t // block_size)
        kept = 0
        for qb in range(n_blocks):
            q_size = min(block_size, t - qb * block_size)
            for kb in key_blocks[qb]:
                if kb >= n_blocks:
                    continue
                if causal and kb == qb:
                    kept += q_size * (q_size + 1) // 2
                elif not causal or kb < qb:
                    kept += q_size * min(block_size, t - kb * block_size)
        return kept
    raise PatternError(
        f"cannot count the pairs of attn_pattern={pattern!r}: an unknown pattern, or the window, "
        "stride or block_size and key_blocks it needs are missing"
    )


def _local(seq_len: int, causal: bool) -> list[tuple[int, _Size]]:
    return [
        (kept_pairs("local", seq_len, causal=causal, window=w), {"window": w})
        for w in range(1, seq_len + 1)
    ]


def _strided(seq_len: int, causal: bool) -> list[tuple[int, _Size]]:
    # Strides 2..T; at T = 1 the one pair is the diagonal, which stride 1 keeps.
    strides = range(2, seq_len + 1) if seq_len > 1 else (1,)
    return [
        (kept_pairs("strided", seq_len, causal=causal, stride=stride), {"stride": stride})
        for stride in strides
    ]


def _block_budget_split(budget: int) -> tuple[int, int, int]:
    """Split a per-row budget of key blocks into (window, global, random) block counts."""
    n_global = min(1, budget - 1)
    rest = budget - n_global
    n_window = (rest + 1) // 2
    return n_window, n_global, rest - n_window


def _block_table(
    n_blocks: int, n_window: int, n_global: int, n_random: int, causal: bool, seed: int
) -> tuple[tuple[int, ...], ...]:
    rng = random.Random(seed)
    rows = []
    for qb in range(n_blocks):
        allowed = range(qb + 1) if causal else range(n_blocks)
        if qb < n_global:
            keep = set(allowed)
        else:
            keep = {kb for kb in allowed if abs(qb - kb) < n_window or kb < n_global}
        rest = [kb for kb in allowed if kb not in keep]
        keep.update(rng.sample(rest, min(n_random, len(rest))))
        rows.append(tuple(sorted(keep)))
    return tuple(rows)


def _block_sparse(seq_len: int, causal: bool, block: int, seed: int) -> list[tuple[int, _Size]]:
    n_blocks = math.ceil(seq_len / block)
    out: list[tuple[int, _Size]] = []
    for budget in range(1, n_blocks + 1):
        n_window, n_global, n_random = _block_budget_split(budget)
        table = _block_table(n_blocks, n_window, n_global, n_random, causal, seed)
        out.append(
            (
                kept_pairs("block_sparse", seq_len, causal=causal, block_size=block,
                           key_blocks=table),
                {
                    "block_size": block,
                    "n_window_blocks": n_window,
                    "n_global_blocks": n_global,
                    "n_random_blocks": n_random,
                    "key_blocks": table,
                },
            )
        )
    return out


@lru_cache(maxsize=4096)
def derive_layout(
    pattern: str,
    sparsity: float,
    seq_len: int,
    *,
    causal: bool = True,
    block_size: int = 64,
    seed: int = 0,
) -> AttnLayout:
    """Derive a pattern's size from the requested sparsity.

    Args:
        pattern: ``dense``, ``local``, ``strided`` or ``block_sparse``.
        sparsity: Fraction of the dense (causal) query-key pairs to remove, in [0, 1).
        seq_len: Sequence length T.
        causal: Causal mask (True) or bidirectional.
        block_size: Block size of ``block_sparse``.
        seed: Seed of ``block_sparse``'s random blocks.

    Returns:
        The layout whose achieved sparsity is closest to ``sparsity`` (ties: the denser one).

    Raises:
        PatternError: ``dense`` with sparsity > 0, or a sparsity beyond the sparsest mask the
            pattern has at this length (going further would leave some query with no key).
    """
    total = total_pairs(seq_len, causal)

    def layout(kept: int, size: _Size) -> AttnLayout:
        return AttnLayout(pattern=pattern, seq_len=seq_len, causal=causal,
                          requested_sparsity=float(sparsity), sparsity=1.0 - kept / total,
                          kept_pairs=kept, total_pairs=total, **size)

    if pattern == "dense":
        if sparsity > 0:
            raise PatternError(
                f"attn_sparsity={sparsity} needs a sparse attn_pattern (local, strided, "
                "block_sparse); attn_pattern='dense' keeps every pair"
            )
        return layout(total, {})
    if pattern == "local":
        candidates = _local(seq_len, causal)
    elif pattern == "strided":
        candidates = _strided(seq_len, causal)
    elif pattern == "block_sparse":
        candidates = _block_sparse(seq_len, causal, block_size, seed)
    else:
        raise PatternError(f"attn_pattern={pattern!r} is not a known pattern")
    max_sparsity = 1.0 - min(kept for kept, _ in candidates) / total
    if sparsity > max_sparsity + 1e-12:
        why = {
            "local": " (a window of 1 key; any sparser mask would leave some query with no key)",
            "strided": " (at the stride that minimises kept pairs, about sqrt(T / 2))",
            "block_sparse": " (one block per query block; a smaller attn_block_size goes further)",
        }[pattern]
        raise PatternError(
            f"attn_sparsity={sparsity} is more than attn_pattern={pattern!r} can remove at "
            f"seq_len={seq_len}: its sparsest mask removes {max_sparsity:.4f} of the pairs{why}; "
            f"use attn_sparsity <= {math.floor(max_sparsity * 1e4) / 1e4}"
        )
    kept, size = min(candidates, key=lambda c: (abs((1.0 - c[0] / total) - sparsity), -c[0]))
    return layout(kept, size)
