"""What each corpus URI's splits are made of, and the content hash they are cached under.

A `Source` is a parsed URI (`sweep.data.uris`) made ready to prepare: its key, its vocab, and
how to make its splits. The key covers the prepared content: for ``tokens:`` the files' paths,
sizes and modification times (so large corpora are not re-read); for ``text:`` every document's
path and bytes, the URI's globs, ``VAL_FRACTION`` and the near-duplicate rule
(`sweep.data.near_duplicates.RULE`), which decide the split, so a changed split is a new corpus
too; for the others the bytes or the task's parameters. The last
``VAL_FRACTION`` of a builtin or synthetic stream is the validation split; ``text:`` folders
hold out whole documents (`sweep.data.text.split_documents`); ``tokens:`` corpora keep their
own ``val.bin``.
"""

from __future__ import annotations

import hashlib
import json
import os
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sweep.data import near_duplicates, synthetic, text
from sweep.data.corpus import VAL_FRACTION, DataError
from sweep.data.uris import (
    SYNTHETIC_TASKS,
    BuiltinUri,
    ParsedUri,
    SyntheticUri,
    TextUri,
    TokensUri,
)

__all__ = ["Source", "Splits", "content_hash", "source"]

_PREP_VERSION = "1"  # bump when preparation changes, so old caches are not reused
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}

#: ``(train, val, entropy_rate, summary)``; ``val`` None means the last `VAL_FRACTION` of
#: ``train`` (one stream).
Splits = tuple[np.ndarray, np.ndarray | None, float | None, dict[str, Any]]


@dataclass(frozen=True)
class Source:
    """A corpus ready to prepare: its cache key and how to make its splits.

    ``make`` returns the `Splits`. With ``files`` (``train`` and ``val`` paths), the splits
    are memory maps of the user's own files, never copied.
    """

    digest: str
    vocab: int
    byte_level: bool
    make: Callable[[], Splits]
    files: dict[str, Path] | None = None

    @property
    def in_place(self) -> bool:
        """Whether the splits are the user's own files, read where they are."""
        return self.files is not None


