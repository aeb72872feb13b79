"""Sampled 8-byte shingles, datasketch MinHash estimates against exact Jaccard, LSH grouping."""

import logging
import random

import pytest

from sweep.data.near_duplicates import (
    NEAR_DUPLICATE_RESEMBLANCE,
    SAMPLE_MOD,
    SHINGLE_BYTES,
    find_near_duplicates,
    normalise,
    resemblance,
    shingles,
    sketch,
)


def windows(text: bytes) -> set[bytes]:
    t = normalise(text)
    return {t[i : i + SHINGLE_BYTES] for i in range(len(t) - SHINGLE_BYTES + 1)}


def jaccard(x: set, y: set) -> float:
    return len(x & y) / len(x | y)


def letters(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(n))


def mutate(text: bytes, seed: int, rate: float) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.choice(b"xyz") if rng.random() < rate else c for c in text)


def test_normalise_lowercases_and_collapses_whitespace():
    assert normalise(b"  Hi\tWORLD\n\n again ") == b"hi world again"


def test_normalise_reduces_spelling_variants_to_one_skeleton():
    # Early-modern and modern spellings: u/v, i/j, -ie/-y, doubled letters, final -e, "vs".
    pairs = [(b"Heauen, I haue lou'd!", b"heaven: I have lov'd"),
             (b"Iustice vpon vs", b"justice upon us"),
             (b"a merrie Dowrie", b"A merry dowry"),
             (b"Sonne, Schollers, Musicke", b"son scholers musick")]
    for old, new in pairs:
        assert normalise(old) == normalise(new), (old, new)
    assert normalise(b"Heauen, I haue lou'd!") == b"heauen i hau lou d"
    # Non-ASCII bytes, digits and two-letter words stay as they are.
    assert normalise("Caf\u00e9 be 1100".encode()) == "caf\u00e9 be 1100".encode()


def test_shingles_are_a_content_defined_sample_of_the_windows():
    text = letters(1, 20_000)
    picked = set(shingles(text))
    assert picked <= windows(text)
    assert 0.2 < len(picked) / len(windows(text)) < 0.3  # one in SAMPLE_MOD = 4
    assert SAMPLE_MOD == 4
    # Chosen by content, not offset: text shifted by an inserted prefix keeps its shingles.
    assert picked <= set(shingles(b"a few more bytes first " + text))
    assert shingles(b"Short") == [b"short"] and shingles(b" \n ") == []
    assert len(shingles(b"just nine")) == 1  # a window is picked even when none hashes to 0


def test_resemblance_is_one_for_copies_after_normalising():
    a = letters(2, 3000)
    assert resemblance(sketch(a), sketch(a.upper().replace(b" ", b"\n "))) == 1.0
    assert resemblance(sketch(b""), sketch(b"")) == 1.0


@pytest.mark.parametrize("rate", [0.005, 0.02, 0.05])
def test_resemblance_estimates_jaccard_of_long_documents(rate):
    a = letters(3, 20_000)
    b = mutate(a, 4, rate)
    sampled = jaccard(set(shingles(a)), set(shingles(b)))
    # Standard error sqrt(r (1 - r) / 128) <= 0.045; 0.15 is over three of them.
    assert abs(resemblance(sketch(a), sketch(b)) - sampled) < 0.15
    # MOD_m sampling: the kept windows' resemblance stands for all windows' (about 5000 kept).
    assert abs(sampled - jaccard(windows(a), windows(b))) < 0.05


def test_near_duplicates_are_grouped_transitively_and_others_left_alone():
    base = letters(5, 5000)
    docs = [
        base,                          # 0
        mutate(base, 6, 0.01),         # 1 ~ 0
        letters(7, 5000),              # 2 unrelated
        mutate(base, 8, 0.01),         # 3 ~ 0
        base.upper(),                  # 4 identical to 0 after normalising
        letters(9, 5000),              # 5 unrelated
    ]
    found = find_near_duplicates(docs)
    assert [0, 4] in found.copies
    # 3 is grouped with 0 or 1 first; the other candidate is then in its group, not estimated.
    pairs = {(i, j) for i, j, _ in found.pairs}
    assert (0, 1) in pairs and len(pairs) == 2 and pairs < {(0, 1), (0, 3), (1, 3)}
    assert all(r >= NEAR_DUPLICATE_RESEMBLANCE for *_, r in found.pairs)
    assert found.groups() == [[0, 1, 3, 4], [2], [5]]
    assert jaccard(windows(docs[0]), windows(docs[2])) < 0.1  # the unrelated ones really are


def test_files_from_one_template_are_grouped_and_their_pairs_not_all_estimated():
    # Generated sources: one template with a different name substituted throughout, so every
    # other line differs in a word (and the word 5-grams holding it).
    template = b"".join(
        b"def NAME_%d(x, coefficients, tensor=None):\n"
        b"    return _apply_series(x, coefficients, tensor, order=%d, scale=1.0)\n" % (i, i)
        for i in range(60))
    names = [b"hermite", b"legendre", b"laguerre", b"chebyshev", b"polynomial", b"hermite_e"]
    docs = [template.replace(b"NAME", n) for n in names] + [letters(10, 6000)]
    assert NEAR_DUPLICATE_RESEMBLANCE < jaccard(windows(docs[0]), windows(docs[1])) < 0.8
    found = find_near_duplicates(docs)
    assert found.groups() == [[0, 1, 2, 3, 4, 5], [6]]
    assert len(found.pairs) == 5  # a spanning tree of the group: 5 of its 15 pairs


def test_pairs_near_the_threshold_are_found():
    # 40 pairs at resemblance about 0.65: banded LSH proposes each with probability ~0.995.
    docs = []
    for seed in range(40):
        a = letters(100 + seed, 4000)
        docs += [a, mutate(a, 200 + seed, 0.03)]
    sampled = [jaccard(set(shingles(docs[2 * k])), set(shingles(docs[2 * k + 1])))
               for k in range(40)]
    assert 0.55 < min(sampled) and max(sampled) < 0.75
    groups = find_near_duplicates(docs).groups()
    assert sum(g in groups for g in ([2 * k, 2 * k + 1] for k in range(40))) >= 38
    assert all(len(g) <= 2 for g in groups)


def test_above_the_size_cap_only_identical_documents_are_grouped(caplog):
    base = letters(11, 5000)
    docs = [base, mutate(base, 12, 0.01), base.upper()]
    assert find_near_duplicates(docs).groups() == [[0, 1, 2]]
    with caplog.at_level(logging.WARNING, logger="sweep.data.near_duplicates"):
        capped = find_near_duplicates(docs, max_bytes=14_999)
    assert capped.pairs == [] and capped.groups() == [[0, 2], [1]]
    assert "near-duplicate search skipped: 3 documents of 0.0 MB exceed" in caplog.text


def test_threshold_outside_0_1_is_refused():
    with pytest.raises(ValueError, match="threshold must be in"):
        find_near_duplicates([b"a"], threshold=0.0)
