"""Near-duplicate documents, found by their shingles: bottom-k sketches and Broder's resemblance.

A document's shingles are its 8-byte windows after normalisation (ASCII lowercased, every run of
whitespace one space), so re-wrapped or re-cased copies share them. Each shingle is hashed to
64 bits (splitmix64's finaliser) and a document keeps the `SKETCH_SIZE` smallest distinct
hashes, its bottom-k sketch. The resemblance (Jaccard similarity of the shingle sets) of two
documents A and B is estimated from their sketches as Broder's

    r(A, B) ~= |MIN_k(S(A) | S(B)) & S(A) & S(B)| / |MIN_k(S(A) | S(B))|

(A. Broder, "On the resemblance and containment of documents", SEQUENCES 1997, section 3;
exact when both documents have at most k shingles; standard error about
sqrt(r (1 - r) / k), 0.044 at r = 0.5 with k = 128). Two documents are near-duplicates when
r >= `NEAR_DUPLICATE_RESEMBLANCE`. Candidate pairs are the documents that share at least a
quarter of their sketch values (near-duplicates at r >= 0.5 share about 2r / (1 + r) >= 2/3
of them), found through an index from sketch value to documents, so the cost is about
linear in the corpus rather than quadratic in the number of documents. Identical normalised
documents are grouped first, by a digest of their content, and enter the index once.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["NEAR_DUPLICATE_RESEMBLANCE", "SHINGLE_BYTES", "SKETCH_SIZE", "NearDuplicates",
           "find_near_duplicates", "normalise", "resemblance", "sketch"]

SHINGLE_BYTES = 8
SKETCH_SIZE = 128
NEAR_DUPLICATE_RESEMBLANCE = 0.5
#: Sketch values held by more documents than this (boilerplate every file shares) propose no
#: candidate pairs of their own; near-duplicates share many other values.
_MAX_POSTING = 256


def normalise(text: bytes) -> bytes:
    """``text`` with ASCII letters lowercased and every run of whitespace one space."""
    return b" ".join(text.lower().split())


def _mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser (S. Vigna, ``splitmix64.c``; Steele, Lea and Flood, OOPSLA 2014).

    Args:
        x: ``(n,)`` ``uint64``.

    Returns:
        ``(n,)`` ``uint64``, a bijective scramble of ``x``.
    """
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def sketch(text: bytes, k: int = SKETCH_SIZE) -> np.ndarray:
    """The bottom-k sketch of the normalised ``text``'s 8-byte shingles.

    Args:
        text: A document's bytes (normalised here with `normalise`).
        k: Sketch size.

    Returns:
        ``(m,)`` sorted ``uint64``, ``m = min(k, distinct shingles)``; a document shorter than
        one shingle has the single shingle of its (zero-padded) bytes, an empty one none.
    """
    return _bottom_k(normalise(text), k)


def _bottom_k(normalised: bytes, k: int) -> np.ndarray:
    data = np.frombuffer(normalised, dtype=np.uint8)
    if len(data) == 0:
        return np.empty(0, dtype=np.uint64)
    if len(data) < SHINGLE_BYTES:
        data = np.concatenate([data, np.zeros(SHINGLE_BYTES - len(data), dtype=np.uint8)])
    n = len(data) - SHINGLE_BYTES + 1
    windows = np.zeros(n, dtype=np.uint64)
    for i in range(SHINGLE_BYTES):  # window j as a little-endian uint64 of bytes j..j+7
        windows |= data[i : i + n].astype(np.uint64) << np.uint64(8 * i)
    hashes = _mix64(windows)
    if n > 4 * k:  # the smallest 4k hold k distinct values unless shingles repeat a lot
        smallest = np.unique(np.partition(hashes, 4 * k)[: 4 * k])
        if len(smallest) >= k:
            return smallest[:k]
    return np.unique(hashes)[:k]


