import json
import math
import multiprocessing as mp
import pickle

import numpy as np
import pytest
from scipy.stats import entropy as scipy_entropy

from sweep.data import VAL_FRACTION, DataError, check_corpus, load_corpus


def test_builtin_stdlib_is_real_python_bytes_and_cached(tmp_path):
    c = load_corpus("builtin:python-stdlib?max_bytes=300000", tmp_path)
    assert c.vocab_size == 256 and c.byte_level and c.entropy_rate is None
    assert len(c.train) + len(c.val) == 300_000
    assert len(c.val) == int(300_000 * VAL_FRACTION)
    text = bytes(np.asarray(c.train[:200_000], dtype=np.uint8)).decode("utf-8", "replace")
    assert "def " in text and "import " in text
    prepared = tmp_path / "corpora" / c.content_hash / "train.bin"
    mtime = prepared.stat().st_mtime_ns
    again = load_corpus("builtin:python-stdlib?max_bytes=300000", tmp_path)
    assert again.content_hash == c.content_hash
    assert prepared.stat().st_mtime_ns == mtime  # reused, not rewritten
    assert np.array_equal(again.val, c.val)


def test_unigram_baseline_matches_scipy(tmp_path):
    c = load_corpus("builtin:python-stdlib?max_bytes=200000", tmp_path)
    counts = np.bincount(np.asarray(c.val), minlength=256)
    assert c.baseline_unigram_loss == pytest.approx(scipy_entropy(counts), rel=1e-9)


