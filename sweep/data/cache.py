"""Corpora prepared once into a cache folder and read back through memory maps.

Preparation writes ``<cache_dir>/corpora/<content_hash>/{train,val}.bin`` and ``meta.json``
into a temporary folder and renames it into place, so parallel workers never see half-written
files and a second trial or worker reuses the result. The hash (`sweep.data.sources`) covers
the prepared content, so a changed corpus is prepared again. Each prepared corpus's
``meta.json`` keeps its summary (`Corpus.summary`: documents, binary files skipped, the split),
which `Corpus.describe` prints.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from sweep.data import text
from sweep.data.corpus import VAL_FRACTION, Corpus, DataError, unigram_entropy
from sweep.data.sources import Source, source
from sweep.data.uris import TextUri, parse_uri
from sweep.schema import METRIC_BASELINE

__all__ = ["INSPECT_MAX_BYTES", "inspect_corpus", "load_corpus"]

log = logging.getLogger(__name__)

#: `inspect_corpus` (``sweep validate``) reads at most this many bytes of a ``text:`` corpus
#: that has not been prepared yet.
INSPECT_MAX_BYTES = 64 * 2**20


def _check_ids(uri: str, name: str, tokens: np.ndarray, vocab: int) -> None:
    top = int(tokens.max()) if len(tokens) else -1
    if top >= vocab:
        raise DataError(f"corpus {uri!r}: {name} split has token id {top}, beyond "
                        f"vocab_size={vocab}")


def _splits(uri: str, src: Source) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Make the source's splits and the ``meta.json`` that describes them."""
    train, val, entropy_rate, summary = src.make()
    if val is None:
        if len(train) < 2:
            raise DataError(f"corpus {uri!r} has {len(train)} token(s); too short to split")
        n_val = max(1, int(len(train) * VAL_FRACTION))
        train, val = train[:-n_val], train[-n_val:]
    for name, split in (("train", train), ("val", val)):
        _check_ids(uri, name, split, src.vocab)
    meta = {"uri": uri, "vocab_size": src.vocab, "byte_level": src.byte_level,
            "entropy_rate": entropy_rate, METRIC_BASELINE: unigram_entropy(val, src.vocab),
            "n_train": len(train), "n_val": len(val), "in_place": src.in_place,
            "summary": summary}
    return train, val, meta


def _corpus(uri: str, src: Source, train: np.ndarray, val: np.ndarray,
            meta: dict[str, Any]) -> Corpus:
    summary = meta.get("summary", {})
    return Corpus(uri=uri, vocab_size=src.vocab, byte_level=src.byte_level, train=train,
                  val=val, baseline_unigram_loss=meta[METRIC_BASELINE],
                  entropy_rate=meta["entropy_rate"], content_hash=src.digest,
                  summary=summary, examples=summary.get("examples"))


def _write_split(tokens: np.ndarray, path: Path) -> None:
    """Write ``tokens`` to ``path``.

    A short write (numpy's "N requested and M written", with no errno) is raised as the full
    disk it is (``ENOSPC``).
    """
    try:
        tokens.tofile(path)
    except OSError as exc:
        if exc.errno is None and "requested and" in str(exc):
            raise OSError(errno.ENOSPC, f"the disk is full ({exc} bytes)", str(path)) from None
        raise


def _prepare(uri: str, cache_dir: Path, src: Source) -> Corpus:
    if src.vocab < 1:
        raise DataError(f"corpus {uri!r}: vocab_size={src.vocab} must be positive")
    final = Path(cache_dir) / "corpora" / src.digest
    if not (final / "meta.json").is_file():
        train, val, meta = _splits(uri, src)
        for warning in meta["summary"].get("warnings", []):
            log.warning("corpus %s: %s", uri, warning)
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{src.digest}-", dir=final.parent))
        try:
            if not src.in_place:
                for name, split in (("train", train), ("val", val)):
                    _write_split(np.asarray(split, dtype=np.uint16), tmp / f"{name}.bin")
            (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
            os.rename(tmp, final)
        except OSError:
            # Another worker renamed its copy into place first; theirs is identical.
            if not (final / "meta.json").is_file():
                raise
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    meta = json.loads((final / "meta.json").read_text())
    files = src.files or {n: final / f"{n}.bin" for n in ("train", "val")}
    train, val = (np.memmap(files[n], dtype=np.uint16, mode="r") for n in ("train", "val"))
    return _corpus(uri, src, train, val, meta)


def load_corpus(uri: str, cache_dir: Path | str, *, vocab_size: int | None = None) -> Corpus:
    """Load (preparing on first use) the corpus named by ``uri``.

    Args:
        uri: See `sweep.data.uris` for the schemes.
        cache_dir: The study's output folder; prepared arrays go to ``cache_dir/corpora``.
        vocab_size: Vocabulary size to declare (ids are checked against it). Default: 256 for
            byte-level corpora, the task's ``vocab`` for synthetic ones, ``meta.json`` for
            ``tokens:``.

    Returns:
        The prepared `Corpus`, splits memory-mapped.

    Raises:
        DataError: Unknown scheme, missing path, empty corpus, token id beyond the vocab, bad
            parameter, a ``meta.pkl`` that is not plain data; the message names ``uri``.
    """
    parsed = parse_uri(uri, vocab_size)
    return _prepare(uri, Path(cache_dir), source(uri, parsed, vocab_size))


def inspect_corpus(uri: str, *, vocab_size: int | None = None, cache_dir: Path | str | None = None,
                   max_read_bytes: int | None = INSPECT_MAX_BYTES) -> Corpus | None:
    """The corpus named by ``uri`` with its summary, read but never written anywhere.

    For ``sweep validate``: the prepared copy under ``cache_dir/corpora`` when one exists
    (only read), else the splits made in memory exactly as `load_corpus` would make them. A
    ``text:`` folder whose candidate files (after the globs, before the text check) hold more
    than ``max_read_bytes`` is not read at all (None is returned), so validating a spec stays
    fast whatever the corpus: ``sweep run`` reads and splits such a corpus once, when it
    prepares it. Reading costs about what preparing does minus the writes: for ``text:``,
    reading the files, and finding near-duplicates when the split is not cached.

    Returns:
        The `Corpus` (splits as memory maps or in-memory arrays), or None for a ``text:``
        corpus over ``max_read_bytes``.

    Raises:
        DataError: As `load_corpus`.
    """
    parsed = parse_uri(uri, vocab_size)
    if isinstance(parsed, TextUri) and max_read_bytes is not None and parsed.path.is_dir():
        files, _ = text.list_files(parsed.path, parsed.query)
        if sum(p.stat().st_size for _, p in files) > max_read_bytes:
            return None
    src = source(uri, parsed, vocab_size)
    if cache_dir is not None and (Path(cache_dir) / "corpora" / src.digest / "meta.json").is_file():
        return _prepare(uri, Path(cache_dir), src)
    if src.vocab < 1:
        raise DataError(f"corpus {uri!r}: vocab_size={src.vocab} must be positive")
    return _corpus(uri, src, *_splits(uri, src))
