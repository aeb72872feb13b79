"""Bottom-k sketches and Broder's resemblance against exact Jaccard similarity of shingle sets."""

import random

import pytest

from sweep.data.near_duplicates import (
    SHINGLE_BYTES,
    SKETCH_SIZE,
    find_near_duplicates,
    normalise,
    resemblance,
    sketch,
)


def shingles(text: bytes) -> set[bytes]:
    t = normalise(text)
    return {t[i : i + SHINGLE_BYTES] for i in range(len(t) - SHINGLE_BYTES + 1)}


def jaccard(a: bytes, b: bytes) -> float:
    x, y = shingles(a), shingles(b)
    return len(x & y) / len(x | y)


def letters(seed: int, n: int) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz ") for _ in range(n))


def mutate(text: bytes, seed: int, rate: float) -> bytes:
    rng = random.Random(seed)
    return bytes(rng.choice(b"xyz") if rng.random() < rate else c for c in text)


def test_normalise_lowercases_and_collapses_whitespace():
    assert normalise(b"  Hello\tWORLD\n\n again ") == b"hello world again"


def test_resemblance_is_exact_when_documents_have_at_most_k_shingles():
    a = letters(1, 80)
    b = a[:50] + letters(2, 30)
    assert len(shingles(a) | shingles(b)) <= SKETCH_SIZE
    assert resemblance(sketch(a), sketch(b)) == pytest.approx(jaccard(a, b), abs=1e-12)
    assert resemblance(sketch(a), sketch(a.upper())) == 1.0


@pytest.mark.parametrize("rate", [0.005, 0.02, 0.05])
def test_resemblance_estimates_jaccard_of_long_documents(rate):
    a = letters(3, 20_000)
    b = mutate(a, 4, rate)
    exact = jaccard(a, b)
    # Standard error sqrt(r (1 - r) / k) <= 0.045 for k = 128; 0.15 is over three of them.
    assert abs(resemblance(sketch(a), sketch(b)) - exact) < 0.15


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
    assert {(i, j) for i, j, _ in found.pairs} == {(0, 1), (0, 3), (1, 3)}
    assert all(r >= 0.5 for *_, r in found.pairs)
    assert found.groups() == [[0, 1, 3, 4], [2], [5]]
    assert jaccard(docs[0], docs[2]) < 0.1  # the unrelated ones really are