def resemblance(a: np.ndarray, b: np.ndarray, k: int = SKETCH_SIZE) -> float:
    """Broder's estimate of the resemblance of two documents from their sketches (see module).

    Returns:
        In ``[0, 1]``; 1.0 for two empty documents.
    """
    union = np.union1d(a, b)[:k]
    if len(union) == 0:
        return 1.0
    both = np.intersect1d(a, b, assume_unique=True)
    return float(np.isin(union, both, assume_unique=True).sum() / len(union))


@dataclass(frozen=True)
class NearDuplicates:
    """The near-duplicates among a list of documents.

    Attributes:
        copies: Documents identical after `normalise`, each list sorted, every document in
            exactly one (most are alone); its first member is its representative.
        pairs: ``(i, j, r)``: representatives ``i < j`` of different copies whose estimated
            resemblance ``r`` is at least the threshold, sorted.
    """

    copies: list[list[int]]
    pairs: list[tuple[int, int, float]]

    def groups(self) -> list[list[int]]:
        """Documents joined by copies and pairs, transitively (union-find).

        Returns:
            Every document in exactly one group; groups and their members sorted by index.
        """
        n = sum(len(c) for c in self.copies)
        parent = list(range(n))

        def root(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        links = [(c[0], other) for c in self.copies for other in c[1:]]
        for i, j in links + [(i, j) for i, j, _ in self.pairs]:
            a, b = root(i), root(j)
            if a != b:
                parent[max(a, b)] = min(a, b)
        groups: dict[int, list[int]] = defaultdict(list)
        for i in range(n):
            groups[root(i)].append(i)
        return sorted(groups.values())


def _candidates(sketches: list[np.ndarray]) -> list[tuple[int, int]]:
    """Pairs ``(a, b)``, ``a < b``, of sketches sharing at least a quarter of their values.

    Counted through the index from sketch value to sketches, vectorised: the pairs of each value
    held by 2 to `_MAX_POSTING` sketches, then the number of values each pair shares.
    """
    if len(sketches) < 2:
        return []
    sizes = np.array([len(s) for s in sketches])
    values = np.concatenate(sketches)
    owners = np.repeat(np.arange(len(sketches)), sizes)
    order = np.argsort(values, kind="stable")  # owners stay ascending within a value
    values, owners = values[order], owners[order]
    starts = np.flatnonzero(np.r_[True, values[1:] != values[:-1]])
    counts = np.diff(np.r_[starts, len(values)])
    keys = []
    for m in np.unique(counts[(counts > 1) & (counts <= _MAX_POSTING)]).tolist():
        members = owners[starts[counts == m][:, None] + np.arange(m)]  # (groups, m)
        upper = np.triu_indices(m, 1)
        keys.append(members[:, upper[0]].ravel() * len(sketches) + members[:, upper[1]].ravel())
    if not keys:
        return []
    pair_keys, shared = np.unique(np.concatenate(keys), return_counts=True)
    a, b = pair_keys // len(sketches), pair_keys % len(sketches)
    keep = shared * 4 >= np.minimum(sizes[a], sizes[b])
    return list(zip(a[keep].tolist(), b[keep].tolist(), strict=True))


def find_near_duplicates(texts: Sequence[bytes], *,
                         threshold: float = NEAR_DUPLICATE_RESEMBLANCE) -> NearDuplicates:
    """Identical and near-duplicate documents among ``texts`` (see the module docstring).

    Args:
        texts: The documents' bytes.
        threshold: Least estimated resemblance of a near-duplicate pair.
    """
    normalised = [normalise(text) for text in texts]
    by_digest: dict[bytes, list[int]] = defaultdict(list)
    for i, text in enumerate(normalised):
        by_digest[hashlib.blake2b(text, digest_size=16).digest()].append(i)
    copies = sorted(by_digest.values())
    firsts = [same[0] for same in copies]
    sketches = [_bottom_k(normalised[i], SKETCH_SIZE) for i in firsts]
    pairs = []
    for a, b in _candidates(sketches):
        r = resemblance(sketches[a], sketches[b])
        if r >= threshold:
            pairs.append((firsts[a], firsts[b], r))
    return NearDuplicates(copies, sorted(pairs))
