"""Training corpora: named by URI, prepared once per study, read through memory maps.

URIs:

- ``builtin:python-stdlib[?max_bytes=N]``: the running interpreter's standard-library ``.py``
  sources (no ``test``/``tests``/``idle_test`` folders, no ``site-packages``), files in a fixed
  order given by a hash of their relative path, byte-level (vocab 256), capped at ``max_bytes``
  (default 4,000,000 bytes, which keeps preparation well under a second). Real text present on
  every machine; its content (and so its hash) follows the Python version.
- ``text:PATH``: a text file, or every file under a directory (recursive, sorted), byte-level.
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

Preparation writes ``<cache_dir>/corpora/<content_hash>/{train,val}.bin`` and ``meta.json``
into a temporary folder and renames it into place, so parallel workers never see half-written
files and a second trial or worker reuses the result. The hash covers the prepared content (for
``tokens:`` the files' paths, sizes and modification times, so large corpora are not re-read),
so a changed corpus is prepared again. The last ``VAL_FRACTION`` of a byte or synthetic stream
is the validation split; ``tokens:`` corpora keep their own ``val.bin``.
"""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
import pickle
import shutil
import sysconfig
import tempfile
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qsl

import numpy as np

from sweep.data import synthetic
from sweep.schema import METRIC_BASELINE

__all__ = ["DEFAULT_CORPUS", "SCHEMES", "VAL_FRACTION", "Corpus", "DataError", "check_corpus",
           "load_corpus"]

