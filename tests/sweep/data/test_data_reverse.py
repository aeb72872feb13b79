"""The reversal task: its examples, its stated entropy, and how a corpus of examples is read."""

import math

import numpy as np
import pytest

from sweep.data import DataError, check_corpus, load_corpus, synthetic

URI = "synthetic:reverse?vocab=12&length=5&seed=1&tokens=5000"


def test_examples_are_source_separator_reversed_source():
    tokens, rate = synthetic.reverse_stream(1000, vocab=12, length=5, seed=0)
    assert len(tokens) == 11 * math.ceil(1000 / 11)  # whole examples only
    ex = tokens.reshape(-1, 11).astype(int)
    assert (ex[:, 5] == 11).all() and (ex[:, :5] < 11).all()
    assert np.array_equal(ex[:, 6:], ex[:, 4::-1])
    counts = np.bincount(ex[:, :5].ravel(), minlength=11)
    assert counts.min() > 0.7 * counts.mean()  # uniform over the 11 ids below SEP
    # The only information: 5 uniform symbols out of 11 per example of 11 tokens.
    assert rate == pytest.approx(5 * math.log(11) / 11)


def test_corpus_windows_are_whole_examples(tmp_path):
    corpus = load_corpus(URI, tmp_path)
    assert corpus.examples == {"length": 11, "src_len": 5, "target_loss": 0.0}
    assert len(corpus.train) % 11 == 0 and len(corpus.val) % 11 == 0
    for x, y in [corpus.train_batch(0, i, 16, 10) for i in range(3)] + \
            corpus.val_batches(10, 200, 8):
        assert (x[:, 5] == 11).all()  # the separator: the decoder's first input
        assert np.array_equal(y[:, 5:], x[:, 4::-1])  # targets of the decoder: the reversal
    assert "optimal target loss 0 nats/token" in corpus.describe()[-1]
    corpus.require(10, src_len=5)
    with pytest.raises(DataError, match="holds examples of 11 tokens .*seq_len must be 10, "
                                        "got 12"):
        corpus.require(12)
    with pytest.raises(DataError, match="src_len must be 5, got 4"):
        corpus.require(10, src_len=4)


def test_val_batches_score_distinct_examples(tmp_path):
    corpus = load_corpus(URI, tmp_path)
    (x, _), = corpus.val_batches(10, 40, 8)  # 4 windows of 10 tokens
    assert len({tuple(row) for row in x}) == 4


@pytest.mark.parametrize("query,message", [
    ("vocab=2&length=4", "reverse needs vocab >= 3 and length >= 1"),
    ("length=0", "reverse needs vocab >= 3 and length >= 1"),
    ("length=8&tokens=20", "tokens=20 must hold at least two examples of 2 \\* length \\+ 1 = 17"),
])
def test_bad_parameters_are_refused_naming_them(query, message):
    with pytest.raises(DataError, match=message):
        check_corpus(f"synthetic:reverse?{query}")