def content_hash(*parts: bytes) -> str:
    """BLAKE2b (128 bits, hex) of the preparation version and ``parts``, each length-prefixed."""
    h = hashlib.blake2b(digest_size=16)
    h.update(_PREP_VERSION.encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    # A fixed pseudo-random order (hash of the relative path) rather than alphabetical, so the
    # size cap and the tail validation split both sample the whole library, not a few packages.
    return sorted(files, key=lambda p: content_hash(p.relative_to(root).as_posix().encode()))


def _read_stdlib(max_bytes: int) -> bytes:
    parts, size = [], 0
    for path in _stdlib_files():
        blob = path.read_bytes()
        parts.append(blob)
        size += len(blob)
        if size >= max_bytes:
            break
    return b"".join(parts)[:max_bytes]


def _as_tokens(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.uint8).astype(np.uint16)


def _bytes_source(uri: str, raw: bytes, vocab_size: int | None) -> Source:
    if not raw:
        raise DataError(f"corpus {uri!r} is empty")
    vocab = 256 if vocab_size is None else vocab_size
    digest = content_hash(b"bytes", raw, str(vocab).encode())

    def make() -> Splits:
        return _as_tokens(raw), None, None, {"split": "tail"}

    return Source(digest, vocab, True, make)


def _text_source(uri: str, parsed: TextUri, vocab_size: int | None) -> Source:
    """A ``text:`` corpus: its documents read, the key covering everything the split uses."""
    path, query = parsed.path, parsed.query
    try:
        docs = text.read_documents(path, query)
    except ValueError as exc:
        raise DataError(f"corpus {uri!r}: {exc}") from None
    if docs.n_bytes == 0:
        raise DataError(f"corpus {uri!r} is empty")
    vocab = 256 if vocab_size is None else vocab_size
    key = json.dumps({"include": query.include, "exclude": query.exclude, "val": query.val,
                      "val_fraction": VAL_FRACTION, "vocab": vocab, "file": path.is_file(),
                      "near_duplicates": near_duplicates.RULE})
    # Keyed apart from the b"bytes" key text corpora had before their split held out whole
    # documents, so no earlier tail-split copy is reused; builtin, synthetic and tokens corpora
    # keep their keys (and the checkpoints and trunks keyed on them stay valid).
    parts = [b"text", key.encode()]
    for name, blob in zip(docs.names, docs.texts, strict=True):
        parts += [name.encode("utf-8", "surrogateescape"), blob]
    digest = content_hash(*parts)

    def make() -> Splits:
        try:
            split = text.split_documents(docs, VAL_FRACTION, query.val)
        except ValueError as exc:
            raise DataError(f"corpus {uri!r}: {exc}") from None
        summary = {"split": split.method, "documents": len(docs.names),
                   "val_documents": len(split.val), "binary_skipped": docs.n_binary,
                   "excluded": docs.n_excluded, "near_duplicate_groups": split.n_groups,
                   "near_duplicate_documents": split.n_grouped, "warnings": split.warnings}
        train = _as_tokens(b"".join(docs.texts[i] for i in split.train))
        if split.method == "tail":
            return train, None, None, summary
        return train, _as_tokens(b"".join(docs.texts[i] for i in split.val)), None, summary

    return Source(digest, vocab, True, make)


def _synthetic_source(p: SyntheticUri, vocab_size: int | None) -> Source:
    vocab, n = p.vocab, p.tokens

    def make() -> Splits:
        if p.task == "reverse":
            tokens, entropy_rate = synthetic.reverse_stream(n, vocab, p.length, p.seed)
            length = 2 * p.length + 1
            n_val = max(1, int(len(tokens) // length * VAL_FRACTION)) * length
            return tokens[:-n_val], tokens[-n_val:], entropy_rate, {
                "split": "examples", "examples": {"length": length, "src_len": p.length,
                                                  "target_loss": 0.0}}
        if p.task == "markov":
            tokens, entropy_rate = synthetic.markov_stream(n, vocab, p.order, p.alpha, p.seed)
        elif p.task == "copy":
            tokens, entropy_rate = synthetic.copy_stream(n, vocab, p.length, p.seed)
        else:
            tokens, entropy_rate = synthetic.associative_recall_stream(n, vocab, p.pairs,
                                                                       p.seed)
        return tokens, None, entropy_rate, {"split": "tail"}

    key = json.dumps({"task": p.task,
                      **{k: getattr(p, k) for k in sorted(SYNTHETIC_TASKS[p.task])}},
                     sort_keys=True)
    model_vocab = vocab if vocab_size is None else vocab_size
    digest = content_hash(b"synthetic", key.encode(), str(model_vocab).encode())
    return Source(digest, model_vocab, False, make)


def _tokens_source(parsed: TokensUri) -> Source:
    files, vocab = parsed.files, parsed.vocab
    stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files.values()]
    digest = content_hash(b"tokens", json.dumps(stats).encode(), str(vocab).encode())

    def make() -> Splits:
        train = np.memmap(files["train"], dtype=np.uint16, mode="r")
        val = np.memmap(files["val"], dtype=np.uint16, mode="r")
        return train, val, None, {"split": "files"}

    return Source(digest, vocab, False, make, files=files)


def source(uri: str, parsed: ParsedUri, vocab_size: int | None) -> Source:
    """The `Source` of ``uri``, parsed by `sweep.data.uris.parse_uri`.

    Reads what the key needs: the standard library's files, a ``text:`` corpus's documents,
    a ``tokens:`` folder's file stats; a synthetic task is generated only by ``make``.

    Raises:
        DataError: An empty corpus, or a ``text:`` one with no text document (or a binary
            file, or ``val=`` globs matching none); naming ``uri``.
        OSError: A file cannot be read.
    """
    if isinstance(parsed, BuiltinUri):
        return _bytes_source(uri, _read_stdlib(parsed.max_bytes), vocab_size)
    if isinstance(parsed, TextUri):
        return _text_source(uri, parsed, vocab_size)
    if isinstance(parsed, TokensUri):
        return _tokens_source(parsed)
    return _synthetic_source(parsed, vocab_size)
