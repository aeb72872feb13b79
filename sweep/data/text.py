"""``text:`` corpora: which files of a folder are documents, and which documents are held out.

``text:PATH[?include=GLOB&exclude=GLOB&val=GLOB]``, each parameter repeatable.

Documents. Every file under the folder ``PATH``, recursively, in sorted order of its path
relative to ``PATH``; files and folders whose name starts with ``.`` and ``__pycache__``
folders are never read. With ``include``, a file must match one of its globs; with ``exclude``,
none of those (such files are counted as excluded). A glob without ``/`` is matched against the
file's name (``*.txt``, ``README*``), one with ``/`` against its relative path (``drafts/*``,
where ``*`` also crosses ``/``), both with `fnmatch.fnmatchcase`. Then a file is read only if it
is text, decided by its first `PREFIX_BYTES` bytes: one with a NUL byte is binary; otherwise one
that decodes as UTF-8 (a character cut at the end of the prefix allowed) is text, and one that
does not is text only when its suffix is in `TEXT_EXTENSIONS` (a ``.txt`` in Latin-1, say).
Binary files are skipped and counted. ``text:FILE`` is one document, refused if it is binary.

Validation split (`split_documents`). Whole documents are held out, never a part of one, so a
document's text is on one side only:

- By default each document goes to val when a stable hash of its path relative to ``PATH``
  falls in the first `VAL_FRACTION` of the hash range (BLAKE2b, 64 bits: the same side on every
  machine and whatever else the folder holds), so about that fraction of the documents (not of
  the bytes) is val. Near-duplicate documents (`sweep.data.near_duplicates`: estimated
  resemblance >= 0.4 of their sampled 8-byte shingles, after reducing them to a spelling
  skeleton, e.g. a play's modern and First Folio editions) are grouped first, transitively,
  and a group goes where the hash of its first path (in sorted order) sends it, so no
  near-duplicate pair straddles the split (above `sweep.data.near_duplicates.MAX_GROUPED_BYTES`
  of text only identical documents are grouped, with a logged warning). If no document hashes
  to val (a small folder), the group with the smallest hash is val; if all
  do, the one with the largest is train.
- With ``val=GLOB``, exactly the documents matching a ``val`` glob are val, the user's choice,
  unchanged by grouping; near-duplicate pairs across that split are reported as a warning
  (`DocumentSplit.warnings`), since they leak val text into training.
- One document, or documents that are all near-duplicates of one another, cannot be split by
  document: the last `VAL_FRACTION` of their concatenation is val (with a warning when there
  is more than one document).
"""

from __future__ import annotations

import codecs
import hashlib
import os
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import Path
from urllib.parse import parse_qsl

__all__ = ["PREFIX_BYTES", "TEXT_EXTENSIONS", "Documents", "DocumentSplit", "TextQuery",
           "is_text", "parse_query", "read_documents", "split_documents", "val_hash"]

PREFIX_BYTES = 8192
#: Suffixes read as text even when their prefix is not UTF-8 (legacy 8-bit encodings).
TEXT_EXTENSIONS = frozenset(
    ".txt .text .md .markdown .rst .adoc .tex .bib .org .csv .tsv .json .jsonl .yaml .yml .toml "
    ".ini .cfg .conf .xml .html .htm .css .svg .py .pyi .c .h .cc .cpp .hpp .java .js .ts .go "
    ".rs .rb .pl .sh .sql .r .m .lua .hs .ml .el .lisp .scm .f .f90 .srt .vtt .po .log".split())
_SKIP_DIRS = frozenset({"__pycache__"})
_MAX_LISTED_GROUPS = 3


@dataclass(frozen=True)
class TextQuery:
    """The parameters of a ``text:`` URI: glob lists (see the module docstring)."""

    include: tuple[str, ...] = ()
    exclude: tuple[str, ...] = ()
    val: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.include or self.exclude or self.val)


