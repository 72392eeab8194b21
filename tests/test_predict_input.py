"""Tests of m2l_nlp.predict_input: the reviews ``m2l-nlp predict`` scores (the refusals,
one line each through the command line, are in tests/test_cli.py)."""

from __future__ import annotations

import io
import sys

import pytest

from m2l_nlp.predict_input import InputError, read_reviews


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
