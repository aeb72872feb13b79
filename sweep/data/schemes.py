"""The corpus URI schemes and the default corpus, by name only.

Each scheme's syntax and checks are `sweep.data.uris`'; a spec's fields are checked by these
names without the URI parsers.
"""

__all__ = ["DEFAULT_CORPUS", "SCHEMES"]

#: URI schemes of corpora, in the order the docs list them.
SCHEMES = ("builtin", "text", "tokens", "synthetic")
DEFAULT_CORPUS = "builtin:python-stdlib"
