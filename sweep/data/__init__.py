"""Training corpora: named by URI, prepared once per study, read through memory maps.

`load_corpus` (`sweep.data.cache`) turns a URI (``builtin:python-stdlib``, ``text:PATH``,
``tokens:PATH``, ``synthetic:markov?...``; `sweep.data.uris`) into a `Corpus`
(`sweep.data.corpus`), from the splits its source makes (`sweep.data.sources`);
`sweep.data.synthetic` generates the synthetic sources whose entropy rate is known exactly;
`sweep.data.text` decides which files of a ``text:`` folder are documents and which documents
are held out, keeping near-duplicates (`sweep.data.near_duplicates`) on one side.
`check_corpus` checks a URI's scheme, parameters and paths in milliseconds, without reading the
corpus; `inspect_corpus` reads it without writing.

The schemes' names (`sweep.data.schemes`) and `DataError` import alone, so a spec's fields are
checked without the URI parsers; `check_corpus` and the names backed by numpy (`Corpus`,
`load_corpus`, ...) are imported on first use (PEP 562), as `sweep.train` does for torch. The
URI checks import without numpy, so a spec is read and refused without it.
"""

from typing import TYPE_CHECKING

from sweep.data.errors import DataError
from sweep.data.schemes import DEFAULT_CORPUS, SCHEMES
from sweep.lazy import lazy_getattr

if TYPE_CHECKING:
    from sweep.data.cache import INSPECT_MAX_BYTES, inspect_corpus, load_corpus
    from sweep.data.corpus import VAL_FRACTION, Corpus, unigram_entropy
    from sweep.data.uris import check_corpus

_LAZY = {
    "check_corpus": "sweep.data.uris",
    "INSPECT_MAX_BYTES": "sweep.data.cache",
    "inspect_corpus": "sweep.data.cache",
    "load_corpus": "sweep.data.cache",
    "VAL_FRACTION": "sweep.data.corpus",
    "Corpus": "sweep.data.corpus",
    "unigram_entropy": "sweep.data.corpus",
}

__all__ = [
    "DEFAULT_CORPUS",
    "INSPECT_MAX_BYTES",
    "SCHEMES",
    "VAL_FRACTION",
    "Corpus",
    "DataError",
    "check_corpus",
    "inspect_corpus",
    "load_corpus",
    "unigram_entropy",
]

__getattr__ = lazy_getattr(__name__, _LAZY)
