"""Tests of m2l_nlp.data.imdb_archive: every source kind, the download, every damaged or wrong
source and the error it raises, on small local data."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import urllib.error
from pathlib import Path

import pytest

from m2l_nlp.data import imdb_archive
from m2l_nlp.data import pipeline as data


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
    monkeypatch.delenv(imdb_archive.SOURCE_ENV, raising=False)
    monkeypatch.setenv(data.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(imdb_archive, "DATA_DIR", tmp_path / "downloads")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob(".*")) if folder.exists() else []


# --------------------------------------------------------------------------- sources


def test_parent_folder_and_archive_and_env_give_the_same_frames(archive, monkeypatch):
    ref_train, ref_test = data.load_imdb(data.SMALL_DATA, seed=3)
    for source in (data.SMALL_DATA.parent, archive):
        train, test = data.load_imdb(source, seed=3, use_cache=False)
        assert train.equals(ref_train) and test.equals(ref_test), source
    monkeypatch.setenv(imdb_archive.SOURCE_ENV, str(archive))
    train, _ = data.load_imdb(seed=3)
    assert train.equals(ref_train)


def test_unsup_is_never_read_nor_extracted(archive, tmp_path):
    train, _ = data.load_imdb(archive, use_cache=False)
    assert len(train) == 1000
    assert not train["text"].str.contains("unlabeled review").any()
    folder = imdb_archive.extract_imdb(archive, tmp_path / "out")
    assert folder == tmp_path / "out" / "aclImdb"
    assert sorted(p.name for p in folder.iterdir()) == ["test", "train"]
    assert sorted(p.name for p in (folder / "train").iterdir()) == ["neg", "pos"]
    assert len(list(folder.rglob("*.txt"))) == 1500
    assert _leftovers(tmp_path / "out") == []
    with pytest.raises(FileExistsError, match="already exists"):
        imdb_archive.extract_imdb(archive, tmp_path / "out")


def test_plain_tar_and_pax_long_names(tmp_path):
    root = tmp_path / "src" / ("x" * 120) / "aclImdb"  # > 100 chars: pax/GNU long names
    for split in imdb_archive.SPLITS:
        for label in imdb_archive.LABELS:
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
    path = imdb_archive.download_imdb(archive.as_uri(), dest, sha256=_sha(archive), progress=False)
    assert path == dest / archive.name and path.read_bytes() == archive.read_bytes()
    assert _leftovers(dest) == []


def test_default_source_downloads_the_official_url_once(archive, monkeypatch):
    monkeypatch.setattr(imdb_archive, "IMDB_URL", archive.as_uri())
    monkeypatch.setattr(imdb_archive, "IMDB_SHA256", _sha(archive))
    calls = []
    real_fetch = imdb_archive._fetch
    monkeypatch.setattr(
        imdb_archive, "_fetch", lambda *a, **k: calls.append(1) or real_fetch(*a, **k)
    )
    train, test = data.load_imdb(progress=False)
    assert (len(train), len(test)) == (1000, 500)
    assert (imdb_archive.DATA_DIR / "aclImdb_v1.tar.gz").is_file()
    data.load_imdb(progress=False)
    assert len(calls) == 1  # the second call reuses the completed download


def test_wrong_checksum_keeps_nothing(archive, tmp_path):
    dest = tmp_path / "dl"
    with pytest.raises(imdb_archive.ChecksumError, match="expected 0000") as err:
        imdb_archive.download_imdb(archive.as_uri(), dest, sha256="0" * 64, progress=False)
    assert imdb_archive.SOURCE_ENV in str(err.value)
    assert list(dest.iterdir()) == []  # no final file and no temporary file


def test_damaged_official_download_is_refused(archive, monkeypatch):
    monkeypatch.setattr(imdb_archive, "IMDB_URL", archive.as_uri())
    monkeypatch.setattr(imdb_archive, "IMDB_SHA256", _sha(archive))
    imdb_archive.DATA_DIR.mkdir(parents=True)
    (imdb_archive.DATA_DIR / "aclImdb_v1.tar.gz").write_bytes(
        archive.read_bytes()[:-10] + b"x" * 10
    )
    with pytest.raises(imdb_archive.ChecksumError, match="delete it and run again"):
        data.load_imdb(progress=False)


def test_no_network_says_what_to_do(monkeypatch, tmp_path):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("[Errno -3] Temporary failure in name resolution")

    monkeypatch.setattr(imdb_archive.urllib.request, "urlopen", offline)
    with pytest.raises(imdb_archive.DownloadError) as err:
        imdb_archive.download_imdb(dest_dir=tmp_path / "dl", progress=False)
    message = str(err.value)
    assert "could not download" in message and "M2L_NLP_IMDB=/path" in message
    assert list((tmp_path / "dl").iterdir()) == []


def test_cut_download_is_an_error(monkeypatch, tmp_path):
    class Response(io.BytesIO):
        headers = {"Content-Length": "1000"}

    monkeypatch.setattr(imdb_archive.urllib.request, "urlopen", lambda *a, **k: Response(b"x" * 10))
    with pytest.raises(imdb_archive.DownloadError, match="stopped after 10 of 1000 bytes"):
        imdb_archive.download_imdb(dest_dir=tmp_path / "dl", sha256=None, progress=False)
    assert list((tmp_path / "dl").iterdir()) == []


# --------------------------------------------------------------------------- bad data


@pytest.mark.parametrize("keep", [0.02, 0.5, 0.999])
def test_truncated_archive(archive, tmp_path, keep):
    raw = archive.read_bytes()
    bad = tmp_path / "aclImdb_v1.tar.gz"
    bad.write_bytes(raw[: int(len(raw) * keep)])
    with pytest.raises(imdb_archive.CorruptArchiveError, match="truncated or corrupt"):
        data.load_imdb(bad)
    with pytest.raises(imdb_archive.CorruptArchiveError):
        imdb_archive.extract_imdb(bad, tmp_path / "out")
    assert not (tmp_path / "out" / "aclImdb").exists() and _leftovers(tmp_path / "out") == []


def test_missing_gzip_trailer(archive, tmp_path):
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(archive.read_bytes()[:-4])  # all members intact, the length field cut
    with pytest.raises(imdb_archive.CorruptArchiveError, match="truncated or corrupt"):
        data.load_imdb(bad)


def test_corrupt_archive(archive, tmp_path):
    raw = bytearray(archive.read_bytes())
    middle = len(raw) // 2
    raw[middle : middle + 64] = bytes(64)
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(bytes(raw))
    with pytest.raises(imdb_archive.CorruptArchiveError, match="download it again"):
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
        with pytest.raises(
            imdb_archive.NotAnArchiveError, match=r"is not a \.tar or \.tar\.gz archive:"
        ):
            data.load_imdb(path)
    with pytest.raises(imdb_archive.NotAnArchiveError, match="nor is the gzip data in it a tar"):
        data.load_imdb(zipped)


def test_corrupt_tar_header(tmp_path):
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(data.SMALL_DATA, arcname="aclImdb")
    raw = bytearray(plain.read_bytes())
    raw[0] ^= 0x20  # the first member's name: only the header checksum can tell
    plain.write_bytes(bytes(raw))
    with pytest.raises(imdb_archive.CorruptArchiveError, match="wrong checksum"):
        data.load_imdb(plain)


def test_folder_without_pos_neg(tmp_path):
    (tmp_path / "aclImdb" / "train" / "pos").mkdir(parents=True)
    (tmp_path / "aclImdb" / "train" / "pos" / "0_9.txt").write_text("fine")
    (tmp_path / "aclImdb" / "test" / "reviews").mkdir(parents=True)
    with pytest.raises(imdb_archive.DatasetLayoutError) as err:
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
    with pytest.raises(imdb_archive.DatasetLayoutError, match="aclImdb layout"):
        data.load_imdb(out)


def test_missing_source(tmp_path, monkeypatch):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        data.load_imdb(tmp_path / "nope.tar.gz")
    monkeypatch.setenv(imdb_archive.SOURCE_ENV, str(tmp_path / "gone"))
    with pytest.raises(FileNotFoundError, match=f"from {imdb_archive.SOURCE_ENV}"):
        data.load_imdb()


def test_check_source_names_a_wrong_path_or_file_before_anything_is_read(
    archive, tmp_path, monkeypatch
):
    """A run checks its --data first: a missing path and a file that is no archive are named
    at once; an archive, a folder and a URL pass (a URL is checked as it downloads)."""
    assert imdb_archive.check_source(archive) == archive
    assert imdb_archive.check_source(data.SMALL_DATA) == data.SMALL_DATA
    assert imdb_archive.check_source("file:///x.tar.gz") == "file:///x.tar.gz"
    assert imdb_archive.check_source() == imdb_archive.IMDB_URL
    monkeypatch.setenv(imdb_archive.SOURCE_ENV, str(tmp_path / "gone"))
    with pytest.raises(imdb_archive.MissingSourceError, match=f"from {imdb_archive.SOURCE_ENV}"):
        imdb_archive.check_source()
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes\n")
    for path in (notes, tmp_path / "empty.tar"):
        path.touch()
        with pytest.raises(imdb_archive.NotAnArchiveError, match="not a .tar or .tar.gz"):
            imdb_archive.check_source(path)
    plain = tmp_path / "plain.tar"
    with tarfile.open(plain, "w") as tar:
        tar.add(data.SMALL_DATA / "train", arcname="aclImdb/train")
    assert imdb_archive.check_source(plain) == plain
