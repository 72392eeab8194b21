"""Tests of m2l_nlp.runs.classifier: the sentiment classifier as a kind of run (its
validation split, its checks before any data are read, its setup, scores, checkpoint and
summary), on the tiny classifier of tests/conftest.py and random reviews."""

from __future__ import annotations

import types

import numpy as np
import pytest

from m2l_nlp.config import PRESETS, BaselineConfig
from m2l_nlp.data.imdb_archive import MissingSourceError
from m2l_nlp.model import classifiers as models
from m2l_nlp.runs import checkpoint, classifier
from m2l_nlp.runs.classifier import KIND, resolve_val_size
from m2l_nlp.runs.kinds import Context
from m2l_nlp.train import metrics
from m2l_nlp.train.metrics import EvalResult


def test_final_fit_trains_on_the_validation_reviews_only_when_reporting_test_accuracy():
    default, unigram = PRESETS["default"], PRESETS["unigram"]
    assert default.final_fit and not unigram.final_fit
    assert resolve_val_size(default, None, no_test=False, n_train=25000) == 0
    assert resolve_val_size(default, None, no_test=True, n_train=25000) == 2500
    assert resolve_val_size(default, 1000, no_test=False, n_train=25000) == 1000
    assert resolve_val_size(unigram, None, no_test=False, n_train=25000) == 2500
    assert resolve_val_size(unigram, None, no_test=False, n_train=1000) == 200
    with pytest.raises(ValueError, match="leaves nothing to train on"):
        resolve_val_size(default, 25000, no_test=False, n_train=25000)
    with pytest.raises(ValueError, match="needs a validation split"):
        resolve_val_size(default, 0, no_test=True, n_train=25000)


def _request(**changes):
    asked = dict(preset=PRESETS["default"], val_size=None, no_test=False, impl="solutions")
    return types.SimpleNamespace(**{**asked, "data": "small", **changes})


def test_check_refuses_a_request_before_any_data_are_read(tmp_path):
    assert KIND.check(_request()) is None
    with pytest.raises(ValueError, match="needs a validation split"):
        KIND.check(_request(val_size=0, no_test=True))
    with pytest.raises(MissingSourceError, match="does not exist"):
        KIND.check(_request(data=str(tmp_path / "aclImdb_v1.tar.gz")))
    with pytest.raises(NotImplementedError):  # the stubs of practical 2, named first
        KIND.check(_request(impl="exercises", data=str(tmp_path / "missing")))


def _data(random_split, tiny_config):
    ids, mask, labels = random_split(60, seed=1)
    test_ids, test_mask, test_labels = random_split(20, seed=2)
    return types.SimpleNamespace(
        train_ids=ids,
        train_mask=mask,
        train_labels=labels,
        test_ids=test_ids,
        test_mask=test_mask,
        test_labels=test_labels,
        shuffle_seed=None,
        vocab_size=tiny_config.vocab_size,
        seq_len=tiny_config.max_len,
        cache_path="/cache/imdb-prepared-tiny",
    )


@pytest.fixture
def tiny_setup(tiny_model, tiny_config, tiny_params, random_split, monkeypatch):
    """The kind's setup of the default preset on 60 random reviews, its model the tiny one."""
    monkeypatch.setattr(
        models, "init_for_preset", lambda *args: (tiny_model, tiny_config, tiny_params, None)
    )
    data = _data(random_split, tiny_config)
    said = []
    run = Context(0, "solutions", 12, False, False, said.append, PRESETS["default"].settings())
    return KIND.setup(PRESETS["default"], data, run), data, run, said


def test_setup_holds_out_the_validation_reviews_and_says_so(tiny_setup, tiny_params):
    setup, data, _, said = tiny_setup
    assert len(setup.train_data[2]) == 48 and len(setup.eval_data[2]) == 12
    assert setup.objective == metrics.BINARY and setup.params is tiny_params
    assert setup.fingerprint == dict(val_size=12, data="imdb-prepared-tiny")
    assert setup.metrics == dict(val_size=12)
    assert said == [
        "data: 48 train / 12 validation / 20 test reviews, vocabulary 50, up to 48 tokens"
    ]


def test_finish_scores_the_test_reviews_once_unless_told_not_to(tiny_setup):
    setup, data, run, _ = tiny_setup
    validation = EvalResult(0.75, 0.5, np.eye(2, dtype=int), 12)
    scores = KIND.finish(setup, setup.params, validation, data, run)
    assert scores["val_accuracy"] == 0.75
    assert scores["test"].count == 20 and scores["test_accuracy"] == scores["test"].accuracy
    assert sum(map(sum, scores["confusion"])) == 20
    assert KIND.finish(setup, setup.params, None, data, run._replace(no_test=True)) == {}


def _result(test, config, history=None):
    return types.SimpleNamespace(
        test=test, config=config, history=history or {}, metrics={"best_epoch": 2}
    )


def test_save_writes_a_checkpoint_for_a_tested_transformer_only(tmp_path, monkeypatch):
    saved = []
    monkeypatch.setattr(checkpoint, "save_run", lambda *args, **kwargs: saved.append(kwargs))
    data = types.SimpleNamespace(tokenizer="tokenizer", bigram_table=[(5, 7)])
    run = Context(0, "solutions", None, False, False, print, "settings")
    test = EvalResult(0.5, 0.7, np.eye(2, dtype=int), 2)
    transformer = PRESETS["default"].model_config()
    for result in (_result(test, transformer), _result(None, transformer)):
        KIND.save(tmp_path, result, data, run)
    KIND.save(tmp_path, _result(test, BaselineConfig()), data, run)
    assert [kwargs["checkpoint"] for kwargs in saved] == [True, False, False]
    assert saved[0]["bigram_table"] == [(5, 7)]


def test_summary_gives_the_validation_curve_and_the_test_confusion():
    history = {"val_acc": [0.5, 0.625]}
    untested = KIND.summary(_result(None, None, history))
    assert untested == [
        "validation accuracy per epoch (%): 50.00, 62.50; kept epoch 2",
        "test set not evaluated: --no-test",
    ]
    test = EvalResult(0.75, 0.5, np.array([[3, 1], [1, 3]]), 8)
    lines = KIND.summary(_result(test, None))
    assert lines[0] == "test accuracy: 0.7500 (8 reviews), loss 0.5000"
    assert lines[2].splitlines()[1] == "  true neg         3         1"


def test_the_kind_is_the_classifiers():
    assert classifier.KIND.name == checkpoint.CLASSIFIER
    assert isinstance(classifier.KIND, classifier.Classifier)


def test_prepare_reads_the_requests_data_with_its_seed_and_cache(tmp_path, monkeypatch):
    from m2l_nlp.data import pipeline

    asked = []
    monkeypatch.setattr(
        pipeline, "prepare_for", lambda *args, **kwargs: asked.append((args, kwargs))
    )
    request = _request(seed=3, cache_dir=tmp_path, progress=False)
    KIND.prepare(request)
    assert asked == [((request.preset, "small"), dict(seed=3, cache_dir=tmp_path, progress=False))]
