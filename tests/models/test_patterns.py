import itertools

import pytest

from sweep_models.attention import attention_mask
from sweep_models.errors import ConfigError
from sweep_models.patterns import derive_layout, kept_pairs


def brute_force_kept(layout):
    t = layout.seq_len
    return sum(layout.keeps(i, j) for i, j in itertools.product(range(t), range(t)))


CASES = [
    ("dense", 0.0, 1), ("local", 0.3, 1), ("local", 0.8, 1), ("strided", 0.5, 1),
    ("strided", 0.6, 1), ("block_sparse", 0.4, 8), ("block_sparse", 0.6, 4),
]


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("pattern", "sparsity", "block"), CASES)
def test_kept_pairs_match_brute_force_and_torch_mask(pattern, sparsity, block, causal):
    layout = derive_layout(pattern, sparsity, 48, causal=causal, block_size=block, seed=1)
    mask = attention_mask(layout)
    assert layout.kept_pairs == brute_force_kept(layout) == int(mask.sum())
    assert bool(mask.diagonal().all()), "every query must keep at least itself"
    if causal:
        assert not bool(mask.triu(1).any())


def test_published_pair_counts():
    # Published pair counts: T=1024 dense keeps 1,048,576 pairs, causal 524,800,
    # a causal sliding window of 256 keeps 229,504.
    assert derive_layout("dense", 0.0, 1024, causal=False).kept_pairs == 1_048_576
    assert derive_layout("dense", 0.0, 1024).kept_pairs == 524_800
    layout = derive_layout("local", 1 - 229_504 / 524_800, 1024)
    assert layout.window == 256 and layout.kept_pairs == 229_504


@pytest.mark.parametrize("pattern", ["local", "strided", "block_sparse"])
@pytest.mark.parametrize("sparsity", [0.1, 0.25, 0.5, 0.7])
def test_achieved_sparsity_is_closest_to_requested(pattern, sparsity):
    layout = derive_layout(pattern, sparsity, 512, block_size=32)
    assert abs(layout.sparsity - sparsity) < 0.08
    assert layout.sparsity == pytest.approx(1 - layout.kept_pairs / layout.total_pairs)


def test_block_sparse_random_blocks_are_seeded():
    a = derive_layout("block_sparse", 0.6, 512, block_size=32, seed=0)
    b = derive_layout("block_sparse", 0.6, 512, block_size=32, seed=0)
    c = derive_layout("block_sparse", 0.6, 512, block_size=32, seed=1)
    assert a.n_random_blocks > 0
    assert a.key_blocks == b.key_blocks
    assert a.key_blocks != c.key_blocks


def test_sparsity_beyond_pattern_limit_is_an_error():
    with pytest.raises(ConfigError, match="no key"):
        derive_layout("local", 0.99, 64)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize(("pattern", "sparsity", "block"), CASES)
def test_kept_pairs_on_every_prefix_match_the_torch_mask(pattern, sparsity, block, causal):
    layout = derive_layout(pattern, sparsity, 48, causal=causal, block_size=block, seed=2)
    mask = attention_mask(layout)
    sizes = {"window": layout.window, "stride": layout.stride, "block_size": layout.block_size,
             "key_blocks": layout.key_blocks}
    for t in range(1, 49):
        assert kept_pairs(pattern, t, causal=causal, **sizes) == int(mask[:t, :t].sum()), t


def test_kept_pairs_refuses_an_unknown_pattern_or_a_missing_size():
    with pytest.raises(ConfigError, match="attn_pattern='sliding'"):
        kept_pairs("sliding", 8)
    with pytest.raises(ConfigError, match="window"):
        kept_pairs("local", 8)
