"""Tests of m2l_nlp.train.evaluation: every example counted once, windows, micro-batches."""

from __future__ import annotations

import numpy as np
import pytest

from m2l_nlp.config import TrainSettings
from m2l_nlp.data import batching
from m2l_nlp.train import evaluation


def reference_logits(model, params, ids, mask):
    """Logits of one forward pass over the whole split at its full padded length."""
    return np.asarray(model.predict_fw(params, ids, mask))


@pytest.mark.parametrize("batch_size", [8, 5, 64])
def test_evaluate_counts_every_example_once(tiny_model, tiny_params, random_split, batch_size):
    model, params = tiny_model, tiny_params
    ids, mask, labels = random_split(37, seed=3)  # 37: a partial last batch for every size
    result = evaluation.evaluate(params, model, (ids, mask, labels), batch_size=batch_size)
    logits = reference_logits(model, params, ids, mask)
    expected = np.zeros((2, 2), np.int64)
    np.add.at(expected, (labels, (logits > 0).astype(int)), 1)
    assert result.count == 37
    np.testing.assert_array_equal(result.confusion, expected)
    assert result.accuracy == pytest.approx(np.trace(expected) / 37)
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    ref_loss = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    assert result.loss == pytest.approx(ref_loss, rel=1e-4)


def test_predict_logits_in_micro_batches_matches_the_reference(
    tiny_model, tiny_params, random_split
):
    """Cut into cache-sized pieces (here 1 to 4 rows), the logits do not change."""
    model, params = tiny_model, tiny_params
    ids, mask, labels = random_split(37, seed=4)
    data = batching.put_data(ids, mask, labels)
    pieces = evaluation.predict_logits(params, model, data, batch_size=8, micro_batch_cells=4000)
    whole = evaluation.predict_logits(params, model, data, batch_size=8, micro_batch_cells=0)
    np.testing.assert_allclose(pieces, reference_logits(model, params, ids, mask), atol=1e-5)
    np.testing.assert_allclose(whole, pieces, atol=1e-5)
    assert batching.micro_batches(8, 48, 1, 4000) == 8  # the widest bucket: 1 row a piece


def test_evaluate_with_a_window_averages_window_logits(tiny_model, tiny_params, random_split):
    model, params = tiny_model, tiny_params
    ids, mask, labels = random_split(23, seed=8)  # lengths up to 48, windows of 16
    result = evaluation.evaluate(params, model, (ids, mask, labels), window=16, batch_size=8)
    example, starts = batching.windows(mask.sum(1), 16)
    sums = np.zeros(23)
    for i, s in zip(example, starts, strict=True):
        n = min(int(mask[i].sum()) - s, 16)
        x = np.zeros((1, 16), np.int32)
        m = np.zeros((1, 16), np.int32)
        x[0, :n], m[0, :n] = ids[i, s : s + n], 1
        sums[i] += float(model.predict_fw(params, x, m)[0])
    mean = sums / np.bincount(example, minlength=23)
    expected = np.zeros((2, 2), np.int64)
    np.add.at(expected, (labels, (mean > 0).astype(int)), 1)
    np.testing.assert_array_equal(result.confusion, expected)
    assert result.count == 23


def test_evaluate_with_settings_reads_the_split_as_a_run_with_them(
    tiny_model, tiny_params, random_split
):
    model, params = tiny_model, tiny_params
    split = random_split(23, seed=8)  # lengths up to 48
    settings = TrainSettings(crop_len=16, eval_batch_size=8, micro_batch_cells=4000)
    run_like = evaluation.evaluate(params, model, split, settings=settings)
    spelled = evaluation.evaluate(
        params, model, split, window=16, batch_size=8, micro_batch_cells=4000
    )
    whole = evaluation.evaluate(params, model, split, batch_size=8)
    assert run_like.loss == spelled.loss
    np.testing.assert_array_equal(run_like.confusion, spelled.confusion)
    assert run_like.loss != pytest.approx(whole.loss, rel=1e-4)  # the window was used
