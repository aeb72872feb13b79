"""Synthetic token sources whose lowest achievable loss is known exactly.

Each generator returns a ``uint16`` token stream and the source's entropy rate in nats per token:
the loss of the Bayes-optimal predictor that sees the whole past, the floor no model can beat.

- ``markov``: a random order-K Markov source over V symbols. Each of the V^K contexts has its
  own next-symbol distribution drawn from a symmetric Dirichlet(alpha). Entropy rate
  H = sum_s pi(s) H(P(. | s)) with pi the stationary distribution of the chain on contexts
  (Cover & Thomas, "Elements of Information Theory", 2nd ed., theorem 4.2.4).
- ``copy``: periods of L random symbols, a separator, the same L symbols again and an end
  marker. Only the first L symbols carry information: H = L log(V - 2) / (2L + 2).
- ``associative-recall``: P key-value pairs (distinct keys), then a query key drawn from them
  and its value (Ba et al. 2016; Zoology, Arora et al. 2023). Per period of 2P + 2 tokens the
  information is sum_{i<P} log(n_keys - i) + P log(n_values) + log P; the answer is determined.

- ``reverse``: a sequence-to-sequence task (`reverse_stream`), examples of 2L + 1 tokens: L
  source symbols uniform over the V - 1 ids below the separator SEP = V - 1, the separator,
  then the source reversed. The stream's entropy rate is L log(V - 1) / (2L + 1); the target
  is a function of the source, so a model that reads the source (an encoder-decoder model, or
  a decoder-only one that sees the whole example) can reach loss 0 on the target part, while
  one that ignores the source cannot go below log(V - 1) there: each target symbol is uniform
  and independent of the earlier target symbols.

The entropy rate assumes the whole past is visible. A model sees windows of ``seq_len`` tokens
starting anywhere, so its achievable loss is higher near a window's start: by at most
(K / seq_len) log V for the Markov source, and substantially for ``copy`` and
``associative-recall`` unless ``seq_len`` spans many periods.

Sources are generated as ``n_chains`` independent streams laid end to end (vectorised over the
chains). At a seam the first symbol does not follow the previous chain's context, so the
empirical loss floor exceeds H by at most (n_chains / n_tokens) * log V, under 1e-4 nats at the
defaults.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = [
    "associative_recall_stream",
    "copy_stream",
    "markov_entropy_rate",
    "markov_stream",
    "markov_transitions",
    "reverse_stream",
    "stationary_distribution",
]

_N_CHAINS = 64


def markov_transitions(vocab: int, order: int, alpha: float, seed: int) -> np.ndarray:
    """Next-symbol distributions of a random order-K Markov source.

    Args:
        vocab: Alphabet size V.
        order: Context length K >= 1.
        alpha: Concentration of the symmetric Dirichlet each row is drawn from (smaller:
            peakier rows, lower entropy).
        seed: Seed of the draw.

    Returns:
        ``(V**K, V)`` float64 array; row ``s`` is P(x | context s), where the context
        (x_{t-K}, ..., x_{t-1}) is encoded as sum_i x_{t-K+i} V^(K-1-i).
    """
    rng = np.random.default_rng([seed, vocab, order])
    probs = rng.dirichlet(np.full(vocab, alpha), size=vocab**order)
    # Keep every transition possible so the chain is irreducible and aperiodic.
    probs = np.maximum(probs, 1e-12)
    return probs / probs.sum(axis=1, keepdims=True)


def stationary_distribution(probs: np.ndarray, *, tol: float = 1e-14) -> np.ndarray:
    """Stationary distribution over contexts of the chain given by ``probs`` ``(S, V)``.

    The context s moves to (s * V + x) mod S on symbol x; power iteration on that sparse map
    converges because every transition has positive probability.

    Returns:
        ``(S,)`` float64 array summing to 1.
    """
    n_states, vocab = probs.shape
    nxt = (np.arange(n_states)[:, None] * vocab + np.arange(vocab)[None, :]) % n_states
    pi = np.full(n_states, 1.0 / n_states)
    for _ in range(100_000):
        new = np.bincount(nxt.ravel(), weights=(pi[:, None] * probs).ravel(), minlength=n_states)
        if np.abs(new - pi).sum() < tol:
            return new / new.sum()
        pi = new
    return pi / pi.sum()


def markov_entropy_rate(probs: np.ndarray) -> float:
    """Entropy rate in nats per symbol, H = sum_s pi(s) sum_x -P(x|s) log P(x|s)."""
    pi = stationary_distribution(probs)
    row_entropy = -(probs * np.log(probs)).sum(axis=1)
    return float(pi @ row_entropy)


def markov_stream(
    n_tokens: int, vocab: int, order: int, alpha: float, seed: int
) -> tuple[np.ndarray, float]:
    """Sample ``n_tokens`` symbols of the order-K source; returns (tokens, entropy rate)."""
    probs = markov_transitions(vocab, order, alpha, seed)
    n_states = probs.shape[0]
    cdf = np.cumsum(probs, axis=1)
    cdf[:, -1] = 1.0
    rng = np.random.default_rng([seed, 1])
    n_chains = min(_N_CHAINS, max(1, n_tokens // 1024))
    length = -(-n_tokens // n_chains)
    pi = stationary_distribution(probs)
    state = rng.choice(n_states, size=n_chains, p=pi)
    out = np.empty((n_chains, length), dtype=np.uint16)
    u = rng.random((length, n_chains))
    for t in range(length):
        rows = cdf[state]
        x = (rows < u[t][:, None]).sum(axis=1)
        out[:, t] = x
        state = (state * vocab + x) % n_states
    return out.ravel()[:n_tokens], markov_entropy_rate(probs)


def _uniform_sources(n_tokens: int, period: int, length: int, n_sym: int,
                     rng_key: list[int]) -> np.ndarray:
    """One source per period of ``period`` tokens: ids uniform over ``[0, n_sym)``.

    Returns:
        ``(ceil(n_tokens / period), length)`` int64, drawn from a generator seeded by
        ``rng_key``.
    """
    n_periods = -(-n_tokens // period)
    return np.random.default_rng(rng_key).integers(0, n_sym, size=(n_periods, length))


def copy_stream(n_tokens: int, vocab: int, length: int, seed: int) -> tuple[np.ndarray, float]:
    """Copy task: [x_1..x_L, SEP, x_1..x_L, EOS] repeated, x_i uniform over V - 2 symbols.

    SEP = V - 2 and EOS = V - 1. Returns (tokens, entropy rate in nats per token).
    """
    n_sym, period = vocab - 2, 2 * length + 2
    x = _uniform_sources(n_tokens, period, length, n_sym, [seed, 2])
    sep = np.full((len(x), 1), vocab - 2)
    eos = np.full((len(x), 1), vocab - 1)
    seq = np.concatenate([x, sep, x, eos], axis=1).astype(np.uint16)
    return seq.ravel()[:n_tokens], length * math.log(n_sym) / period


def associative_recall_stream(
    n_tokens: int, vocab: int, pairs: int, seed: int
) -> tuple[np.ndarray, float]:
    """Associative recall: [k_1 v_1 .. k_P v_P q v(q)] repeated.

    Keys are the first V // 2 ids (distinct within a period), values the rest. Returns
    (tokens, entropy rate in nats per token).
    """
    n_keys = vocab // 2
    n_values = vocab - n_keys
    period = 2 * pairs + 2
    n_periods = -(-n_tokens // period)
    rng = np.random.default_rng([seed, 3])
    keys = np.argsort(rng.random((n_periods, n_keys)), axis=1)[:, :pairs]
    values = rng.integers(n_keys, vocab, size=(n_periods, pairs))
    which = rng.integers(0, pairs, size=n_periods)
    rows = np.arange(n_periods)
    seq = np.empty((n_periods, period), dtype=np.uint16)
    seq[:, 0 : 2 * pairs : 2] = keys
    seq[:, 1 : 2 * pairs : 2] = values
    seq[:, -2] = keys[rows, which]
    seq[:, -1] = values[rows, which]
    info = sum(math.log(n_keys - i) for i in range(pairs)) + pairs * math.log(n_values)
    info += math.log(pairs)
    return seq.ravel()[:n_tokens], info / period


def reverse_stream(n_tokens: int, vocab: int, length: int, seed: int) -> tuple[np.ndarray, float]:
    """Reversal: examples [x_1..x_L, SEP, x_L..x_1], x_i uniform over the V - 1 ids below SEP.

    SEP = V - 1. The stream holds ceil(n_tokens / (2L + 1)) whole examples (so possibly a few
    more than ``n_tokens`` tokens: examples are never cut). Read as windows of 2L tokens that
    start at an example (``sweep.data.Corpus`` with ``examples``), the first L are the source,
    the separator is the decoder's first input, and the targets of the last L positions are the
    reversed source: their optimal loss is 0 nats per token.

    Returns:
        (tokens, entropy rate in nats per token of the stream, L log(V - 1) / (2L + 1)).
    """
    n_sym, period = vocab - 1, 2 * length + 1
    x = _uniform_sources(n_tokens, period, length, n_sym, [seed, 4])
    sep = np.full((len(x), 1), vocab - 1)
    seq = np.concatenate([x, sep, x[:, ::-1]], axis=1).astype(np.uint16)
    return seq.ravel(), length * math.log(n_sym) / period
