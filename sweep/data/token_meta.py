"""The vocab size of a ``tokens:`` folder, from its ``meta.json`` or nanoGPT's ``meta.pkl``.

``meta.pkl`` (nanoGPT's format: a pickled dict with ``vocab_size``, ``itos``, ``stoi``) is read
by a restricted unpickler that builds only plain data (dicts, lists, tuples, strings, bytes,
numbers, booleans, None) and refuses any pickle that names a Python class or function, so a
folder's pickle never runs code.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import NoReturn

from sweep.data.errors import DataError

__all__ = ["vocab_from_meta"]


class _PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain data only and imports nothing.

    Dicts, lists, tuples, strings, bytes, numbers, booleans and None need no import. Every other
    object of a pickle (a class, a function, anything with ``__reduce__``) is reached through
    `find_class`, which refuses it; persistent ids are refused by the base class.
    """

    def find_class(self, module: str, name: str) -> NoReturn:  # noqa: D102
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


def vocab_from_meta(uri: str, folder: Path) -> int:
    """``vocab_size`` of ``folder/meta.json``, else of ``folder/meta.pkl``.

    Raises:
        DataError: Neither file exists, the file cannot be read (a ``meta.pkl`` that is not
            plain data among them), or its ``vocab_size`` is not a positive integer; the
            message names ``uri`` and the file.
    """
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