def test_text_file_and_directory(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    (tmp_path / "d" / "b.txt").write_bytes(b"bbbb" * 100)
    (tmp_path / "d" / "sub" / "a.txt").write_bytes(b"aaaa" * 100)
    (tmp_path / "d" / "a.txt").write_bytes(b"cccc" * 100)
    c = load_corpus(f"text:{tmp_path / 'd'}", tmp_path / "cache")
    train = np.asarray(c.train).astype(np.uint8).tobytes()
    val = np.asarray(c.val).astype(np.uint8).tobytes()
    # Whole documents, each side in sorted recursive order (a.txt, b.txt, sub/a.txt); no path
    # hashes below 0.1 (0.785, 0.525, 0.838), so the smallest, b.txt's, is the val document.
    assert (train, val) == (b"cccc" * 100 + b"aaaa" * 100, b"bbbb" * 100)
    assert c.summary["split"] == "documents" and c.summary["documents"] == 3
    f = load_corpus(f"text:{tmp_path / 'd' / 'b.txt'}", tmp_path / "cache")
    assert np.concatenate([f.train, f.val]).astype(np.uint8).tobytes() == b"bbbb" * 100


def test_changed_text_is_prepared_again(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(b"hello world " * 50)
    first = load_corpus(f"text:{path}", tmp_path / "cache")
    path.write_bytes(b"other words " * 50)
    second = load_corpus(f"text:{path}", tmp_path / "cache")
    assert first.content_hash != second.content_hash
    assert bytes(np.asarray(second.train[:11], dtype=np.uint8)) == b"other words"


def _write_tokens(folder, train, val, meta=None, pkl=None):
    folder.mkdir(parents=True, exist_ok=True)
    np.asarray(train, dtype=np.uint16).tofile(folder / "train.bin")
    np.asarray(val, dtype=np.uint16).tofile(folder / "val.bin")
    if meta is not None:
        (folder / "meta.json").write_text(json.dumps(meta))
    if pkl is not None:
        (folder / "meta.pkl").write_bytes(pickle.dumps(pkl))


def test_tokens_folder_vocab_sources(tmp_path):
    rng = np.random.default_rng(0)
    train, val = rng.integers(0, 1000, 5000), rng.integers(0, 1000, 800)
    _write_tokens(tmp_path / "j", train, val, meta={"vocab_size": 1000})
    c = load_corpus(f"tokens:{tmp_path / 'j'}", tmp_path / "cache")
    assert c.vocab_size == 1000 and not c.byte_level
    assert np.array_equal(c.train, train) and np.array_equal(c.val, val)
    _write_tokens(tmp_path / "p", train, val, pkl={"vocab_size": 1024, "itos": {}})
    assert load_corpus(f"tokens:{tmp_path / 'p'}", tmp_path / "cache").vocab_size == 1024
    _write_tokens(tmp_path / "n", train, val)
    assert load_corpus(f"tokens:{tmp_path / 'n'}?vocab=1200", tmp_path / "c").vocab_size == 1200
    assert load_corpus(f"tokens:{tmp_path / 'n'}", tmp_path / "c", vocab_size=1001).vocab_size \
        == 1001


def test_train_batches_are_a_function_of_seed_and_index(tmp_path):
    c = load_corpus("synthetic:markov?vocab=8&tokens=20000", tmp_path)
    x, y = c.train_batch(3, 7, batch_size=4, seq_len=32)
    assert x.shape == y.shape == (4, 32) and x.dtype == np.int64
    assert np.array_equal(x[:, 1:], y[:, :-1])
    x2, _ = c.train_batch(3, 7, batch_size=4, seq_len=32)
    assert np.array_equal(x, x2)
    assert not np.array_equal(x, c.train_batch(4, 7, 4, 32)[0])
    assert not np.array_equal(x, c.train_batch(3, 8, 4, 32)[0])


def test_val_batches_are_fixed_and_cover_eval_tokens(tmp_path):
    c = load_corpus("synthetic:markov?vocab=8&tokens=20000", tmp_path)
    batches = c.val_batches(seq_len=32, n_tokens=1000, batch_size=8)
    n_tokens = sum(y.size for _, y in batches)
    assert 1000 <= n_tokens < 1000 + 32
    again = load_corpus("synthetic:markov?vocab=8&tokens=20000", tmp_path / "other")
    for (x, y), (x2, y2) in zip(batches, again.val_batches(32, 1000, 8), strict=True):
        assert np.array_equal(x, x2) and np.array_equal(y, y2)
        assert np.array_equal(x[:, 1:], y[:, :-1])


def _load(args):
    path, cache = args
    return load_corpus(f"text:{path}", cache).content_hash


def test_parallel_workers_prepare_once_without_half_files(tmp_path):
    path = tmp_path / "t.txt"
    path.write_bytes(bytes(range(1, 256)) * 2000)  # no NUL; not UTF-8, text by its suffix
    with mp.get_context("spawn").Pool(2) as pool:
        hashes = pool.map(_load, [(path, tmp_path / "cache")] * 4)
    assert len(set(hashes)) == 1
    entries = list((tmp_path / "cache" / "corpora").iterdir())
    assert [e.name for e in entries] == [hashes[0]]  # no temporary folders left behind
    c = load_corpus(f"text:{path}", tmp_path / "cache")
    assert len(c.train) + len(c.val) == 255 * 2000


# ------------------------------------------------------------------------------- errors
def _expect(uri, cache, match, **kw):
    with pytest.raises(DataError, match=match) as info:
        load_corpus(uri, cache, **kw)
    assert uri in str(info.value)


def test_missing_paths(tmp_path):
    _expect(f"text:{tmp_path / 'nope.txt'}", tmp_path, "does not exist")
    _expect(f"tokens:{tmp_path / 'nope'}", tmp_path, "does not exist")
    (tmp_path / "half").mkdir()
    np.zeros(100, dtype=np.uint16).tofile(tmp_path / "half" / "train.bin")
    _expect(f"tokens:{tmp_path / 'half'}", tmp_path, "val.bin")


def test_empty_corpora(tmp_path):
    (tmp_path / "empty.txt").write_bytes(b"")
    _expect(f"text:{tmp_path / 'empty.txt'}", tmp_path, "empty")
    (tmp_path / "emptydir").mkdir()
    _expect(f"text:{tmp_path / 'emptydir'}", tmp_path, "no text documents")
    _expect("synthetic:markov?tokens=0", tmp_path, "empty")
    _write_tokens(tmp_path / "e", [], [1, 2, 3], meta={"vocab_size": 8})
    _expect(f"tokens:{tmp_path / 'e'}", tmp_path, "empty")


def test_corpus_shorter_than_one_sequence(tmp_path):
    (tmp_path / "short.txt").write_bytes(b"x" * 200)
    c = load_corpus(f"text:{tmp_path / 'short.txt'}", tmp_path)
    c.require(seq_len=19)  # val has 20 tokens: exactly one window of 19 + 1
    with pytest.raises(DataError, match="val split has 20 tokens") as info:
        c.require(seq_len=20)
    assert str(tmp_path / "short.txt") in str(info.value)


def test_token_ids_beyond_vocab(tmp_path):
    _write_tokens(tmp_path / "t", [1, 2, 300, 4] * 10, [1, 2, 3] * 10, meta={"vocab_size": 256})
    _expect(f"tokens:{tmp_path / 't'}", tmp_path, "token id 300, beyond vocab_size=256")
    (tmp_path / "b.txt").write_bytes("\x10caf\xe9 ".encode("latin-1") * 10)  # text by suffix
    _expect(f"text:{tmp_path / 'b.txt'}", tmp_path, "token id 233", vocab_size=128)
    _expect("synthetic:markov?vocab=32&tokens=5000", tmp_path, "beyond vocab_size=16",
            vocab_size=16)


def test_bad_uris_and_parameters(tmp_path):
    _expect("stdlib", tmp_path, "expected scheme")
    _expect("ftp:somewhere", tmp_path, "unknown scheme")
    _expect("builtin:shakespeare", tmp_path, "unknown builtin")
    _expect("builtin:python-stdlib?max_bytes=many", tmp_path, "not a valid int")
    _expect("synthetic:markov?temperature=2", tmp_path, "unknown parameter 'temperature'")
    _expect("synthetic:sorting", tmp_path, "unknown synthetic task")
    _expect("synthetic:markov?order=9&vocab=16", tmp_path, "order=9")
    _expect("synthetic:associative-recall?vocab=8&pairs=5", tmp_path, "pairs")
    (tmp_path / "nometa").mkdir()
    _write_tokens(tmp_path / "nometa", [1] * 10, [1] * 10)
    _expect(f"tokens:{tmp_path / 'nometa'}", tmp_path, "no vocab size")


def test_markov_corpus_reports_its_entropy_rate(tmp_path):
    c = load_corpus("synthetic:markov?order=1&vocab=4&alpha=1&seed=5&tokens=20000", tmp_path)
    assert c.entropy_rate is not None and 0 < c.entropy_rate < math.log(4)
    assert c.entropy_rate <= c.baseline_unigram_loss + 0.02  # context never hurts


def test_text_without_a_path_is_an_error(tmp_path):
    with pytest.raises(DataError, match="needs a file or folder path"):
        load_corpus("text:", tmp_path)


@pytest.mark.parametrize(("meta", "message"), [
    ("{bad", "cannot read the meta file"),
    ('{"vocab_size": "abc"}', "needs vocab_size as a positive integer"),
    ('{"vocab_size": 0}', "needs vocab_size as a positive integer"),
])
def test_tokens_meta_errors_name_the_corpus(tmp_path, meta, message):
    folder = tmp_path / "tok"
    folder.mkdir()
    for name in ("train", "val"):
        np.arange(100, dtype=np.uint16).tofile(folder / f"{name}.bin")
    (folder / "meta.json").write_text(meta)
    with pytest.raises(DataError, match=message) as info:
        load_corpus(f"tokens:{folder}", tmp_path / "cache")
    assert f"tokens:{folder}" in str(info.value)


def test_tokens_file_with_an_odd_byte_count_is_an_error(tmp_path):
    folder = tmp_path / "tok"
    folder.mkdir()
    (folder / "train.bin").write_bytes(b"\x01" * 2001)
    np.arange(100, dtype=np.uint16).tofile(folder / "val.bin")
    with pytest.raises(DataError, match="not a whole number of uint16"):
        load_corpus(f"tokens:{folder}?vocab=300", tmp_path / "cache")


def test_markov_alpha_must_be_finite(tmp_path):
    with pytest.raises(DataError, match="alpha=inf must be a finite number"):
        load_corpus("synthetic:markov?alpha=inf&tokens=20000", tmp_path)


# --------------------------------------------------------------------- meta.pkl, no code
class _RunsCode:
    """Pickles as a call of os.system, which plain pickle.load would make."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import os

        return os.system, (f"touch {self.marker}",)


def test_nanogpt_meta_pkl_gives_the_vocab_size(tmp_path):
    chars = sorted(set("hello world"))
    meta = {"vocab_size": len(chars), "itos": dict(enumerate(chars)),
            "stoi": {c: i for i, c in enumerate(chars)}}
    folder = tmp_path / "shakespeare_char"
    _write_tokens(folder, [0, 1, 2, 3] * 10, [3, 2, 1] * 10)
    for protocol in (0, 2, pickle.HIGHEST_PROTOCOL):  # nanoGPT writes the default protocol
        (folder / "meta.pkl").write_bytes(pickle.dumps(meta, protocol=protocol))
        assert load_corpus(f"tokens:{folder}", tmp_path / f"c{protocol}").vocab_size == 8


@pytest.mark.parametrize("payload", ["reduce", "nested", "class"])
def test_meta_pkl_that_would_run_code_is_refused_and_runs_none(tmp_path, payload):
    marker = tmp_path / "pwned"
    obj = {"reduce": lambda: _RunsCode(marker),
           "nested": lambda: {"vocab_size": 8, "itos": {0: _RunsCode(marker)}},
           "class": lambda: {"vocab_size": 8, "cls": DataError}}[payload]()
    folder = tmp_path / "tok"
    _write_tokens(folder, [1] * 10, [1] * 10)
    (folder / "meta.pkl").write_bytes(pickle.dumps(obj))
    uri = f"tokens:{folder}"
    with pytest.raises(DataError, match="only plain data") as info:
        load_corpus(uri, tmp_path / "cache")
    message = str(info.value)
    assert str(folder / "meta.pkl") in message and uri in message
    expected = "sweep.data.errors.DataError" if payload == "class" else "system"
    assert expected in message
    assert not marker.exists()
    with pytest.raises(DataError, match="only plain data"):
        check_corpus(uri)
    assert not marker.exists()


def test_the_malicious_pickle_does_run_code_under_plain_pickle(tmp_path):
    """The payload above is real: plain pickle.loads runs it (so the test can fail)."""
    marker = tmp_path / "pwned"
    pickle.loads(pickle.dumps(_RunsCode(marker)))  # noqa: S301
    assert marker.exists()


# ------------------------------------------------------------------ checks without reading
@pytest.mark.parametrize(("uri", "message"), [
    ("stdlib", "expected scheme"),
    ("ftp:somewhere", "unknown scheme"),
    ("builtin:python-stdlib?max_bytes=0", "max_bytes=0"),
    ("text:/nonexistent/corpus.txt", "does not exist"),
    ("tokens:/nonexistent/folder", "does not exist"),
    ("synthetic:markov?vocab=1", "vocab=1"),
    ("synthetic:copy?length=0", "length >= 1"),
    ("synthetic:markov?temperature=2", "unknown parameter"),
])
def test_check_corpus_refuses_what_load_corpus_refuses(tmp_path, uri, message):
    with pytest.raises(DataError, match=message):
        check_corpus(uri)
    with pytest.raises(DataError, match=message):
        load_corpus(uri, tmp_path)


def test_check_corpus_reads_no_content_and_writes_nothing(tmp_path):
    (tmp_path / "c.txt").write_bytes(b"abc" * 100)
    folder = tmp_path / "tok"
    _write_tokens(folder, [1, 900] * 10, [1] * 10, meta={"vocab_size": 16})
    before = sorted(tmp_path.rglob("*"))
    check_corpus(f"text:{tmp_path / 'c.txt'}")
    check_corpus("synthetic:markov?vocab=16&tokens=1000000000")  # never generated
    check_corpus(f"tokens:{folder}")  # id 900 beyond the vocab is load_corpus's to find
    check_corpus("builtin:python-stdlib")
    assert sorted(tmp_path.rglob("*")) == before
    with pytest.raises(DataError, match="beyond vocab_size=16"):
        load_corpus(f"tokens:{folder}", tmp_path / "cache")
