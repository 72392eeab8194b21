"""Tests of m2l_nlp.data.tatoeba (the pairs: sources, strict reading, the component split,
references), on the bundled excerpt and small files written here."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

from m2l_nlp.data import imdb_archive, tatoeba
from m2l_nlp.data.tatoeba import Pair

ROOT = Path(__file__).resolve().parents[2]


def _write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


@pytest.fixture(scope="module")
def small(tatoeba_small: list[Pair]) -> list[Pair]:
    return tatoeba_small


# --------------------------------------------------------------------------- reading


def test_reads_bom_crlf_and_a_quote_at_the_start_of_a_field(tmp_path):
    data = (
        '\ufeff1\t"Σ\' αγαπώ."\t2\t"I love you."\r\n'
        "3\t  Πώς είσαι;\t4\tHow are you? \r\n"
        "\r\n"  # a blank line is skipped
        "5\tΚαλημέρα.\t6\tGood morning."  # no line end at the end: still whole
    ).encode()
    pairs = tatoeba.read_pairs(_write(tmp_path / "p.tsv", data))
    assert pairs == [
        Pair('"I love you."', '"Σ\' αγαπώ."'),
        Pair("How are you?", "Πώς είσαι;"),
        Pair("Good morning.", "Καλημέρα."),
    ]


def test_sentences_are_nfc(tmp_path):
    decomposed = "Πω\u0301ς"  # omega + combining acute
    pairs = tatoeba.read_pairs(_write(tmp_path / "p.tsv", f"1\t{decomposed}\t2\tHow\n".encode()))
    assert pairs[0].el == "Πώς" and len(pairs[0].el) == 3


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (b"1\ta\t2\tb\n3\tc\t4\n", "line 2 has 3 tab-separated fields, expected 4"),
        (b"1\ta\t2\tb\t5\n", "line 1 has 5 tab-separated fields"),
        (b"1\ta\t2\tb\r\n3\tc", r"line 2 has 2 .* \(the file looks truncated\)"),
        (b"1\ta,2,b\n", "line 1 has 2 tab-separated fields"),  # a CSV
        (b"1\t \t2\tb\n", "line 1 has an empty sentence"),
        (b"", "holds no pairs"),
        (b"\xef\xbb\xbf\r\n\r\n", "holds no pairs"),
        (b"1\ta\t2\tb\n3\t\xe9t\xe9\t4\tsummer\n", r"not UTF-8 text \(byte 10, line 2\)"),
        # a copy that stopped short: zeros where the rest should be, or half a character
        (
            b"1\ta\t2\tb\n" + b"\0" * 64,
            r"damaged: it holds null bytes \(the first at byte 8, line 2",
        ),
        (b"1\ta\t2\tb\n\0\n3\tc\t4\td\n", "null bytes"),
        ("1\tΣ' αγαπώ.".encode()[:9], r"looks truncated: it ends in the middle of a character"),
    ],
)
def test_bad_files_are_refused_in_one_line(tmp_path, data, match):
    with pytest.raises(tatoeba.PairsFormatError, match=match) as err:
        tatoeba.read_pairs(_write(tmp_path / "p.tsv", data))
    assert "\n" not in str(err.value) and isinstance(err.value, imdb_archive.DataError)


def test_swapped_columns_are_refused_by_their_script(tmp_path, small):
    """Greek in the English column of most pairs: the file would train a Greek-to-English
    model under the English-to-Greek name."""
    swapped = "".join(f"1\t{p.en}\t2\t{p.el}\n" for p in small[:50]).encode()
    with pytest.raises(tatoeba.PairsFormatError, match="the columns look swapped") as err:
        tatoeba.read_pairs(_write(tmp_path / "swapped.tsv", swapped))
    assert "holds Greek in 50 of 50 pairs" in str(err.value) and "\n" not in str(err.value)
    # an English sentence that quotes a Greek word is no swap
    quoting = "".join(f"1\t{p.el}\t2\t{p.en}\n" for p in small[:50]) + "3\tάλφα\t4\tάλφα\n"
    assert len(tatoeba.read_pairs(_write(tmp_path / "right.tsv", quoting.encode()))) == 51


def test_greek_is_told_by_its_letters():
    assert tatoeba.is_greek("Σ' αγαπώ.") and tatoeba.is_greek("Ἀθῆναι")
    assert not tatoeba.is_greek("I love you.") and not tatoeba.is_greek("The letter α.")
    assert not tatoeba.is_greek("123 !?")


def test_bundled_excerpt(small):
    raw = tatoeba.SMALL_PAIRS.read_bytes()
    assert raw.startswith(b"\xef\xbb\xbf") and raw.count(b"\r\n") == raw.count(b"\n") == 3000
    assert len(small) == 3000


@pytest.mark.skipif(not tatoeba.SHARED_PAIRS.is_file(), reason="needs ../shared/data")
def test_bundled_excerpt_is_what_the_script_writes():
    script = ROOT / "data" / "make_small_tatoeba.py"
    env = {k: v for k, v in os.environ.items() if k != tatoeba.SOURCE_ENV}
    done = subprocess.run([sys.executable, script, "--check"], capture_output=True, env=env)
    assert done.returncode == 0, done.stderr


# --------------------------------------------------------------------------- sources


def test_resolve_routes(tmp_path, monkeypatch):
    mine = _write(tmp_path / "mine.tsv", b"1\ta\t2\tb\n")
    monkeypatch.delenv(tatoeba.SOURCE_ENV, raising=False)
    assert tatoeba.resolve_pairs("small") == tatoeba.SMALL_PAIRS
    assert tatoeba.resolve_pairs(mine) == tatoeba.resolve_pairs(str(mine)) == mine
    monkeypatch.setenv(tatoeba.SOURCE_ENV, str(mine))
    assert tatoeba.resolve_pairs() == mine
    monkeypatch.setenv(tatoeba.SOURCE_ENV, str(tmp_path / "gone.tsv"))
    with pytest.raises(imdb_archive.MissingSourceError, match=f"from {tatoeba.SOURCE_ENV}"):
        tatoeba.resolve_pairs()
    monkeypatch.delenv(tatoeba.SOURCE_ENV)
    monkeypatch.setattr(tatoeba, "SHARED_PAIRS", mine)
    assert tatoeba.resolve_pairs() == mine


@pytest.mark.parametrize("name", ["gone.tsv", "."])
def test_missing_source_says_what_to_do(tmp_path, name):
    with pytest.raises(imdb_archive.MissingSourceError) as err:
        tatoeba.resolve_pairs(tmp_path / name)
    message = str(err.value)
    assert f"{tatoeba.SOURCE_ENV}=/path/to/el-en.tsv" in message and "\n" not in message


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_unreadable_source(tmp_path):
    path = _write(tmp_path / "p.tsv", b"1\ta\t2\tb\n")
    path.chmod(0)
    with pytest.raises(imdb_archive.UnreadableSourceError, match="cannot read"):
        tatoeba.resolve_pairs(path)


@pytest.fixture
def offline_home(tmp_path, monkeypatch) -> Path:
    """No env var, no shared copy, ``data/`` in tmp, and the official URL a local file."""
    official = _write(tmp_path / "el-en.tsv", tatoeba.SMALL_PAIRS.read_bytes())
    monkeypatch.delenv(tatoeba.SOURCE_ENV, raising=False)
    monkeypatch.setattr(tatoeba, "SHARED_PAIRS", tmp_path / "no-shared.tsv")
    monkeypatch.setattr(imdb_archive, "DATA_DIR", tmp_path / "data")
    monkeypatch.setattr(tatoeba, "TATOEBA_URL", official.as_uri())
    monkeypatch.setattr(
        tatoeba, "TATOEBA_SHA256", hashlib.sha256(official.read_bytes()).hexdigest()
    )
    return official


def test_download_is_checked_kept_and_rechecked(offline_home, tmp_path):
    got = tatoeba.resolve_pairs(progress=False)
    assert got == tmp_path / "data" / "el-en.tsv"
    assert got.read_bytes() == offline_home.read_bytes()
    assert tatoeba.resolve_pairs(progress=False) == got  # reused
    got.write_bytes(got.read_bytes()[:-5])
    with pytest.raises(imdb_archive.ChecksumError, match="delete it and run again"):
        tatoeba.resolve_pairs(progress=False)


def test_wrong_download_keeps_nothing(offline_home, tmp_path, monkeypatch):
    monkeypatch.setattr(tatoeba, "TATOEBA_SHA256", "0" * 64)
    with pytest.raises(imdb_archive.ChecksumError, match="expected 0000") as err:
        tatoeba.resolve_pairs(progress=False)
    assert f"{tatoeba.SOURCE_ENV}=/path/to/el-en.tsv" in str(err.value)
    assert list((tmp_path / "data").iterdir()) == []


# --------------------------------------------------------------------------- splits


def test_component_split_leaks_no_sentence(small):
    split = tatoeba.split_pairs(small, seed=0)
    sides = {"train": split.train, "val": split.val, "test": split.test}
    for kind, field in (("english", "en"), ("greek", "el")):
        sets = {name: {getattr(p, field) for p in pairs} for name, pairs in sides.items()}
        assert not sets["train"] & sets["test"] and not sets["train"] & sets["val"]
        assert not sets["val"] & sets["test"]
        assert split.counts[kind] == {name: len(s) for name, s in sets.items()}
    assert sum(split.counts["pairs"].values()) == len(small)
    assert split.counts["pairs"]["test"] >= 0.1 * len(small) > split.counts["pairs"]["test"] - 40
    assert split.counts["pairs"]["val"] >= 0.05 * len(small)
    # each side keeps the file's order
    assert split.test == [p for p in small if p in set(split.test)]


def test_component_split_is_deterministic(small):
    first, again = tatoeba.split_pairs(small, seed=3), tatoeba.split_pairs(small, seed=3)
    assert first == again
    assert tatoeba.split_pairs(small, seed=4).test != first.test


def test_components_join_through_either_language():
    pairs = [Pair("a", "α"), Pair("b", "β"), Pair("a", "γ"), Pair("c", "γ"), Pair("d", "δ")]
    assert tatoeba._components(pairs).tolist() == [0, 1, 0, 0, 2]
    counts = tatoeba.split_pairs(pairs, val_fraction=0.0, test_fraction=0.5).counts
    assert sum(counts["components"].values()) == 3


def test_random_pair_split(small):
    train, test = tatoeba.random_pair_split(small, seed=0, test_fraction=0.1)
    assert len(test) == 300 and len(train) + len(test) == len(small)
    assert (train, test) == tatoeba.random_pair_split(small, seed=0, test_fraction=0.1)


def test_references_group_by_english_in_first_seen_order():
    pairs = [Pair("b", "β"), Pair("a", "α1"), Pair("b", "β2"), Pair("a", "α1"), Pair("b", "β")]
    assert tatoeba.references(pairs) == (["b", "a"], [["β", "β2"], ["α1"]])
