"""A prepared corpus: its splits, the windows a trainer reads from them, its description.

`Corpus` is what `sweep.data.load_corpus` returns (URIs in `sweep.data.uris`, preparation in
`sweep.data.cache`); `DataError` (`sweep.data.errors`) is what every corpus problem raises.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sweep.data.errors import DataError

__all__ = ["VAL_FRACTION", "Corpus", "DataError", "unigram_entropy"]

#: The share of a stream (builtin, synthetic, a one-document ``text:``) held out as the
#: validation split, and of a ``text:`` folder's documents.
VAL_FRACTION = 0.1


@dataclass(frozen=True, eq=False)
class Corpus:
    """A prepared corpus.

    Attributes:
        uri: The URI it was loaded from.
        vocab_size: Number of token ids; every id is below it.
        byte_level: Whether tokens are raw bytes (then ``val_bpb`` is meaningful).
        train: ``(N_train,)`` ``uint16`` memory map.
        val: ``(N_val,)`` ``uint16`` memory map.
        baseline_unigram_loss: Entropy of the val split's unigram distribution, nats per token:
            the loss of the best model that ignores context.
        entropy_rate: The source's entropy rate in nats per token where known (synthetic
            sources), else ``None``.
        content_hash: Hash of the prepared content; the cache key.
        examples: For a corpus of sequence-to-sequence examples (``synthetic:reverse``), plain
            data ``{"length": 2L + 1, "src_len": L, "target_loss": 0.0}``: the tokens of one
            example, its source length, and the optimal loss in nats per token on its target
            part. Windows then start at example boundaries only. ``None`` for a stream.
        summary: Plain data on what was read and how it was split: ``split`` (``"tail"``,
            ``"documents"``, ``"val-glob"`` or ``"files"`` for ``tokens:``), and for
            ``text:`` ``documents``, ``val_documents``, ``binary_skipped``, ``excluded``,
            ``near_duplicate_groups``, ``near_duplicate_documents``; ``warnings`` (strings).
    """

    uri: str
    vocab_size: int
    byte_level: bool
    train: np.ndarray
    val: np.ndarray
    baseline_unigram_loss: float
    entropy_rate: float | None
    content_hash: str
    summary: dict[str, Any] = field(default_factory=dict)
    examples: dict[str, Any] | None = None

    def require(self, seq_len: int, *, src_len: int | None = None) -> None:
        """Check both splits hold at least one window of ``seq_len + 1`` tokens.

        For a corpus of examples, also that a window is one example (``seq_len + 1`` is its
        length) and that an encoder-decoder model's ``src_len`` is its source length.

        Raises:
            DataError: Naming the URI and the split that is too short, or the field
                (``seq_len``, ``src_len``) that does not fit the examples.
        """
        if self.examples is not None:
            length, src = self.examples["length"], self.examples["src_len"]
            what = (f"corpus {self.uri!r} holds examples of {length} tokens ({src} source, a "
                    f"separator, {length - src - 1} target)")
            if seq_len != length - 1:
                raise DataError(f"{what}; seq_len must be {length - 1}, got {seq_len}")
            if src_len is not None and src_len != src:
                raise DataError(f"{what}; src_len must be {src}, got {src_len}")
        for name, split in (("train", self.train), ("val", self.val)):
            if len(split) < seq_len + 1:
                raise DataError(
                    f"corpus {self.uri!r}: {name} split has {len(split)} tokens, fewer than "
                    f"one sequence of seq_len + 1 = {seq_len + 1}"
                )

    def describe(self) -> list[str]:
        """The corpus in a few lines for a person: size, split, baseline, then any warnings."""
        n_train, n_val = len(self.train), len(self.val)
        unit = "bytes" if self.byte_level else "tokens"
        s = self.summary
        head = f"corpus {self.uri}: {n_train + n_val:,} {unit}"
        if "documents" in s:
            head += f" in {s['documents']:,} documents"
            skipped = [f"{s[k]:,} {what}" for k, what in
                       (("binary_skipped", "binary files skipped"),
                        ("excluded", "files excluded by include/exclude")) if s.get(k)]
            if skipped:
                head += f" ({', '.join(skipped)})"
        share = n_val / (n_train + n_val)
        how = {"tail": f"the last {VAL_FRACTION:.0%} of the stream",
               "examples": f"the last {VAL_FRACTION:.0%} of the examples",
               "files": "the folder's own val.bin",
               "documents": "whole documents by a hash of their path",
               "val-glob": "whole documents matching val="}.get(s.get("split", "tail"), "")
        split = f"split: train {n_train:,}, val {n_val:,} {unit} ({share:.1%}), {how}"
        if s.get("split") == "documents":
            split += (f": {s['val_documents']:,} of {s['documents']:,} documents val "
                      f"({s['val_documents'] / s['documents']:.1%}; target {VAL_FRACTION:.0%})")
        elif "val_documents" in s and s.get("split") != "tail":
            split += f"; {s['val_documents']:,} val documents"
        if s.get("near_duplicate_groups"):
            split += (f"; {s['near_duplicate_documents']:,} near-duplicate documents in "
                      f"{s['near_duplicate_groups']:,} groups, each group on one side")
        base = f"unigram baseline {self.baseline_unigram_loss:.4f} nats/token"
        if self.byte_level:
            base += f" ({self.baseline_unigram_loss / math.log(2):.4f} bits/byte)"
        if self.entropy_rate is not None:
            base += f"; entropy rate {self.entropy_rate:.4f} nats/token"
        if self.examples is not None:
            e = self.examples
            base += (f"; examples of {e['length']} tokens ({e['src_len']} source), optimal "
                     f"target loss {e['target_loss']:g} nats/token")
        return [head, split, base] + [f"warning: {w}" for w in s.get("warnings", [])]

    def train_batch(
        self, seed: int, index: int, batch_size: int, seq_len: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The ``index``-th training batch of the stream seeded by ``seed``.

        Windows start at uniformly random offsets drawn from a generator seeded by
        ``(seed, index)``, so the batch is a pure function of its position: resuming only needs
        the index.

        Returns:
            ``(x, y)``, each ``(batch_size, seq_len)`` ``int64``; ``y`` is ``x`` shifted by one.
        """
        rng = np.random.default_rng([seed, index])
        if self.examples is not None:  # whole examples: starts at example boundaries
            length = self.examples["length"]
            starts = length * rng.integers(0, len(self.train) // length, size=batch_size)
            return _windows(self.train, starts, seq_len)
        starts = rng.integers(0, len(self.train) - seq_len, size=batch_size)
        return _windows(self.train, starts, seq_len)

    def val_batches(
        self, seq_len: int, n_tokens: int, batch_size: int
    ) -> list[tuple[np.ndarray, np.ndarray]]:
        """Fixed validation batches: about ``n_tokens`` target tokens in evenly spaced windows.

        The windows depend only on the corpus, ``seq_len`` and ``n_tokens``, never on a trial's
        seed, so every trial of a study is scored on the same tokens.

        Returns:
            List of ``(x, y)`` pairs of ``(b, seq_len)`` ``int64`` arrays, b <= batch_size.
        """
        max_start = len(self.val) - seq_len - 1
        n_windows = max(1, min(math.ceil(n_tokens / seq_len), max_start + 1))
        if self.examples is not None:  # the first whole examples, each once
            length = self.examples["length"]
            n_windows = max(1, min(math.ceil(n_tokens / seq_len), len(self.val) // length))
            starts = length * np.arange(n_windows, dtype=np.int64)
        else:
            starts = np.linspace(0, max_start, n_windows).round().astype(np.int64)
        return [
            _windows(self.val, starts[i : i + batch_size], seq_len)
            for i in range(0, n_windows, batch_size)
        ]


def _windows(data: np.ndarray, starts: np.ndarray, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    idx = starts[:, None] + np.arange(seq_len + 1)[None, :]
    chunk = data[idx].astype(np.int64)
    return chunk[:, :-1], chunk[:, 1:]


def unigram_entropy(tokens: np.ndarray, vocab_size: int) -> float:
    """Plug-in entropy of the token frequencies, nats per token."""
    counts = np.bincount(np.asarray(tokens), minlength=vocab_size).astype(np.float64)
    p = counts[counts > 0] / counts.sum()
    return float(-(p * np.log(p)).sum())
