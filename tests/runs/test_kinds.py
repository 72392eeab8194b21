"""Tests of m2l_nlp.runs.kinds: the registry of the kinds of run, what a kind brings by
default, and the test side's scores as every kind reads them (the end-to-end addition of a
kind is tests/e2e/test_contributor_new_practical.py)."""

from __future__ import annotations

import types

import pytest

from m2l_nlp import config
from m2l_nlp.config import PRESETS
from m2l_nlp.runs import kinds
from m2l_nlp.runs.checkpoint import CLASSIFIER, LANGUAGE_MODEL, TRANSLATOR
from m2l_nlp.runs.kinds import Context, Kind, Setup
from m2l_nlp.train import evaluation, metrics


def test_each_kind_is_found_by_its_name():
    assert set(kinds.KIND_MODULES) == {CLASSIFIER, LANGUAGE_MODEL, TRANSLATOR}
    for name in kinds.KIND_MODULES:
        kind = kinds.kind_named(name)
        assert isinstance(kind, Kind) and kind.name == name
    with pytest.raises(KeyError):
        kinds.kind_named("majority")


def test_each_preset_is_trained_by_the_kind_of_its_architecture():
    want = {config.TRANSFORMER: CLASSIFIER, config.LANGUAGE_MODEL: LANGUAGE_MODEL}
    want.update({config.TRANSLATION: TRANSLATOR}, **dict.fromkeys(config.BASELINES, CLASSIFIER))
    for preset in PRESETS.values():
        assert kinds.kind_of(preset).name == want[preset.architecture], preset
    with pytest.raises(ValueError, match="no kind of run trains the architecture 'majority'"):
        kinds.kind_of(types.SimpleNamespace(architecture="majority"))


def test_a_kind_brings_nothing_it_does_not_define():
    kind = Kind()
    assert kind.check(None) is None  # no request refused
    assert kind.summary(None) == []
    for step, args in [
        (kind.prepare, (None,)),
        (kind.setup, (None, None, None)),
        (kind.finish, (None, None, None, None, None)),
        (kind.save, (None, None, None, None)),
    ]:
        with pytest.raises(NotImplementedError):
            step(*args)


def test_the_test_scores_are_the_evaluation_with_the_runs_settings(
    tiny_model, tiny_params, random_split
):
    split = random_split(24, seed=5)
    settings = PRESETS["default"].settings()
    setup = Setup(tiny_model, tiny_params, None, split, None, metrics.BINARY, {}, {})
    run = Context(0, "solutions", None, False, False, print, settings)
    scores = kinds.test_scores(setup, tiny_params, split, run)
    assert scores.count == 24 and scores.confusion.sum() == 24
    want = evaluation.evaluate(
        tiny_params, tiny_model, split, objective=metrics.BINARY, settings=settings
    )
    assert (scores.accuracy, scores.loss) == (want.accuracy, want.loss)