def parse_query(query: str) -> TextQuery:
    """The ``include``, ``exclude`` and ``val`` globs of a URI's query string.

    Raises:
        ValueError: An unknown parameter or an empty glob, named.
    """
    found: dict[str, list[str]] = {"include": [], "exclude": [], "val": []}
    for key, value in parse_qsl(query, keep_blank_values=True):
        if key not in found:
            raise ValueError(f"unknown parameter {key!r}; known: exclude, include, val")
        if not value:
            raise ValueError(f"{key}= needs a glob")
        found[key].append(value)
    return TextQuery(**{k: tuple(v) for k, v in found.items()})


def _matches(relpath: str, globs: tuple[str, ...]) -> bool:
    name = relpath.rsplit("/", 1)[-1]
    return any(fnmatchcase(relpath if "/" in g else name, g) for g in globs)


def is_text(prefix: bytes, suffix: str) -> bool:
    """Whether a file whose first bytes are ``prefix`` is text (see the module docstring)."""
    if b"\0" in prefix:
        return False
    try:
        codecs.getincrementaldecoder("utf-8")().decode(prefix, final=False)
        return True
    except UnicodeDecodeError:
        return suffix.lower() in TEXT_EXTENSIONS


@dataclass(frozen=True)
class Documents:
    """The documents of a ``text:`` corpus.

    Attributes:
        names: Paths relative to the corpus root (POSIX), sorted; the file's name for
            ``text:FILE``.
        texts: Their bytes, in the same order.
        n_binary: Files skipped as binary.
        n_excluded: Files left out by ``include`` or ``exclude``.
    """

    names: list[str]
    texts: list[bytes]
    n_binary: int = 0
    n_excluded: int = 0

    @property
    def n_bytes(self) -> int:
        return sum(len(t) for t in self.texts)


def list_files(root: Path, query: TextQuery) -> tuple[list[tuple[str, Path]], int]:
    """The candidate files under the folder ``root``: ``([(relpath, path), ...], n_excluded)``.

    Sorted by relative path; hidden files and folders and ``__pycache__`` are left out
    uncounted, files the globs leave out are counted.
    """
    files, n_excluded = [], 0
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS and not d.startswith("."))
        for name in filenames:
            path = Path(dirpath) / name
            if name.startswith(".") or not path.is_file():
                continue
            rel = path.relative_to(root).as_posix()
            if (query.include and not _matches(rel, query.include)) or \
                    (query.exclude and _matches(rel, query.exclude)):
                n_excluded += 1
                continue
            files.append((rel, path))
    return sorted(files), n_excluded


def read_documents(path: Path, query: TextQuery) -> Documents:
    """Read the text documents of ``text:path`` (a file or folder), skipping binary files.

    Raises:
        ValueError: ``path`` is a binary file, globs were given for a file, a ``val`` glob
            matches no document, no text document is left, or a file cannot be read (its
            path and the reason); the message says which.
    """
    if path.is_file():
        if query:
            raise ValueError("include, exclude and val apply to a folder, not a single file")
        blob = _read(path) or b""
        if not is_text(blob[:PREFIX_BYTES], path.suffix):
            raise ValueError(f"{str(path)!r} is not a text file (a NUL byte, or not UTF-8, in "
                             f"its first {PREFIX_BYTES} bytes)")
        return Documents([path.name], [blob])
    files, n_excluded = list_files(path, query)
    names, texts, n_binary = [], [], 0
    for rel, file in files:
        doc = _read(file, text_only=True)
        if doc is None:
            n_binary += 1
            continue
        texts.append(doc)
        names.append(rel)
    if not names:
        raise ValueError(f"no text documents under {str(path)!r} ({len(files)} files read, "
                         f"{n_binary} binary, {n_excluded} excluded by include/exclude)")
    if query.val and not any(_matches(n, query.val) for n in names):
        raise ValueError(f"val={', '.join(query.val)} matches none of the {len(names)} "
                         "documents")
    return Documents(names, texts, n_binary, n_excluded)


def _read(file: Path, text_only: bool = False) -> bytes | None:
    """The bytes of ``file``.

    With ``text_only``, None for a binary file, read no further than its first `PREFIX_BYTES`.

    Raises:
        ValueError: ``cannot read 'FILE': REASON`` (permission, an I/O error, a folder...).
    """
    try:
        with open(file, "rb") as f:
            prefix = f.read(PREFIX_BYTES)
            if text_only and not is_text(prefix, file.suffix):
                return None
            return prefix + f.read()
    except OSError as exc:
        raise ValueError(f"cannot read {str(file)!r}: {exc.strerror or exc}") from None


