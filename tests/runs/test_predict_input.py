"""Tests of m2l_nlp.runs.predict_input: the reviews ``m2l-nlp predict`` scores (the refusals,
one line each through the command line, are in tests/test_cli.py)."""

from __future__ import annotations

import io
import os
import sys

import pytest

from m2l_nlp.runs.predict_input import InputError, read_reviews


def test_arguments_then_whole_files_then_standard_input(tmp_path, monkeypatch):
    review = tmp_path / "review.txt"
    review.write_text("A slow start.\n\nThen a wonderful film.\n", encoding="utf-8")
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO("Très bien.".encode())))
    got = read_reviews(["Great.", "Dull."], [str(review), "-"])
    assert got == ["Great.", "Dull.", "A slow start.\n\nThen a wonderful film.\n", "Très bien."]


def test_the_review_that_cannot_be_scored_is_named(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text(" \n")
    with pytest.raises(InputError, match=f"^{empty} is empty"):
        read_reviews(["Great."], [str(empty)])
    with pytest.raises(InputError, match="^review 2 is empty"):
        read_reviews(["Great.", "\t"], [])


def test_a_review_is_read_no_further_than_the_limit(tmp_path, monkeypatch):
    """A file, standard input or an argument above --max-mb is refused; an endless file
    (/dev/zero) is read one byte past the limit, not until memory runs out."""
    big = tmp_path / "big.txt"
    big.write_bytes(b"a" * (10**6 + 1))
    with pytest.raises(InputError, match=f"^{big} is larger than 1 MB.*--max-mb"):
        read_reviews([], [str(big)], max_mb=1)
    assert read_reviews([], [str(big)], max_mb=2) == ["a" * (10**6 + 1)]
    stdin = io.BytesIO(b"b" * (10**6 + 1))
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(stdin))
    with pytest.raises(InputError, match="^standard input is larger than 1 MB"):
        read_reviews([], ["-"], max_mb=1)
    assert stdin.tell() == 10**6 + 1  # and no further
    with pytest.raises(InputError, match="^review 1 is larger than 1 MB"):
        read_reviews(["é" * (10**6 // 2 + 1)], [], max_mb=1)  # 2 bytes each in UTF-8


def test_an_endless_file_is_refused_at_the_default_limit():
    endless = "/dev/zero"
    if not os.path.exists(endless):
        pytest.skip("no /dev/zero here")
    with pytest.raises(InputError, match="larger than 10 MB"):
        read_reviews([], [endless])
