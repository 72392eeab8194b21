"""Tests of m2l_nlp.data: every source kind, every error, the caches, on small local data."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import urllib.error
from pathlib import Path

import numpy as np
import pytest

from m2l_nlp import bigrams, data, tokenization


def _tar_from_folder(folder: Path, out: Path, extra: dict[str, bytes] | None = None) -> Path:
    """Write ``folder`` (an aclImdb/ tree) as ``out`` (.tar.gz), plus ``extra`` members."""
    with tarfile.open(out, "w:gz") as tar:
        tar.add(folder, arcname="aclImdb")
        for name, payload in (extra or {}).items():
            info = tarfile.TarInfo(name)
            info.size = len(payload)
            tar.addfile(info, io.BytesIO(payload))
    return out


@pytest.fixture(scope="module")
def archive(tmp_path_factory) -> Path:
    """The bundled small dataset as a .tar.gz, with an unsup/ review and other files."""
    out = tmp_path_factory.mktemp("archive") / "aclImdb_v1.tar.gz"
    extra = {
        "aclImdb/train/unsup/0_0.txt": b"an unlabeled review that must never be read",
        "aclImdb/train/labeledBow.feat": b"0:1 1:2\n" * 100,
        "aclImdb/README": b"readme",
    }
    return _tar_from_folder(data.SMALL_DATA, out, extra)


@pytest.fixture(autouse=True)
def isolated(tmp_path, monkeypatch):
    """No test reads the user's environment or writes into the repository's data/."""
    monkeypatch.delenv(data.SOURCE_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(data, "DATA_DIR", tmp_path / "downloads")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*")) if folder.exists() else []


# --------------------------------------------------------------------------- sources


def test_folder_source_gives_labeled_frames():
    train, test = data.load_imdb(data.SMALL_DATA)
    assert list(train.columns) == ["text", "label"]
    assert (len(train), len(test)) == (1000, 500)
    assert set(train["label"]) == {0, 1} and train["label"].sum() == 500
    assert not any("<br" in t for t in train["text"])  # <br /> became newlines
    assert any("\n\n" in t for t in train["text"])
    # label 1 = pos: the positive folder's first review is in the frame with label 1
    pos_text = (data.SMALL_DATA / "train" / "pos").glob("0_*.txt").__next__().read_text()
    row = train[train["text"] == data.clean_text(pos_text)]
    assert list(row["label"]) == [1]


def test_parent_folder_and_archive_and_env_give_the_same_frames(archive, monkeypatch):
    ref_train, ref_test = data.load_imdb(data.SMALL_DATA, seed=3)
    for source in (data.SMALL_DATA.parent, archive):
        train, test = data.load_imdb(source, seed=3, use_cache=False)
        assert train.equals(ref_train) and test.equals(ref_test), source
    monkeypatch.setenv(data.SOURCE_ENV, str(archive))
    train, _ = data.load_imdb(seed=3)
    assert train.equals(ref_train)


def test_seed_shuffles_reproducibly():
    a, _ = data.load_imdb(data.SMALL_DATA, seed=0)
    b, _ = data.load_imdb(data.SMALL_DATA, seed=0)
    c, _ = data.load_imdb(data.SMALL_DATA, seed=1)
    unshuffled, _ = data.load_imdb(data.SMALL_DATA, seed=None)
    assert a.equals(b) and not a.equals(c)
    assert sorted(a["text"]) == sorted(c["text"])
    assert list(unshuffled["label"][:500]) == [0] * 500  # neg first, then pos: no shuffle


def test_unsup_is_never_read_nor_extracted(archive, tmp_path):
    train, _ = data.load_imdb(archive, use_cache=False)
    assert len(train) == 1000
    assert not train["text"].str.contains("unlabeled review").any()
    folder = data.extract_imdb(archive, tmp_path / "out")
    assert folder == tmp_path / "out" / "aclImdb"
    assert sorted(p.name for p in folder.iterdir()) == ["test", "train"]
    assert sorted(p.name for p in (folder / "train").iterdir()) == ["neg", "pos"]
    assert len(list(folder.rglob("*.txt"))) == 1500
    assert _leftovers(tmp_path / "out") == []
    with pytest.raises(FileExistsError, match="already exists"):
        data.extract_imdb(archive, tmp_path / "out")


def test_plain_tar_and_pax_long_names(tmp_path):
    root = tmp_path / "src" / ("x" * 120) / "aclImdb"  # > 100 chars: pax/GNU long names
    for split in data.SPLITS:
        for label in data.LABELS:
            (root / split / label).mkdir(parents=True)
            (root / split / label / f"1_{7 if label == 'pos' else 2}.txt").write_text(
                f"{split} {label} review"
            )
    for fmt in (tarfile.PAX_FORMAT, tarfile.GNU_FORMAT):
        out = tmp_path / f"plain-{fmt}.tar"
        with tarfile.open(out, "w", format=fmt) as tar:
            tar.add(root, arcname=f"{'x' * 120}/aclImdb")
        train, test = data.load_imdb(out, seed=None, use_cache=False)
        assert list(train["text"]) == ["train neg review", "train pos review"]
        assert list(test["label"]) == [0, 1]


# --------------------------------------------------------------------------- download


def test_download_from_file_url_checks_and_renames(archive, tmp_path):
    dest = tmp_path / "dl"
    path = data.download_imdb(archive.as_uri(), dest, sha256=_sha(archive), progress=False)
    assert path == dest / archive.name and path.read_bytes() == archive.read_bytes()
    assert _leftovers(dest) == []


def test_default_source_downloads_the_official_url_once(archive, monkeypatch):
    monkeypatch.setattr(data, "IMDB_URL", archive.as_uri())
    monkeypatch.setattr(data, "IMDB_SHA256", _sha(archive))
    calls = []
    real_fetch = data._fetch
    monkeypatch.setattr(data, "_fetch", lambda *a, **k: calls.append(1) or real_fetch(*a, **k))
    train, test = data.load_imdb(progress=False)
    assert (len(train), len(test)) == (1000, 500)
    assert (data.DATA_DIR / "aclImdb_v1.tar.gz").is_file()
    data.load_imdb(progress=False)
    assert len(calls) == 1  # the second call reuses the completed download


def test_wrong_checksum_keeps_nothing(archive, tmp_path):
    dest = tmp_path / "dl"
    with pytest.raises(data.ChecksumError, match="expected 0000") as err:
        data.download_imdb(archive.as_uri(), dest, sha256="0" * 64, progress=False)
    assert data.SOURCE_ENV in str(err.value)
    assert list(dest.iterdir()) == []  # no final file and no temporary file


def test_damaged_official_download_is_refused(archive, monkeypatch):
    monkeypatch.setattr(data, "IMDB_URL", archive.as_uri())
    monkeypatch.setattr(data, "IMDB_SHA256", _sha(archive))
    data.DATA_DIR.mkdir(parents=True)
    (data.DATA_DIR / "aclImdb_v1.tar.gz").write_bytes(archive.read_bytes()[:-10] + b"x" * 10)
    with pytest.raises(data.ChecksumError, match="delete it and run again"):
        data.load_imdb(progress=False)


def test_no_network_says_what_to_do(monkeypatch, tmp_path):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(data.urllib.request, "urlopen", offline)
    with pytest.raises(data.DownloadError) as err:
        data.download_imdb(dest_dir=tmp_path / "dl", progress=False)
    message = str(err.value)
    assert "could not download" in message and "M2L_NLP_IMDB=/path" in message
    assert list((tmp_path / "dl").iterdir()) == []


def test_cut_download_is_an_error(monkeypatch, tmp_path):
    class Response(io.BytesIO):
        headers = {"Content-Length": "1000"}

    monkeypatch.setattr(data.urllib.request, "urlopen", lambda *a, **k: Response(b"x" * 10))
    with pytest.raises(data.DownloadError, match="stopped after 10 of 1000 bytes"):
        data.download_imdb(dest_dir=tmp_path / "dl", sha256=None, progress=False)
    assert list((tmp_path / "dl").iterdir()) == []


# --------------------------------------------------------------------------- bad data


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.999])
def test_truncated_archive(archive, tmp_path, keep):
    raw = archive.read_bytes()
    bad = tmp_path / "aclImdb_v1.tar.gz"
    bad.write_bytes(raw[: int(len(raw) * keep)])
    with pytest.raises(data.CorruptArchiveError, match="truncated or corrupt"):
        data.load_imdb(bad)
    with pytest.raises(data.CorruptArchiveError):
        data.extract_imdb(bad, tmp_path / "out")
    assert not (tmp_path / "out" / "aclImdb").exists() and _leftovers(tmp_path / "out") == []


def test_missing_gzip_trailer(archive, tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(archive.read_bytes()[:-4])  # all members intact, the length field cut
    with pytest.raises(data.CorruptArchiveError, match="truncated or corrupt"):
        data.load_imdb(bad)


def test_corrupt_archive(archive, tmp_path):
    raw = bytearray(archive.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 64] = bytes(64)
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bytes(raw))
    with pytest.raises(data.CorruptArchiveError, match="download it again"):
        data.load_imdb(bad)


def test_a_file_that_is_no_archive_is_named_so(tmp_path):
    """Not "download it again" (it may be the user's own file): it is not an archive."""
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(os.urandom(5000))
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    zipped = tmp_path / "notes.gz"
    zipped.write_bytes(gzip.compress(b"not a tar " * 100))
    for path in (junk, notes, tmp_path / "empty.tar"):
        path.touch()
        with pytest.raises(data.NotAnArchiveError, match=r"is not a \.tar or \.tar\.gz archive:"):
            data.load_imdb(path)
    with pytest.raises(data.NotAnArchiveError, match="nor is the gzip data in it a tar"):
        data.load_imdb(zipped)


def test_corrupt_tar_header(tmp_path):
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(data.SMALL_DATA, arcname="aclImdb")
    raw = bytearray(plain.read_bytes())
    raw[0] ^= 0x20  # the first member's name: only the header checksum can tell
    plain.write_bytes(bytes(raw))
    with pytest.raises(data.CorruptArchiveError, match="wrong checksum"):
        data.load_imdb(plain)


def test_folder_without_pos_neg(tmp_path):
    (tmp_path / "aclImdb" / "train" / "pos").mkdir(parents=True)
    (tmp_path / "aclImdb" / "train" / "pos" / "0_9.txt").write_text("fine")
    (tmp_path / "aclImdb" / "test" / "reviews").mkdir(parents=True)
    with pytest.raises(data.DatasetLayoutError) as err:
        data.load_imdb(tmp_path / "aclImdb")
    message = str(err.value)
    assert "train/neg" in message and "test/pos" in message and "test/neg" in message
    assert "train/pos" not in message.split("no reviews in")[1].split(".")[0]


def test_archive_without_reviews(tmp_path):
    folder = tmp_path / "stuff"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello")
    out = tmp_path / "stuff.tar.gz"
    with tarfile.open(out, "w:gz") as tar:
        tar.add(folder, arcname="stuff")
    with pytest.raises(data.DatasetLayoutError, match="aclImdb layout"):
        data.load_imdb(out)


def test_missing_source(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data.load_imdb(tmp_path / "nope.tar.gz")
    monkeypatch.setenv(data.SOURCE_ENV, str(tmp_path / "gone"))
    with pytest.raises(FileNotFoundError, match=f"from {data.SOURCE_ENV}"):
        data.load_imdb()


# --------------------------------------------------------------------------- caches


def test_parsed_texts_are_cached(archive, monkeypatch, tmp_path):
    calls = []
    real = data.read_reviews
    monkeypatch.setattr(data, "read_reviews", lambda p: calls.append(p) or real(p))
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


def test_prepare_imdb_with_interleaved_bigram_tokens(tmp_path):
    cache = tmp_path / "prep"
    kw = dict(vocab_size=300, seq_len=48, cache_dir=cache, bigram_tokens=50)
    merged = data.prepare_imdb(data.SMALL_DATA, **kw)
    inter = data.prepare_imdb(data.SMALL_DATA, **kw, bigram_mode="interleave")
    assert not inter.from_cache and inter.bigram_mode == "interleave"
    assert merged.bigram_mode == "merge"
    np.testing.assert_array_equal(inter.bigram_table, merged.bigram_table)  # same pairs
    assert inter.seq_len == 48 and inter.vocab_size == merged.vocab_size
    base = merged.tokenizer.get_vocab_size()
    # the same reviews, each token followed by its pair id: dropping the pairs gives the tokens
    plain = data.prepare_imdb(data.SMALL_DATA, vocab_size=300, seq_len=48, cache_dir=cache)
    for i in range(5):
        real = inter.train_ids[i, inter.train_mask[i] == 1]
        tokens = real[real < base]
        assert tokens.tolist() == plain.train_ids[i, : len(tokens)].tolist()
        assert (real >= base).any() and len(real) == 48  # long reviews are cut at seq_len
    again = data.prepare_imdb(data.SMALL_DATA, **kw, bigram_mode="interleave")
    assert again.from_cache and again.bigram_mode == "interleave"
    np.testing.assert_array_equal(again.test_ids, inter.test_ids)
    np.testing.assert_array_equal(again.test_mask, inter.test_mask)
    with pytest.raises(ValueError, match="bigram_mode must be one of"):
        data.prepare_imdb(data.SMALL_DATA, **kw, bigram_mode="between")
