"""Tests of m2l_nlp.model.retrieval: the nearest training sentence's translation."""

from __future__ import annotations

from m2l_nlp.data import tatoeba
from m2l_nlp.model.retrieval import RetrievalBaseline


def test_retrieval_finds_training_sentences(tatoeba_small):
    english, greek = tatoeba.references(tatoeba_small[:500])
    model = RetrievalBaseline(tatoeba_small[:500])
    assert model.translate(english) == [renderings[0] for renderings in greek]
    assert model.translate([english[0].upper()]) == [greek[0][0]]  # case is ignored
    assert model.translate(["\u2603 \u2603"])[0] in model.greek  # something, always
