"""Training corpora: named by URI, prepared once per study, read through memory maps.

`load_corpus` (in `sweep.data.corpus`) turns a URI (``builtin:python-stdlib``, ``text:PATH``,
``tokens:PATH``, ``synthetic:markov?...``) into a `Corpus`; `sweep.data.synthetic` generates the
synthetic sources whose entropy rate is known exactly. `check_corpus` checks a URI's scheme,
parameters and paths in milliseconds, without reading the corpus.
"""

from sweep.data.corpus import (
    DEFAULT_CORPUS,
    SCHEMES,
    VAL_FRACTION,
    Corpus,
    DataError,
    check_corpus,
    load_corpus,
    unigram_entropy,
)

__all__ = [
    "DEFAULT_CORPUS",
    "SCHEMES",
    "VAL_FRACTION",
    "Corpus",
    "DataError",
    "check_corpus",
    "load_corpus",
    "unigram_entropy",
]
