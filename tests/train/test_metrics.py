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
