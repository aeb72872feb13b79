"""Training corpora: named by URI, prepared once per study, read through memory maps.

URIs:

- ``builtin:python-stdlib[?max_bytes=N]``: the running interpreter's standard-library ``.py``
  sources (no ``test``/``tests``/``idle_test`` folders, no ``site-packages``), files in a fixed
  order given by a hash of their relative path, byte-level (vocab 256), capped at ``max_bytes``
  (default 4,000,000 bytes, which keeps preparation well under a second). Real text present on
  every machine; its content (and so its hash) follows the Python version.
- ``text:PATH[?include=GLOB&exclude=GLOB&val=GLOB]``: a text file, or the text files under a
  folder (recursive, sorted; binary files skipped and counted), byte-level, split into train and
  val by whole documents with near-duplicates kept on one side; see `sweep.data.text`.
- ``tokens:PATH[?vocab=V]``: a nanoGPT-style folder with ``train.bin`` and ``val.bin``
  (``uint16`` ids). The vocab size comes from ``vocab=``, the ``vocab_size`` argument, or
  ``meta.json`` / ``meta.pkl`` (nanoGPT's format: a pickled dict with ``vocab_size``, ``itos``,
  ``stoi``). ``meta.pkl`` is read by a restricted unpickler that builds only plain data (dicts,
  lists, tuples, strings, bytes, numbers, booleans, None) and refuses any pickle that names a
  Python class or function, so a folder's pickle never runs code; such a file is refused with a
  `DataError` naming it (write ``meta.json`` with ``vocab_size`` instead).
- ``synthetic:markov?order=K&vocab=V&alpha=A&seed=S&tokens=N``,
  ``synthetic:copy?vocab=V&length=L&seed=S&tokens=N`` and
  ``synthetic:associative-recall?vocab=V&pairs=P&seed=S&tokens=N``: sources whose entropy rate
  (the lowest achievable loss) is known exactly; see `sweep.data.synthetic`.
- ``synthetic:reverse?vocab=V&length=L&seed=S&tokens=N``: a sequence-to-sequence task of
  examples [source of L, separator, source reversed] (`sweep.data.synthetic.reverse_stream`),
  whose target part has optimal loss 0. Its corpus has ``examples``: every window starts at an
  example, so a model must have ``seq_len = 2L`` (and an encoder-decoder one ``src_len = L``);
  the validation split is whole examples.

Preparation writes ``<cache_dir>/corpora/<content_hash>/{train,val}.bin`` and ``meta.json``
into a temporary folder and renames it into place, so parallel workers never see half-written
files and a second trial or worker reuses the result. The hash covers the prepared content (for
``tokens:`` the files' paths, sizes and modification times, so large corpora are not re-read),
so a changed corpus is prepared again; for ``text:`` it covers every document's path and
bytes, the URI's globs and ``VAL_FRACTION``, which decide the split, so a changed split is a new
corpus too. The last ``VAL_FRACTION`` of a builtin or synthetic stream is the validation split;
``text:`` folders hold out whole documents (`sweep.data.text.split_documents`); ``tokens:``
corpora keep their own ``val.bin``. Each prepared corpus's ``meta.json`` keeps its summary
(`Corpus.summary`: documents, binary files skipped, the split), which `Corpus.describe` prints.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import math
import os
import pickle
import shutil
import sysconfig
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np

from sweep.data import synthetic, text
from sweep.schema import METRIC_BASELINE

__all__ = ["DEFAULT_CORPUS", "INSPECT_MAX_BYTES", "SCHEMES", "VAL_FRACTION", "Corpus",
           "DataError", "check_corpus", "inspect_corpus", "load_corpus"]

log = logging.getLogger(__name__)

#: URI schemes of corpora, in the order the docs list them.
SCHEMES = ("builtin", "text", "tokens", "synthetic")
DEFAULT_CORPUS = "builtin:python-stdlib"
VAL_FRACTION = 0.1
STDLIB_MAX_BYTES = 4_000_000
#: `inspect_corpus` (``sweep validate``) reads at most this many bytes of a ``text:`` corpus
#: that has not been prepared yet.
INSPECT_MAX_BYTES = 64 * 2**20
_PREP_VERSION = "1"  # bump when preparation changes, so old caches are not reused
_SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


class DataError(Exception):
    """A corpus cannot be used; the message names its URI and what is wrong."""


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
    summary: dict = field(default_factory=dict)
    examples: dict | None = None

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
               "documents": f"whole documents by a hash of their path ({VAL_FRACTION:.0%} of "
                            "documents)",
               "val-glob": "whole documents matching val="}.get(s.get("split", "tail"), "")
        split = f"split: train {n_train:,}, val {n_val:,} {unit} ({share:.1%}), {how}"
        if "val_documents" in s and s.get("split") != "tail":
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


# ----------------------------------------------------------------------------- sources
def _parse_params(uri: str, query: str, allowed: dict[str, type]) -> dict:
    out = {}
    for key, raw in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
        if key not in allowed:
            raise DataError(
                f"corpus {uri!r}: unknown parameter {key!r}; known: {', '.join(sorted(allowed))}"
            )
        try:
            out[key] = allowed[key](raw)
        except ValueError:
            raise DataError(
                f"corpus {uri!r}: {key}={raw!r} is not a valid {allowed[key].__name__}"
            ) from None
    return out


def _stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        files.extend(Path(dirpath) / f for f in sorted(filenames) if f.endswith(".py"))
    # A fixed pseudo-random order (hash of the relative path) rather than alphabetical, so the
    # size cap and the tail validation split both sample the whole library, not a few packages.
    return sorted(files, key=lambda p: _hash(p.relative_to(root).as_posix().encode()))


def _read_stdlib(uri: str, max_bytes: int) -> bytes:
    parts, size = [], 0
    for path in _stdlib_files():
        blob = path.read_bytes()
        parts.append(blob)
        size += len(blob)
        if size >= max_bytes:
            break
    return b"".join(parts)[:max_bytes]


@dataclass(frozen=True)
class _Source:
    """A corpus ready to prepare: its cache key and how to make its splits.

    ``make`` returns ``(train, val, entropy_rate, summary)``; ``val`` None means the last
    `VAL_FRACTION` of ``train`` (one stream). ``in_place`` splits are memory maps of the user's
    own files, never copied.
    """

    digest: str
    vocab: int
    byte_level: bool
    make: Callable[[], tuple]
    in_place: bool = False


def _bytes_source(uri: str, raw: bytes, vocab_size: int | None) -> _Source:
    if not raw:
        raise DataError(f"corpus {uri!r} is empty")
    vocab = 256 if vocab_size is None else vocab_size
    digest = _hash(b"bytes", raw, str(vocab).encode())

    def make():
        return _as_tokens(raw), None, None, {"split": "tail"}

    return _Source(digest, vocab, True, make)


def _as_tokens(raw: bytes) -> np.ndarray:
    return np.frombuffer(raw, dtype=np.uint8).astype(np.uint16)


def _text_source(uri: str, path: Path, query: text.TextQuery, vocab_size: int | None) -> _Source:
    """A ``text:`` corpus: its documents read, the key covering everything the split uses."""
    try:
        docs = text.read_documents(path, query)
    except ValueError as exc:
        raise DataError(f"corpus {uri!r}: {exc}") from None
    if docs.n_bytes == 0:
        raise DataError(f"corpus {uri!r} is empty")
    vocab = 256 if vocab_size is None else vocab_size
    key = json.dumps({"include": query.include, "exclude": query.exclude, "val": query.val,
                      "val_fraction": VAL_FRACTION, "vocab": vocab, "file": path.is_file()})
    # Keyed apart from the b"bytes" key text corpora had before their split held out whole
    # documents, so no earlier tail-split copy is reused; builtin, synthetic and tokens corpora
    # keep their keys (and the checkpoints and trunks keyed on them stay valid).
    parts = [b"text", key.encode()]
    for name, blob in zip(docs.names, docs.texts, strict=True):
        parts += [name.encode("utf-8", "surrogateescape"), blob]
    digest = _hash(*parts)

    def make():
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

    return _Source(digest, vocab, True, make)


_SYNTHETIC_COMMON = {"vocab": int, "seed": int, "tokens": int}
_SYNTHETIC_KINDS = {
    "markov": {**_SYNTHETIC_COMMON, "order": int, "alpha": float},
    "copy": {**_SYNTHETIC_COMMON, "length": int},
    "associative-recall": {**_SYNTHETIC_COMMON, "pairs": int},
    "reverse": {**_SYNTHETIC_COMMON, "length": int},
}


def _synthetic_params(uri: str, rest: str) -> tuple[str, dict]:
    """The task and its parameters (defaults filled in), each checked against its range."""
    task, _, query = rest.partition("?")
    if task not in _SYNTHETIC_KINDS:
        raise DataError(f"corpus {uri!r}: unknown synthetic task {task!r}; known: "
                        f"{', '.join(_SYNTHETIC_KINDS)}")
    p = {"vocab": 16, "seed": 0, "tokens": 1_000_000, "order": 1, "alpha": 0.5, "length": 16,
         "pairs": 8, **_parse_params(uri, query, _SYNTHETIC_KINDS[task])}
    vocab, n = p["vocab"], p["tokens"]
    if not 2 <= vocab <= 65536:
        raise DataError(f"corpus {uri!r}: vocab={vocab} must be in [2, 65536]")
    if n <= 0:
        raise DataError(f"corpus {uri!r} is empty (tokens={n})")
    if task == "markov":
        if p["order"] < 1 or vocab ** p["order"] > 2**20:
            raise DataError(f"corpus {uri!r}: order={p['order']} must be >= 1 with "
                            f"vocab**order <= 2**20")
        if not 0 < p["alpha"] < math.inf:
            raise DataError(f"corpus {uri!r}: alpha={p['alpha']} must be a finite number > 0")
    elif task == "copy":
        if vocab < 3 or p["length"] < 1:
            raise DataError(f"corpus {uri!r}: copy needs vocab >= 3 and length >= 1")
    elif task == "reverse":
        if vocab < 3 or p["length"] < 1:
            raise DataError(f"corpus {uri!r}: reverse needs vocab >= 3 and length >= 1")
        if p["tokens"] < 2 * (2 * p["length"] + 1):
            raise DataError(f"corpus {uri!r}: tokens={p['tokens']} must hold at least two "
                            f"examples of 2 * length + 1 = {2 * p['length'] + 1} tokens")
    elif not 1 <= p["pairs"] <= vocab // 2 or vocab < 4:
        raise DataError(f"corpus {uri!r}: associative-recall needs vocab >= 4 and "
                        f"1 <= pairs <= vocab // 2")
    return task, p


def _synthetic(uri: str, task: str, p: dict, vocab_size: int | None) -> _Source:
    vocab, n = p["vocab"], p["tokens"]
    if task == "markov":
        def stream():
            return synthetic.markov_stream(n, vocab, p["order"], p["alpha"], p["seed"])
    elif task == "copy":
        def stream():
            return synthetic.copy_stream(n, vocab, p["length"], p["seed"])
    elif task == "reverse":
        length = 2 * p["length"] + 1

        def make():
            tokens, entropy_rate = synthetic.reverse_stream(n, vocab, p["length"], p["seed"])
            n_val = max(1, int(len(tokens) // length * VAL_FRACTION)) * length
            return tokens[:-n_val], tokens[-n_val:], entropy_rate, {
                "split": "examples", "examples": {"length": length, "src_len": p["length"],
                                                  "target_loss": 0.0}}
    else:
        def stream():
            return synthetic.associative_recall_stream(n, vocab, p["pairs"], p["seed"])

    if task != "reverse":
        def make():
            tokens, entropy_rate = stream()
            return tokens, None, entropy_rate, {"split": "tail"}

    key = json.dumps({"task": task, **{k: p[k] for k in sorted(_SYNTHETIC_KINDS[task])}},
                     sort_keys=True)
    model_vocab = vocab if vocab_size is None else vocab_size
    digest = _hash(b"synthetic", key.encode(), str(model_vocab).encode())
    return _Source(digest, model_vocab, False, make)


def _token_files(uri: str, rest: str, vocab_size: int | None) -> tuple[dict[str, Path], int]:
    """The folder's ``train.bin`` and ``val.bin``, checked, and the vocab size."""
    raw_path, _, query = rest.partition("?")
    folder = Path(raw_path).expanduser()
    if not folder.is_dir():
        raise DataError(f"corpus {uri!r}: folder {str(folder)!r} does not exist")
    files = {name: folder / f"{name}.bin" for name in ("train", "val")}
    for path in files.values():
        if not path.is_file():
            raise DataError(f"corpus {uri!r}: {str(path)!r} does not exist")
        if path.stat().st_size < 2:
            raise DataError(f"corpus {uri!r}: {str(path)!r} is empty")
        if path.stat().st_size % 2:
            raise DataError(f"corpus {uri!r}: {str(path)!r} has {path.stat().st_size} bytes, "
                            "not a whole number of uint16 token ids")
    vocab = _parse_params(uri, query, {"vocab": int}).get("vocab", vocab_size)
    if vocab is None:
        vocab = _vocab_from_meta(uri, folder)
    return files, vocab


