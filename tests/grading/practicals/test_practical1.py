"""Practical 1's graded checks pass on the reference and on nothing of the stubs; its
baselines' settings and their CLI (their models: tests/model/test_baselines.py). Its
mutants, each a slip a student could make, are in tests/mutants/practical1_baselines.py (run
by test_mutants.py).
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
