"""Practical 1's graded checks pass on the reference and on nothing of the stubs; its
baselines, their features and their CLI. Its mutants, each a slip a student could make, are in
tests/mutants/practical1_baselines.py (run by test_mutants.py).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

from m2l_nlp.grading import check
from m2l_nlp.grading.practicals.practical1 import features as graded
from m2l_nlp.impl import load_practical, repo_root

PRACTICAL = "practical1_baselines"
EXERCISES = {
    "multi_hot": ("multi_hot",),
    "bag_of_bigrams": ("bigram_ids", "bag_of_bigrams"),
    "tfidf": ("fit_idf", "tfidf"),
    "mlp_classifier": ("MLPClassifier",),
    "lstm_classifier": ("LSTMClassifier",),
}


def _solution_source() -> str:
    return (repo_root() / "solutions" / f"{PRACTICAL}.py").read_text(encoding="utf-8")


def _load_copy(source: str, folder: Path, name: str):
    """Import ``source`` as a fresh module (a student's file, in effect)."""
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        sys.modules.pop(name, None)
    return module


def _grade(module, exercise: str):
    objects = {name: getattr(module, name) for name in EXERCISES[exercise]}
    return check(exercise, verbose=False, **objects)


def test_every_exercise_is_registered():
    from m2l_nlp.grading.checks.catalog import load_exercises

    mine = {n: ex for n, ex in load_exercises().items() if ex.practical == PRACTICAL}
    assert list(mine) == list(EXERCISES)
    for name, ex in mine.items():
        assert ex.targets == EXERCISES[name]
        assert len(ex.checks) >= 3


@pytest.mark.parametrize("exercise", list(EXERCISES))
def test_reference_passes(exercise, tmp_path):
    result = _grade(_load_copy(_solution_source(), tmp_path, "p1_reference_copy"), exercise)
    assert result.status == "passed", str(result)


def test_stub_is_not_started():
    stub = load_practical(PRACTICAL, "exercises")
    for exercise in EXERCISES:
        assert _grade(stub, exercise).status == "not started"


def test_hand_examples_agree_with_reference():
    """The literals in the graded checks were worked out by hand; the reference agrees."""
    ref = load_practical(PRACTICAL, "solutions")
    np.testing.assert_array_equal(
        ref.multi_hot(graded.HAND_IDS, graded.HAND_MASK, graded.HAND_V), graded.HAND_MULTI_HOT
    )
    buckets, pair_mask = ref.bigram_ids(
        graded.HAND_IDS, graded.HAND_MASK, graded.HAND_V, graded.HAND_BUCKETS
    )
    np.testing.assert_array_equal(buckets, graded.HAND_BIGRAMS)
    np.testing.assert_array_equal(pair_mask, graded.HAND_PAIR_MASK)
    np.testing.assert_array_equal(
        ref.bag_of_bigrams(graded.HAND_IDS, graded.HAND_MASK, graded.HAND_V, graded.HAND_BUCKETS),
        graded.HAND_BAG,
    )


# --------------------------------------------------------------------------- baselines


def test_baseline_config_validates():
    from m2l_nlp.config import BaselineConfig

    with pytest.raises(ValueError, match="choose one of"):
        BaselineConfig(model="svm")
    with pytest.raises(ValueError, match="p_dropout"):
        BaselineConfig(p_dropout=1.0)
    config = BaselineConfig(model="lstm", hidden_sizes=(8, 4))
    assert BaselineConfig.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("model", ["bow-mlp", "bigram-mlp", "lstm"])
def test_baseline_forward_shapes_and_padding(model):
    import jax

    from m2l_nlp.config import BaselineConfig
    from m2l_nlp.model.baselines import make_forward
    from m2l_nlp.transform import funcs_from_stateful

    config = BaselineConfig(model=model, num_buckets=64, hidden_sizes=(8,), hidden_size=8)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 50, size=(3, 12)).astype(np.int32)
    mask = (np.arange(12)[None, :] < np.array([[12], [7], [3]])).astype(np.int32)
    ids = ids * mask
    funcs = funcs_from_stateful(make_forward(config, vocab_size=50))
    params = funcs.init_params(jax.random.PRNGKey(0), ids, mask, True)
    logits = funcs.predict_fw(params, ids, mask)
    assert logits.shape == (3,)
    # More padding (with junk ids) does not change the logits.
    longer_ids = np.concatenate([ids, rng.integers(1, 50, size=(3, 5))], 1).astype(np.int32)
    longer_mask = np.concatenate([mask, np.zeros((3, 5), np.int32)], 1)
    np.testing.assert_allclose(funcs.predict_fw(params, longer_ids, longer_mask), logits, atol=1e-5)


