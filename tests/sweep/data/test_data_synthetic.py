import math

import numpy as np
import pytest

from sweep.data import synthetic


def _h(p):
    return -(p * math.log(p) + (1 - p) * math.log(1 - p))


def test_entropy_rate_of_a_two_state_chain_by_hand():
    # P(1|0) = a, P(0|1) = b: stationary pi = (b, a) / (a + b) (Cover & Thomas example 4.2.1),
    # H = pi_0 h(a) + pi_1 h(b).
    a, b = 0.1, 0.4
    probs = np.array([[1 - a, a], [b, 1 - b]])
    pi = synthetic.stationary_distribution(probs)
    assert pi == pytest.approx([b / (a + b), a / (a + b)], abs=1e-12)
    expected = (b * _h(a) + a * _h(b)) / (a + b)
    assert synthetic.markov_entropy_rate(probs) == pytest.approx(expected, abs=1e-12)


def test_order_two_stationary_distribution_is_fixed_point():
    probs = synthetic.markov_transitions(vocab=3, order=2, alpha=0.7, seed=1)
    pi = synthetic.stationary_distribution(probs)
    # Dense transition matrix over the 9 contexts, built independently of the sparse update.
    dense = np.zeros((9, 9))
    for s in range(9):
        for x in range(3):
            dense[s, (s * 3 + x) % 9] += probs[s, x]
    w, v = np.linalg.eig(dense.T)
    ref = np.real(v[:, np.argmin(np.abs(w - 1))])
    assert pi == pytest.approx(ref / ref.sum(), abs=1e-10)


@pytest.mark.parametrize("order,vocab", [(1, 6), (2, 4)])
def test_entropy_rate_matches_empirical_conditional_entropy(order, vocab):
    tokens, rate = synthetic.markov_stream(400_000, vocab, order, alpha=0.5, seed=3)
    t = tokens.astype(np.int64)
    ctx = np.zeros(len(t) - order, dtype=np.int64)
    for i in range(order):
        ctx = ctx * vocab + t[i : len(t) - order + i]
    joint = np.bincount(ctx * vocab + t[order:], minlength=vocab ** (order + 1))
    joint = joint.reshape(vocab**order, vocab).astype(float)
    cond = joint / np.maximum(joint.sum(1, keepdims=True), 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        h = -np.nansum(joint * np.where(cond > 0, np.log(cond), 0.0)) / joint.sum()
    assert h == pytest.approx(rate, abs=0.01)
    assert tokens.dtype == np.uint16 and tokens.max() < vocab


def test_copy_task_structure_and_rate():
    tokens, rate = synthetic.copy_stream(10_000, vocab=10, length=5, seed=0)
    periods = tokens[: (len(tokens) // 12) * 12].reshape(-1, 12)
    assert np.array_equal(periods[:, :5], periods[:, 6:11])
    assert (periods[:, 5] == 8).all() and (periods[:, 11] == 9).all()
    # The only information: 5 uniform symbols out of 8 per 12 tokens.
    counts = np.bincount(periods[:, :5].ravel(), minlength=8)
    assert counts.min() > 0.8 * counts.mean()
    assert rate == pytest.approx(5 * math.log(8) / 12)


def test_associative_recall_structure():
    tokens, rate = synthetic.associative_recall_stream(10_000, vocab=16, pairs=3, seed=0)
    periods = tokens[: (len(tokens) // 8) * 8].reshape(-1, 8).astype(int)
    for row in periods[:200]:
        keys, values = row[0:6:2], row[1:6:2]
        assert len(set(keys)) == 3 and (keys < 8).all() and (values >= 8).all()
        assert row[6] in keys and row[7] == values[list(keys).index(row[6])]
    # Independent count: ordered distinct keys 8*7*6, values 8^3, query 3 choices per period.
    assert rate == pytest.approx(math.log(8 * 7 * 6 * 8**3 * 3) / 8)
