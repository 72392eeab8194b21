"""Tests of m2l_nlp.data: the frames, the cleanup, the caches, the prepared arrays, on small
local data (the sources and their errors: test_imdb_archive.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import tarfile
from pathlib import Path

import numpy as np
import pytest

from m2l_nlp.data import bigrams, imdb_archive, tokenization
from m2l_nlp.data import pipeline as data
from m2l_nlp.data.splits import shuffle_order


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """The bundled small dataset as a .tar.gz."""
    out = tmp_path_factory.mktemp("archive") / "aclImdb_v1.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(data.SMALL_DATA, arcname="aclImdb")
    return out


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No test reads the user's environment or writes into the repository's data/."""
    monkeypatch.delenv(imdb_archive.SOURCE_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(imdb_archive, "DATA_DIR", tmp_path / "downloads")


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*")) if folder.exists() else []


# --------------------------------------------------------------------------- frames


def test_folder_source_gives_labeled_frames():
    train, test = data.load_imdb(data.SMALL_DATA)
    assert list(train.columns) == ["text", "label"]
    assert (len(train), len(test)) == (1000, 500)
    assert set(train["label"]) == {0, 1} and train["label"].sum() == 500
    assert not any("<br" in t for t in train["text"])  # <br /> became newlines
    assert any("\n\n" in t for t in train["text"])
    # label 1 = pos: the positive folder's first review is in the frame with label 1
    pos_text = (data.SMALL_DATA / "train" / "pos").glob("0_*.txt").__next__().read_text()
    row = train[train["text"] == imdb_archive.clean_text(pos_text)]
    assert list(row["label"]) == [1]


def test_pandas_is_imported_only_to_make_a_frame():
    """Every grading run, worker and CLI call imports this module; pandas (a quarter of a
    second) is left to the callers that load IMDB as data frames."""
    script = (
        "import sys\nfrom m2l_nlp.data import pipeline\n"
        "import m2l_nlp.grading.local.pytest_plugin\n"
        "print('pandas' in sys.modules); pipeline.load_imdb(pipeline.SMALL_DATA, "
        "progress=False, use_cache=False); print('pandas' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.stdout.split() == ["False", "True"], done.stderr[-2000:]


def test_seed_shuffles_reproducibly():
    a, _ = data.load_imdb(data.SMALL_DATA, seed=0)
    b, _ = data.load_imdb(data.SMALL_DATA, seed=0)
    c, _ = data.load_imdb(data.SMALL_DATA, seed=1)
    unshuffled, _ = data.load_imdb(data.SMALL_DATA, seed=None)
    assert a.equals(b) and not a.equals(c)
    assert sorted(a["text"]) == sorted(c["text"])
    assert list(unshuffled["label"][:500]) == [0] * 500  # neg first, then pos: no shuffle
    # row r of a shuffled split is review shuffle_order[r] in file order
    order = shuffle_order(len(unshuffled), 1)
    assert list(c["text"]) == list(unshuffled["text"].iloc[order])


# --------------------------------------------------------------------------- caches


def test_parsed_texts_are_cached(archive, monkeypatch, tmp_path):
    calls = []
    real = imdb_archive.read_reviews
    monkeypatch.setattr(imdb_archive, "read_reviews", lambda p: calls.append(p) or real(p))
    first = data.load_imdb(archive)
    second = data.load_imdb(archive)
    assert len(calls) == 1
    assert all(a.equals(b) for a, b in zip(first, second, strict=True))
    cache_files = list(Path(os.environ[data.CACHE_ENV]).glob("imdb-texts-*.npz"))
    assert len(cache_files) == 1
    cache_files[0].write_bytes(b"damaged")  # a damaged cache is rebuilt, not trusted
    third = data.load_imdb(archive)
    assert len(calls) == 2 and third[0].equals(first[0])


def test_prepare_imdb_encodes_and_reuses_the_cache(monkeypatch, tmp_path):
    trained = []
    real_train = tokenization.train_tokenizer
    monkeypatch.setattr(
        tokenization, "train_tokenizer", lambda *a, **k: trained.append(1) or real_train(*a, **k)
    )
    cache = tmp_path / "prep"
    first = data.prepare_imdb(data.SMALL_DATA, vocab_size=400, seq_len=64, cache_dir=cache)
    assert not first.from_cache and len(trained) == 1
    assert first.train_ids.shape == first.train_mask.shape == (1000, 64)
    assert first.test_ids.shape == (500, 64) and first.test_labels.shape == (500,)
    for name in ("train_ids", "train_mask", "train_labels", "test_ids", "test_mask"):
        assert getattr(first, name).dtype == np.int32, name
    assert np.all(first.train_ids[first.train_mask == 0] == tokenization.PAD_ID)
    assert first.train_mask[:, 0].all()  # every review has tokens
    # rows line up with load_imdb's order for the same seed, encoded by the returned tokenizer
    train, _ = data.load_imdb(data.SMALL_DATA, seed=0)
    ids, mask = tokenization.batch_encode(first.tokenizer, train["text"][:20], seq_len=64)
    np.testing.assert_array_equal(ids, first.train_ids[:20])
    np.testing.assert_array_equal(first.train_labels, train["label"])

    second = data.prepare_imdb(data.SMALL_DATA, vocab_size=400, seq_len=64, cache_dir=cache)
    assert second.from_cache and len(trained) == 1  # nothing trained the second time
    for name in ("train_ids", "train_mask", "train_labels", "test_ids", "test_mask"):
        np.testing.assert_array_equal(getattr(first, name), getattr(second, name))
        assert getattr(second, name).dtype == np.int32
    assert second.tokenizer.to_str() == first.tokenizer.to_str()
    assert "train=1000" in repr(second)

    other = data.prepare_imdb(data.SMALL_DATA, vocab_size=400, seq_len=32, cache_dir=cache)
    assert not other.from_cache and len(trained) == 2  # other settings: another cache entry
    assert _leftovers(cache) == []

    (second.cache_path / "arrays.npz").unlink()  # emptied by hand: rebuilt, and saved again
    third = data.prepare_imdb(data.SMALL_DATA, vocab_size=400, seq_len=64, cache_dir=cache)
    assert not third.from_cache and (third.cache_path / "arrays.npz").is_file()
    fourth = data.prepare_imdb(data.SMALL_DATA, vocab_size=400, seq_len=64, cache_dir=cache)
    assert fourth.from_cache and len(trained) == 3


def test_prepare_imdb_without_cache_writes_nothing(tmp_path):
    out = data.prepare_imdb(
        data.SMALL_DATA, vocab_size=300, seq_len=16, cache_dir=tmp_path / "c", use_cache=False
    )
    assert out.train_ids.shape == (1000, 16) and out.cache_path is None
    assert not (tmp_path / "c").exists()


def test_bundled_dataset_matches_its_generator():
    import importlib.util

    path = data.SMALL_DATA.parent.parent / "make_small.py"
    spec = importlib.util.spec_from_file_location("make_small", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--check", "--out", str(data.SMALL_DATA)]) == 0


def test_a_preset_prepares_the_data_at_its_own_sizes(tmp_path):
    from m2l_nlp.config import PRESETS

    demo = PRESETS["demo"]
    out = data.prepare_for(demo, "small", cache_dir=tmp_path / "c", progress=False)
    assert out.train_ids.shape == (1000, demo.seq_len)
    assert out.tokenizer.get_vocab_size() <= demo.vocab_size + (demo.bigram_tokens or 0)
    assert data.compilation_cache_dir() == tmp_path / "cache" / "jax"  # beside the data


def test_prepare_imdb_with_bigram_tokens(tmp_path):
    cache = tmp_path / "prep"
    plain = data.prepare_imdb(data.SMALL_DATA, vocab_size=300, seq_len=32, cache_dir=cache)
    first = data.prepare_imdb(
        data.SMALL_DATA, vocab_size=300, seq_len=32, cache_dir=cache, bigram_tokens=50
    )
    assert not first.from_cache  # its own cache entry
    base = plain.tokenizer.get_vocab_size()
    assert first.bigram_table.shape == (50, 2) and plain.bigram_table is None
    assert first.vocab_size == base + 50 and first.seq_len == 32
    # the table is fitted on the train split; the test split is only encoded with it
    table = bigrams.fit_bigram_table(plain.train_ids, plain.train_mask, 50, base)
    np.testing.assert_array_equal(first.bigram_table, table)
    for split in ("train", "test"):
        mask = getattr(plain, f"{split}_mask")
        ids = bigrams.merge_bigram_tokens(getattr(plain, f"{split}_ids"), mask, table, base)
        np.testing.assert_array_equal(getattr(first, f"{split}_ids"), ids)
        np.testing.assert_array_equal(getattr(first, f"{split}_mask"), mask)
    second = data.prepare_imdb(
        data.SMALL_DATA, vocab_size=300, seq_len=32, cache_dir=cache, bigram_tokens=50
    )
    assert second.from_cache
    np.testing.assert_array_equal(second.bigram_table, first.bigram_table)
    np.testing.assert_array_equal(second.train_ids, first.train_ids)
    np.testing.assert_array_equal(second.test_mask, first.test_mask)
    assert second.vocab_size == first.vocab_size
