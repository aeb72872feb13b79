"""Corpus URIs: each scheme's syntax, parsed and checked without reading the corpus.

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
  ``meta.json`` / ``meta.pkl`` (`sweep.data.token_meta`, which reads a pickle as plain data
  only and refuses one that names a Python class or function with a `DataError` naming it:
  write ``meta.json`` with ``vocab_size`` instead).
- ``synthetic:markov?order=K&vocab=V&alpha=A&seed=S&tokens=N``,
  ``synthetic:copy?vocab=V&length=L&seed=S&tokens=N`` and
  ``synthetic:associative-recall?vocab=V&pairs=P&seed=S&tokens=N``: sources whose entropy rate
  (the lowest achievable loss) is known exactly; see `sweep.data.synthetic`.
- ``synthetic:reverse?vocab=V&length=L&seed=S&tokens=N``: a sequence-to-sequence task of
  examples [source of L, separator, source reversed] (`sweep.data.synthetic.reverse_stream`),
  whose target part has optimal loss 0. Its corpus has ``examples``: every window starts at an
  example, so a model must have ``seq_len = 2L`` (and an encoder-decoder one ``src_len = L``);
  the validation split is whole examples.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from sweep.data.errors import DataError
from sweep.data.schemes import DEFAULT_CORPUS, SCHEMES

if TYPE_CHECKING:
    from sweep.data import text

__all__ = ["DEFAULT_CORPUS", "SCHEMES", "SYNTHETIC_TASKS", "BuiltinUri", "ParsedUri",
           "SyntheticUri", "TextUri", "TokensUri", "check_corpus", "declared_vocab", "parse_uri"]

STDLIB_MAX_BYTES = 4_000_000
_SYNTHETIC_COMMON = {"vocab": int, "seed": int, "tokens": int}
#: Each synthetic task's parameters and their types.
SYNTHETIC_TASKS: dict[str, dict[str, type]] = {
    "markov": {**_SYNTHETIC_COMMON, "order": int, "alpha": float},
    "copy": {**_SYNTHETIC_COMMON, "length": int},
    "associative-recall": {**_SYNTHETIC_COMMON, "pairs": int},
    "reverse": {**_SYNTHETIC_COMMON, "length": int},
}


@dataclass(frozen=True)
class BuiltinUri:
    """``builtin:python-stdlib``: at most ``max_bytes`` bytes of the standard library."""

    max_bytes: int


@dataclass(frozen=True)
class TextUri:
    """``text:``: the file or folder ``path`` (it exists) and the query's globs."""

    path: Path
    query: text.TextQuery


@dataclass(frozen=True)
class TokensUri:
    """``tokens:``: the folder's ``train.bin`` and ``val.bin`` (checked) and the vocab size."""

    files: dict[str, Path]
    vocab: int


@dataclass(frozen=True)
class SyntheticUri:
    """``synthetic:``: the task and its parameters, the defaults filled in, ranges checked.

    Only the parameters of ``task`` (`SYNTHETIC_TASKS`) mean anything; the others keep their
    defaults.
    """

    task: str
    vocab: int = 16
    seed: int = 0
    tokens: int = 1_000_000
    order: int = 1
    alpha: float = 0.5
    length: int = 16
    pairs: int = 8


ParsedUri = BuiltinUri | TextUri | TokensUri | SyntheticUri


def _parse_params(uri: str, query: str, allowed: dict[str, type]) -> dict[str, Any]:
    """The query's parameters, each converted by its type in ``allowed`` (int or float)."""
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


def _builtin(uri: str, rest: str) -> BuiltinUri:
    name, _, query = rest.partition("?")
    if name != "python-stdlib":
        raise DataError(f"corpus {uri!r}: unknown builtin corpus {name!r}; known: "
                        f"python-stdlib")
    cap = _parse_params(uri, query, {"max_bytes": int}).get("max_bytes", STDLIB_MAX_BYTES)
    if cap <= 0:
        raise DataError(f"corpus {uri!r}: max_bytes={cap} must be positive")
    return BuiltinUri(cap)


def _text(uri: str, rest: str) -> TextUri:
    raw_path, _, query = rest.partition("?")
    if not raw_path.strip():
        raise DataError(f"corpus {uri!r}: text: needs a file or folder path")
    from sweep.data import text  # imported for a text: corpus only

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
    return TextUri(path, globs)


def _tokens(uri: str, rest: str, vocab_size: int | None) -> TokensUri:
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
        from sweep.data.token_meta import vocab_from_meta  # pickle: only for a meta file

        vocab = vocab_from_meta(uri, folder)
    return TokensUri(files, vocab)


