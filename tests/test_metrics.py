"""Tests of m2l_nlp.metrics: losses and scores."""

from __future__ import annotations

import numpy as np
import pytest

from m2l_nlp import metrics


def test_sigmoid_bce_matches_numpy():
    logits = np.array([-3.0, -0.5, 0.0, 0.7, 12.0], np.float32)
    labels = np.array([0, 1, 1, 0, 1], np.int32)
    p = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    per = -(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    assert float(metrics.sigmoid_bce(logits, labels)) == pytest.approx(per.mean(), rel=1e-5)
    w = np.array([1, 0, 1, 1, 0], np.float32)
    expected = (per * w).sum() / w.sum()
    assert float(metrics.sigmoid_bce(logits, labels, w)) == pytest.approx(expected, rel=1e-5)