def _tokens(uri: str, files: dict[str, Path], vocab: int) -> _Source:
    stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files.values()]
    digest = _hash(b"tokens", json.dumps(stats).encode(), str(vocab).encode())

    def make():
        train = np.memmap(files["train"], dtype=np.uint16, mode="r")
        val = np.memmap(files["val"], dtype=np.uint16, mode="r")
        return train, val, None, {"split": "files"}

    return _Source(digest, vocab, False, make, in_place=True)


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only and imports nothing.

    Dicts, lists, tuples, strings, bytes, numbers, booleans and None need no import. Every other
    object of a pickle (a class, a function, anything with ``__reduce__``) is reached through
    `find_class`, which refuses it; persistent ids are refused by the base class.
    """

    def find_class(self, module: str, name: str):  # noqa: D102
        raise pickle.UnpicklingError(
            f"it refers to the Python object {module}.{name}; only plain data (dicts, lists, "
            "strings, numbers) is read from a meta.pkl, never code")


def _read_plain_pickle(path: Path) -> object:
    """Unpickle ``path`` allowing only plain data; no class or function is ever imported.

    Raises:
        pickle.UnpicklingError: The pickle names a class or function (the message says which),
            or is malformed.
        EOFError: The file ends early.
        OSError: It cannot be read.
    """
    with open(path, "rb") as f:
        return _PlainUnpickler(f).load()


def _vocab_from_meta(uri: str, folder: Path) -> int:
    json_path, pkl_path = folder / "meta.json", folder / "meta.pkl"
    if json_path.is_file():
        meta_path = json_path
    elif pkl_path.is_file():
        meta_path = pkl_path
    else:
        raise DataError(f"corpus {uri!r}: no vocab size: add meta.json with vocab_size, "
                        f"or give it as {uri.split('?')[0]}?vocab=V")
    try:
        if meta_path is json_path:
            meta = json.loads(json_path.read_text())
        else:  # nanoGPT's format
            meta = _read_plain_pickle(pkl_path)
    except (ValueError, OSError, pickle.UnpicklingError, EOFError) as exc:
        raise DataError(f"corpus {uri!r}: cannot read the meta file {str(meta_path)!r}: "
                        f"{exc}") from None
    value = meta.get("vocab_size") if isinstance(meta, dict) else None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise DataError(f"corpus {uri!r}: {str(meta_path)!r} needs vocab_size as a positive "
                        f"integer, got {value!r}")
    return value


# ------------------------------------------------------------------------- preparation
def _hash(*parts: bytes) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(_PREP_VERSION.encode())
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _check_ids(uri: str, name: str, tokens: np.ndarray, vocab: int) -> None:
    top = int(tokens.max()) if len(tokens) else -1
    if top >= vocab:
        raise DataError(f"corpus {uri!r}: {name} split has token id {top}, beyond "
                        f"vocab_size={vocab}")


def _splits(uri: str, src: _Source) -> tuple[np.ndarray, np.ndarray, dict]:
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


def _corpus(uri: str, src: _Source, train, val, meta: dict) -> Corpus:
    summary = meta.get("summary", {})
    return Corpus(uri=uri, vocab_size=src.vocab, byte_level=src.byte_level, train=train,
                  val=val, baseline_unigram_loss=meta[METRIC_BASELINE],
                  entropy_rate=meta["entropy_rate"], content_hash=src.digest,
                  summary=summary, examples=summary.get("examples"))


def _prepare(uri: str, cache_dir: Path, src: _Source) -> Corpus:
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
    if src.in_place:
        train, val = src.make()[:2]
    else:
        train, val = (np.memmap(final / f"{n}.bin", dtype=np.uint16, mode="r")
                      for n in ("train", "val"))
    return _corpus(uri, src, train, val, meta)


def _resolve(uri: str, vocab_size: int | None) -> tuple[str, object]:
    """The scheme of ``uri`` and what its source needs, checked without reading the corpus."""
    scheme, sep, rest = uri.partition(":")
    if not sep:
        raise DataError(f"corpus {uri!r}: expected scheme:..., one of "
                        f"{', '.join(s + ':' for s in SCHEMES)}")
    if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size < 1):
        raise DataError(f"corpus {uri!r}: vocab_size={vocab_size!r} must be a positive integer")
    if scheme == "builtin":
        name, _, query = rest.partition("?")
        if name != "python-stdlib":
            raise DataError(f"corpus {uri!r}: unknown builtin corpus {name!r}; known: "
                            f"python-stdlib")
        cap = _parse_params(uri, query, {"max_bytes": int}).get("max_bytes", STDLIB_MAX_BYTES)
        if cap <= 0:
            raise DataError(f"corpus {uri!r}: max_bytes={cap} must be positive")
        return scheme, cap
    if scheme == "text":
        raw_path, _, query = rest.partition("?")
        if not raw_path.strip():
            raise DataError(f"corpus {uri!r}: text: needs a file or folder path")
        try:
            globs = text.parse_query(query)
        except ValueError as exc:
            raise DataError(f"corpus {uri!r}: {exc}") from None
        path = Path(raw_path).expanduser()
        if not path.exists():
            raise DataError(f"corpus {uri!r}: path {str(path)!r} does not exist")
        if globs and not path.is_dir():
            raise DataError(f"corpus {uri!r}: include, exclude and val apply to a folder; "
                            f"{str(path)!r} is a file")
        return scheme, (path, globs)
    if scheme == "tokens":
        return scheme, _token_files(uri, rest, vocab_size)
    if scheme == "synthetic":
        return scheme, _synthetic_params(uri, rest)
    raise DataError(f"corpus {uri!r}: unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")


def check_corpus(uri: str, *, vocab_size: int | None = None) -> None:
    """Check ``uri`` as far as it can be without reading or preparing the corpus.

    The scheme, its parameters and their ranges, that a ``text:`` path and a ``tokens:`` folder
    with ``train.bin`` and ``val.bin`` exist (and the folder's vocab size, from ``vocab=``,
    ``vocab_size`` or its meta file). Takes milliseconds; what needs the content (an empty
    text corpus, token ids beyond the vocab, a split too short) is found by `load_corpus`.

    Raises:
        DataError: As `load_corpus`, naming ``uri``.
    """
    _resolve(uri, vocab_size)


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


def load_corpus(uri: str, cache_dir: Path | str, *, vocab_size: int | None = None) -> Corpus:
    """Load (preparing on first use) the corpus named by ``uri``.

    Args:
        uri: See the module docstring for the schemes.
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
    scheme, resolved = _resolve(uri, vocab_size)
    return _prepare(uri, Path(cache_dir), _source(uri, scheme, resolved, vocab_size))


def _source(uri: str, scheme: str, resolved, vocab_size: int | None) -> _Source:
    if scheme == "builtin":
        return _bytes_source(uri, _read_stdlib(uri, resolved), vocab_size)
    if scheme == "text":
        return _text_source(uri, *resolved, vocab_size)
    if scheme == "tokens":
        return _tokens(uri, *resolved)
    return _synthetic(uri, *resolved, vocab_size)


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
    scheme, resolved = _resolve(uri, vocab_size)
    if scheme == "text" and max_read_bytes is not None and resolved[0].is_dir():
        files, _ = text.list_files(*resolved)
        if sum(p.stat().st_size for _, p in files) > max_read_bytes:
            return None
    src = _source(uri, scheme, resolved, vocab_size)
    if cache_dir is not None and (Path(cache_dir) / "corpora" / src.digest / "meta.json").is_file():
        return _prepare(uri, Path(cache_dir), src)
    if src.vocab < 1:
        raise DataError(f"corpus {uri!r}: vocab_size={src.vocab} must be positive")
    return _corpus(uri, src, *_splits(uri, src))