def _synthetic(uri: str, rest: str) -> SyntheticUri:
    """The task and its parameters (defaults filled in), each checked against its range."""
    task, _, query = rest.partition("?")
    if task not in SYNTHETIC_TASKS:
        raise DataError(f"corpus {uri!r}: unknown synthetic task {task!r}; known: "
                        f"{', '.join(SYNTHETIC_TASKS)}")
    p = SyntheticUri(task, **_parse_params(uri, query, SYNTHETIC_TASKS[task]))
    if not 2 <= p.vocab <= 65536:
        raise DataError(f"corpus {uri!r}: vocab={p.vocab} must be in [2, 65536]")
    if p.tokens <= 0:
        raise DataError(f"corpus {uri!r} is empty (tokens={p.tokens})")
    if task == "markov":
        if p.order < 1 or p.vocab ** p.order > 2**20:
            raise DataError(f"corpus {uri!r}: order={p.order} must be >= 1 with "
                            f"vocab**order <= 2**20")
        if not 0 < p.alpha < math.inf:
            raise DataError(f"corpus {uri!r}: alpha={p.alpha} must be a finite number > 0")
    elif task in ("copy", "reverse"):
        if p.vocab < 3 or p.length < 1:
            raise DataError(f"corpus {uri!r}: {task} needs vocab >= 3 and length >= 1")
        if task == "reverse" and p.tokens < 2 * (2 * p.length + 1):
            raise DataError(f"corpus {uri!r}: tokens={p.tokens} must hold at least two "
                            f"examples of 2 * length + 1 = {2 * p.length + 1} tokens")
    elif not 1 <= p.pairs <= p.vocab // 2 or p.vocab < 4:
        raise DataError(f"corpus {uri!r}: associative-recall needs vocab >= 4 and "
                        f"1 <= pairs <= vocab // 2")
    return p


def parse_uri(uri: str, vocab_size: int | None = None) -> ParsedUri:
    """What the source of ``uri`` needs, checked without reading the corpus.

    Args:
        uri: A corpus URI (see the module docstring).
        vocab_size: The vocab size to declare, if given (a ``tokens:`` folder needs one from
            here, its ``vocab=`` or its meta file).

    Raises:
        DataError: As `check_corpus`.
    """
    scheme, sep, rest = uri.partition(":")
    if not sep:
        raise DataError(f"corpus {uri!r}: expected scheme:..., one of "
                        f"{', '.join(s + ':' for s in SCHEMES)}")
    if vocab_size is not None and (not isinstance(vocab_size, int) or vocab_size < 1):
        raise DataError(f"corpus {uri!r}: vocab_size={vocab_size!r} must be a positive integer")
    if scheme == "builtin":
        return _builtin(uri, rest)
    if scheme == "text":
        return _text(uri, rest)
    if scheme == "tokens":
        return _tokens(uri, rest, vocab_size)
    if scheme == "synthetic":
        return _synthetic(uri, rest)
    raise DataError(f"corpus {uri!r}: unknown scheme {scheme!r}; known: {', '.join(SCHEMES)}")


def check_corpus(uri: str, *, vocab_size: int | None = None) -> int:
    """Check ``uri`` as far as it can be without reading or preparing the corpus.

    The scheme, its parameters and their ranges, that a ``text:`` path and a ``tokens:`` folder
    with ``train.bin`` and ``val.bin`` exist (and the folder's vocab size, from ``vocab=``,
    ``vocab_size`` or its meta file). Takes milliseconds; what needs the content (an empty
    text corpus, token ids beyond the vocab, a split too short) is found by `load_corpus`.

    Returns:
        The vocab size the corpus declares (`declared_vocab`): its token ids are below it.

    Raises:
        DataError: As `load_corpus`, naming ``uri``.
    """
    return declared_vocab(parse_uri(uri, vocab_size), vocab_size)


def declared_vocab(parsed: ParsedUri, vocab_size: int | None = None) -> int:
    """The vocab size of a parsed corpus URI, as `load_corpus` declares it, without reading.

    A ``tokens:`` folder's (``vocab=``, ``vocab_size`` or its meta file), else ``vocab_size``
    when given, else a synthetic task's ``vocab=``, else 256 (bytes: ``builtin:``, ``text:``);
    `sweep.data.sources` builds each source with the same rule.
    """
    if isinstance(parsed, TokensUri):
        return parsed.vocab
    if vocab_size is not None:
        return vocab_size
    return parsed.vocab if isinstance(parsed, SyntheticUri) else 256