#: URI schemes of corpora, in the order the docs list them.
SCHEMES = ("builtin", "text", "tokens", "synthetic")
DEFAULT_CORPUS = "builtin:python-stdlib"
VAL_FRACTION = 0.1
STDLIB_MAX_BYTES = 4_000_000
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
    """

    uri: str
    vocab_size: int
    byte_level: bool
    train: np.ndarray
    val: np.ndarray
    baseline_unigram_loss: float
    entropy_rate: float | None
    content_hash: str

    def require(self, seq_len: int) -> None:
        """Check both splits hold at least one window of ``seq_len + 1`` tokens.

        Raises:
            DataError: Naming the URI and the split that is too short.
        """
        for name, split in (("train", self.train), ("val", self.val)):
            if len(split) < seq_len + 1:
                raise DataError(
                    f"corpus {self.uri!r}: {name} split has {len(split)} tokens, fewer than "
                    f"one sequence of seq_len + 1 = {seq_len + 1}"
                )

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


def _read_text(path: Path) -> bytes:
    if path.is_file():
        return path.read_bytes()
    files = sorted(p for p in path.rglob("*") if p.is_file() and not p.name.startswith("."))
    return b"".join(p.read_bytes() for p in files)


def _bytes_source(uri: str, cache_dir: Path, raw: bytes, vocab_size: int | None) -> Corpus:
    if not raw:
        raise DataError(f"corpus {uri!r} is empty")
    tokens = np.frombuffer(raw, dtype=np.uint8).astype(np.uint16)
    vocab = 256 if vocab_size is None else vocab_size
    digest = _hash(b"bytes", raw, str(vocab).encode())
    return _prepare(uri, cache_dir, digest, lambda: (tokens, None), vocab, byte_level=True)


_SYNTHETIC_COMMON = {"vocab": int, "seed": int, "tokens": int}
_SYNTHETIC_KINDS = {
    "markov": {**_SYNTHETIC_COMMON, "order": int, "alpha": float},
    "copy": {**_SYNTHETIC_COMMON, "length": int},
    "associative-recall": {**_SYNTHETIC_COMMON, "pairs": int},
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
    elif not 1 <= p["pairs"] <= vocab // 2 or vocab < 4:
        raise DataError(f"corpus {uri!r}: associative-recall needs vocab >= 4 and "
                        f"1 <= pairs <= vocab // 2")
    return task, p


def _synthetic(uri: str, cache_dir: Path, task: str, p: dict,
               vocab_size: int | None) -> Corpus:
    vocab, n = p["vocab"], p["tokens"]
    if task == "markov":
        def make():
            return synthetic.markov_stream(n, vocab, p["order"], p["alpha"], p["seed"])
    elif task == "copy":
        def make():
            return synthetic.copy_stream(n, vocab, p["length"], p["seed"])
    else:
        def make():
            return synthetic.associative_recall_stream(n, vocab, p["pairs"], p["seed"])

    key = json.dumps({"task": task, **{k: p[k] for k in sorted(_SYNTHETIC_KINDS[task])}},
                     sort_keys=True)
    model_vocab = vocab if vocab_size is None else vocab_size
    digest = _hash(b"synthetic", key.encode(), str(model_vocab).encode())
    return _prepare(uri, cache_dir, digest, make, model_vocab, byte_level=False)


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


def _tokens(uri: str, cache_dir: Path, files: dict[str, Path], vocab: int) -> Corpus:
    stats = [(str(p.resolve()), p.stat().st_size, p.stat().st_mtime_ns) for p in files.values()]
    digest = _hash(b"tokens", json.dumps(stats).encode(), str(vocab).encode())
    train = np.memmap(files["train"], dtype=np.uint16, mode="r")
    val = np.memmap(files["val"], dtype=np.uint16, mode="r")
    return _prepare(uri, cache_dir, digest, None, vocab, byte_level=False, splits=(train, val))


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


def _prepare(uri, cache_dir, digest, make, vocab, *, byte_level, splits=None) -> Corpus:
    if vocab < 1:
        raise DataError(f"corpus {uri!r}: vocab_size={vocab} must be positive")
    final = Path(cache_dir) / "corpora" / digest
    if not (final / "meta.json").is_file():
        entropy_rate = None
        if splits is None:
            stream, entropy_rate = make()
            n_val = max(1, int(len(stream) * VAL_FRACTION))
            if len(stream) < 2:
                raise DataError(f"corpus {uri!r} has {len(stream)} token(s); too short to split")
            splits = (stream[:-n_val], stream[-n_val:])
        for name, split in zip(("train", "val"), splits, strict=True):
            _check_ids(uri, name, split, vocab)
        meta = {"uri": uri, "vocab_size": vocab, "byte_level": byte_level,
                "entropy_rate": entropy_rate,
                METRIC_BASELINE: unigram_entropy(splits[1], vocab),
                "n_train": len(splits[0]), "n_val": len(splits[1]), "in_place": make is None}
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{digest}-", dir=final.parent))
        try:
            if make is not None:
                for name, split in zip(("train", "val"), splits, strict=True):
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
    if splits is None or not meta["in_place"]:
        splits = tuple(np.memmap(final / f"{n}.bin", dtype=np.uint16, mode="r")
                       for n in ("train", "val"))
    return Corpus(uri=uri, vocab_size=vocab, byte_level=byte_level, train=splits[0],
                  val=splits[1], baseline_unigram_loss=meta[METRIC_BASELINE],
                  entropy_rate=meta["entropy_rate"], content_hash=digest)


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
        if not rest.strip():
            raise DataError(f"corpus {uri!r}: text: needs a file or folder path")
        path = Path(rest).expanduser()
        if not path.exists():
            raise DataError(f"corpus {uri!r}: path {str(path)!r} does not exist")
        return scheme, path
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
    cache_dir = Path(cache_dir)
    if scheme == "builtin":
        return _bytes_source(uri, cache_dir, _read_stdlib(uri, resolved), vocab_size)
    if scheme == "text":
        return _bytes_source(uri, cache_dir, _read_text(resolved), vocab_size)
    if scheme == "tokens":
        return _tokens(uri, cache_dir, *resolved)
    return _synthetic(uri, cache_dir, *resolved, vocab_size)
