"""Tests of m2l_nlp.train.metrics: losses and scores."""

from __future__ import annotations

import numpy as np
import pytest

from m2l_nlp.train import metrics


def test_binary_scores_match_numpy():
    logits = np.array([-3.0, -0.5, 0.0, 0.7, 12.0], np.float32)
    labels = np.array([0, 1, 1, 0, 1], np.int32)
    p = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    per = -(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    np.testing.assert_allclose(metrics.binary_row_loss(logits, labels), per, rtol=1e-5)
    np.testing.assert_array_equal(metrics.binary_row_accuracy(logits, labels), [1, 0, 0, 0, 1])
    scored = metrics.score(metrics.BINARY, logits, labels)
    assert scored.loss == pytest.approx(per.mean(), rel=1e-5)
    assert scored.accuracy == pytest.approx(0.4) and scored.count == 5
    # rows: the true label, columns: the predicted one (a logit of 0 predicts negative)
    np.testing.assert_array_equal(scored.confusion, [[1, 1], [2, 1]])


def _nats(logits: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """Cross-entropy of each position, in float64: ``(B, S, V), (B, S) -> (B, S)``."""
    logits = logits.astype(np.float64)
    top = logits.max(-1, keepdims=True)
    log_z = np.log(np.exp(logits - top).sum(-1)) + top[..., 0]
    return log_z - np.take_along_axis(logits, labels[..., None], -1)[..., 0]


def test_token_scores_match_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=(2, 3)).astype(np.int32)
    weights = np.array([[1, 1, 0], [1, 0, 0]], np.float32)
    nats, hits = _nats(logits, labels), (logits.argmax(-1) == labels).astype(np.float32)
    np.testing.assert_allclose(metrics.token_row_loss(logits, labels), nats.mean(-1), rtol=1e-5)
    np.testing.assert_allclose(metrics.token_row_accuracy(logits, labels), hits.mean(-1))
    np.testing.assert_array_equal(metrics.token_accuracy(logits, labels), hits)
    mean = (nats * weights).sum() / weights.sum()
    assert float(metrics.token_cross_entropy(logits, labels, weights)) == pytest.approx(mean, 1e-5)
    assert float(metrics.token_cross_entropy(logits, labels, 0 * weights)) == 0.0


def test_a_per_token_objective_sums_its_practicals_mean_and_is_scored_by_the_courses():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(2, 3, 5)).astype(np.float32)
    labels = rng.integers(0, 5, size=(2, 3)).astype(np.int32)
    seen = []

    def next_token_loss(logits, ids, mask):  # a practical's: the mean over mask's positions
        seen.append((logits.shape, np.asarray(ids).tolist(), np.asarray(mask).tolist()))
        return metrics.token_cross_entropy(logits[:, :-1], ids[:, 1:], mask[:, 1:])

    objective = metrics.next_token_objective(next_token_loss)
    weights = objective.weights(np.array([1.0, 0.0], np.float32), np.ones((2, 3), np.int32))
    np.testing.assert_array_equal(weights, [[1, 1, 1], [0, 0, 0]])  # a row that fills up
    loss_sum, hits = objective.weighted_sums(logits, labels, weights)
    assert seen[0][0] == (2, 4, 5)  # one position longer: the last has nothing after it
    assert seen[0][1][0] == [0, *labels[0].tolist()]  # the labels, one column later
    bits = _nats(logits, labels)[0].sum() / np.log(2)
    assert float(loss_sum) == pytest.approx(bits, rel=1e-5)
    assert float(hits) == float((logits[0].argmax(-1) == labels[0]).sum())
    assert objective.as_scored().loss is metrics.token_cross_entropy
    assert metrics.TOKENS.as_scored() is metrics.TOKENS  # a row task is its own judge


def test_a_translators_objective_is_its_own_loss_in_bits_per_token():
    objective = metrics.sequence_objective(metrics.token_cross_entropy)
    assert objective.loss is metrics.token_cross_entropy and objective.per_token
    assert (objective.loss_name, objective.scale) == ("bits/token", pytest.approx(1 / np.log(2)))
