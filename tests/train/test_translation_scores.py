"""Tests of m2l_nlp.train.translation_scores: BLEU and chrF against every reference."""

from __future__ import annotations

import pytest

from m2l_nlp.train.translation_scores import score


def test_perfect_translation_scores_100():
    refs = [["Σ' αγαπώ πολύ, Μαρία."], ["Πώς είσαι σήμερα;", "Τι κάνεις σήμερα;"]]
    scores = score(["Σ' αγαπώ πολύ, Μαρία.", "Τι κάνεις σήμερα;"], refs)
    assert scores.bleu == pytest.approx(100) and scores.chrf == pytest.approx(100)
    assert "tok:13a" in scores.bleu_signature and "nrefs:var" in scores.bleu_signature
    assert "nc:6" in scores.chrf_signature


def test_scores_use_every_reference():
    hyps = ["Τι κάνεις σήμερα;", "Καλημέρα σας."]
    one = score(hyps, [["Πώς είσαι σήμερα;"], ["Καλημέρα."]])
    more = score(hyps, [["Πώς είσαι σήμερα;", "Τι κάνεις σήμερα;"], ["Καλημέρα."]])
    assert more.bleu > one.bleu and more.chrf > one.chrf
    with pytest.raises(ValueError, match="one list per hypothesis"):
        score(hyps, [["a"]])
    with pytest.raises(ValueError, match="at least one reference"):
        score(hyps, [["a"], []])