def val_hash(key: str) -> float:
    """Where ``key`` falls in ``[0, 1)``: the first 64 bits of its BLAKE2b digest over 2**64."""
    digest = hashlib.blake2b(key.encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


@dataclass(frozen=True)
class DocumentSplit:
    """Which documents are train and which val.

    Attributes:
        method: ``"documents"`` (hash of the path, near-duplicates grouped), ``"val-glob"``
            (``val=``) or ``"tail"`` (the last fraction of one document's or group's bytes).
        train: Indices of the train documents, in order (all of them for ``"tail"``).
        val: Indices of the val documents (none for ``"tail"``).
        n_groups: Groups of two or more near-duplicate documents found.
        n_grouped: Documents in those groups.
        warnings: Near-duplicates across the split, or why it is a tail split.
    """

    method: str
    train: list[int]
    val: list[int]
    n_groups: int = 0
    n_grouped: int = 0
    warnings: list[str] = field(default_factory=list)


def split_documents(docs: Documents, fraction: float, val_globs: tuple[str, ...] = ()
                    ) -> DocumentSplit:
    """Split ``docs`` into train and val documents (see the module docstring).

    Args:
        docs: From `read_documents`.
        fraction: The share of documents (by count) the path hash sends to val.
        val_globs: ``val=`` globs; when given, exactly the matching documents are val.

    Raises:
        ValueError: ``val_globs`` match every document (no train split is left).
    """
    from sweep.data import near_duplicates  # numpy, only once documents are read

    n = len(docs.names)
    groups = near_duplicates.find_near_duplicates(docs.texts).groups()
    grouped = [g for g in groups if len(g) > 1]
    n_groups, n_grouped = len(grouped), sum(len(g) for g in grouped)
    if val_globs:
        val = [i for i in range(n) if _matches(docs.names[i], val_globs)]
        if len(val) == n:
            raise ValueError(f"val={', '.join(val_globs)} matches all {n} documents; no train "
                             "split is left")
        val_set = set(val)
        train = [i for i in range(n) if i not in val_set]
        across = [g for g in grouped if 0 < len(val_set.intersection(g)) < len(g)]
        warnings = [_across_warning(docs, across, val_set)] if across else []
        return DocumentSplit("val-glob", train, val, n_groups, n_grouped, warnings)
    if len(groups) < 2:
        warnings = [f"all {n} documents are near-duplicates of one another, so the val split "
                    f"is the last {fraction:.0%} of their bytes and shares text with train"
                    ] if n > 1 else []
        return DocumentSplit("tail", list(range(n)), [], n_groups, n_grouped, warnings)
    keys = [val_hash(docs.names[g[0]]) for g in groups]
    is_val = [k < fraction for k in keys]
    if not any(is_val):
        is_val[keys.index(min(keys))] = True
    elif all(is_val):
        is_val[keys.index(max(keys))] = False
    val = sorted(i for g, v in zip(groups, is_val, strict=True) if v for i in g)
    train = sorted(i for g, v in zip(groups, is_val, strict=True) if not v for i in g)
    return DocumentSplit("documents", train, val, n_groups, n_grouped)


def _across_warning(docs: Documents, across: list[list[int]], val: set[int]) -> str:
    def names(group: list[int], on_val: bool) -> str:
        return ", ".join(docs.names[i] for i in group if (i in val) == on_val)

    shown = "; ".join(f"{names(g, True)} (val) ~ {names(g, False)} (train)"
                      for g in across[:_MAX_LISTED_GROUPS])
    more = f"; and {len(across) - _MAX_LISTED_GROUPS} more groups" \
        if len(across) > _MAX_LISTED_GROUPS else ""
    return (f"{len(across)} group(s) of near-duplicate documents straddle the val= split, so "
            f"val text is also in train: {shown}{more}")