def test_tfidf_forward_needs_idf_of_the_right_size():
    from m2l_nlp.config import BaselineConfig
    from m2l_nlp.model.baselines import make_forward

    config = BaselineConfig(model="bigram-mlp", num_buckets=64, use_tfidf=True)
    with pytest.raises(ValueError, match="idf"):
        make_forward(config, vocab_size=50)
    with pytest.raises(ValueError, match=r"\(114,\)"):
        make_forward(config, vocab_size=50, idf=np.ones(50, np.float32))


def test_batched_idf_equals_fit_idf():
    """The chunked document frequencies give the exercise's fit_idf on the dense matrix."""
    from m2l_nlp.config import BaselineConfig
    from m2l_nlp.model import baselines
    from m2l_nlp.model.baselines import featurizer, fit_baseline_idf

    config = BaselineConfig(model="bigram-mlp", num_buckets=32, use_tfidf=True)
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 40, size=(37, 10)).astype(np.int32)
    mask = (np.arange(10)[None, :] < rng.integers(1, 11, size=(37, 1))).astype(np.int32)
    ref = load_practical(PRACTICAL, "solutions")
    dense = np.asarray(featurizer(config, 40)(ids, mask))
    # A batch of 8 (not the default 256 > 37 reviews) so that the chunking is exercised.
    df = baselines.document_frequencies(featurizer(config, 40), ids, mask, batch_size=8)
    np.testing.assert_array_equal(df, (dense != 0).sum(0))
    np.testing.assert_allclose(
        baselines.idf_from_frequencies(df, len(ids)), ref.fit_idf(dense), rtol=1e-6
    )
    np.testing.assert_allclose(fit_baseline_idf(config, 40, ids, mask), ref.fit_idf(dense))


def test_baselines_read_a_notebooks_own_definitions():
    """``impl=globals()`` (a mapping) trains what the notebook's cells defined, not a file."""
    from m2l_nlp.config import BaselineConfig
    from m2l_nlp.model.baselines import featurizer

    ref = load_practical(PRACTICAL, "solutions")
    calls = []

    def multi_hot(ids, mask, vocab_size):
        calls.append(vocab_size)
        return ref.multi_hot(ids, mask, vocab_size)

    ids, mask = np.array([[3, 1, 0]], np.int32), np.array([[1, 1, 0]], np.int32)
    features = featurizer(BaselineConfig(model="bow-mlp"), 8, impl={"multi_hot": multi_hot})
    np.testing.assert_array_equal(features(ids, mask), ref.multi_hot(ids, mask, 8))
    assert calls == [8]
    bigrams = featurizer(BaselineConfig(model="bigram-mlp"), 8, impl={"multi_hot": multi_hot})
    with pytest.raises(AttributeError, match="`bag_of_bigrams` is not defined in the notebook"):
        bigrams(ids, mask)


def test_confusion_counts():
    from m2l_nlp.train.metrics import confusion_matrix as confusion

    labels = np.array([0, 0, 1, 1, 1])
    logits = np.array([-1.0, 2.0, 3.0, -0.5, 0.1])
    np.testing.assert_array_equal(confusion(labels, logits), [[1, 1], [1, 2]])


def test_cli_lists_every_baseline():
    from m2l_nlp import cli, config

    choices = next(
        a.choices
        for a in cli._parser()._subparsers._group_actions[0].choices["train"]._actions
        if a.dest == "model"
    )
    assert tuple(choices) == (config.TRANSFORMER, *config.BASELINES)
    assert all(config.PRESETS[name].architecture == name for name in config.BASELINES)


@pytest.mark.slow
def test_cli_trains_a_baseline_on_small_data(tmp_path, capsys):
    """`m2l-nlp train --model bow-mlp --data small` learns something and writes its metrics."""
    import json

    from m2l_nlp import cli

    out = tmp_path / "run"
    code = cli.main(
        [
            "train",
            "--model",
            "bow-mlp",
            "--data",
            "small",
            "--epochs",
            "2",
            "--out",
            str(out),
            "--cache-dir",
            str(tmp_path / "cache"),
            "--no-progress",
        ]
    )
    assert code == 0
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["architecture"] == "bow-mlp" and metrics["preset"] == "bow-mlp"
    assert sum(map(sum, metrics["confusion"])) == 500
    assert metrics["test_accuracy"] > 0.65  # chance is 0.5
    assert (out / "training_curves.png").is_file()
    assert "test accuracy" in capsys.readouterr().out
