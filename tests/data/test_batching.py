"""Tests of m2l_nlp.data.batching: device data, length buckets, batch plans and micro-batches."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from m2l_nlp.data import batching


def test_micro_batches_fit_the_cell_budget_and_the_devices():
    assert batching.micro_batches(8, 600, 1, None) == 1
    assert batching.micro_batches(8, 64, 1, 2**17) == 1  # 8 * 64**2 fits
    assert batching.micro_batches(8, 256, 1, 2**17) == 4  # 2 rows * 256**2 = 2**17
    assert batching.micro_batches(8, 600, 1, 2**17) == 8  # one row is already too big
    assert batching.micro_batches(12, 256, 1, 2**17) == 6
    assert batching.micro_batches(16, 256, 4, 2**17) == 2  # 4 rows per device, 2 per piece
    assert batching.micro_batches(8, 600, 8, 2**17) == 1  # one row per device: no split


def test_put_data_rejects_left_padding_and_bad_labels(random_split):
    ids, mask, labels = random_split(4, seed=4, min_len=2)
    with pytest.raises(ValueError, match="right-padded"):
        batching.put_data(ids, mask[:, ::-1], labels)
    with pytest.raises(ValueError, match="0 .negative. or 1"):
        batching.put_data(ids, mask, labels + 2)
    with pytest.raises(ValueError, match="shape"):
        batching.put_data(ids, mask, labels[:2])


def test_train_plan_covers_every_example_once_and_reshuffles():
    lengths = np.random.default_rng(0).integers(0, 700, 203)
    plans = [batching.train_plan(lengths, 16, 256, np.random.default_rng(s)) for s in (0, 0, 1)]
    for plan in plans:
        real = plan.idx[plan.weights > 0]
        assert sorted(real.tolist()) == list(range(203))
        assert set(plan.widths) <= set(batching.bucket_widths(256))
        for row, w, width in zip(plan.idx, plan.weights, plan.widths, strict=True):
            need = np.minimum(lengths[row[w > 0]], 256)
            assert (need <= width).all()
        room = np.maximum(lengths[plan.idx] - 256, 0)
        assert ((plan.starts >= 0) & (plan.starts <= room)).all()
    np.testing.assert_array_equal(plans[0].idx, plans[1].idx)  # same seed, same epoch
    assert not np.array_equal(plans[0].idx, plans[2].idx)  # another seed reshuffles


def test_bucket_widths_are_coarse_on_an_accelerator(monkeypatch):
    monkeypatch.setattr(batching.devices, "accelerator", lambda: "cpu")
    assert batching.bucket_widths(600) == (64, 128, 192, 256, 320, 384, 448, 512, 600)
    monkeypatch.setattr(batching.devices, "accelerator", lambda: "gpu")
    assert batching.bucket_widths(600) == (128, 256, 512, 600)
    lengths = np.random.default_rng(0).integers(0, 700, 203)
    plan = batching.train_plan(lengths, 16, 600, np.random.default_rng(0))
    assert set(plan.widths) == {128, 256, 512, 600}


def test_eval_plan_shapes_are_few_and_memory_bounded():
    lengths = np.random.default_rng(0).integers(0, 4000, 500)
    plans = batching.eval_plan(lengths, 128, 4000, n_devices=8)
    idx = np.concatenate([p.idx[p.weights > 0] for p in plans])
    assert sorted(idx.tolist()) == list(range(500))
    for plan in plans:
        batch, width = plan.idx.shape[1], plan.widths[0]
        assert batch % 8 == 0 and batch <= 128
        assert batch * width**2 <= max(batching.EVAL_ATTENTION_BUDGET, 8 * width**2)
    assert len(plans) <= len(batching.bucket_widths(4000))


def test_gather_crops_a_window_and_masks_it(random_split):
    ids, mask, labels = random_split(6, seq_len=40, seed=5, min_len=1)
    data = batching.put_data(ids, mask, labels)
    lengths = mask.sum(1)
    idx = jnp.arange(6)
    starts = jnp.asarray(np.maximum(lengths - 16, 0) // 2, jnp.int32)
    (got_ids, got_mask), got_labels, weights = batching.gather(data, idx, starts, 16)
    assert weights is None  # a label per review: every one counts
    for i in range(6):
        s = int(starts[i])
        window = ids[i, s : s + 16]
        n = min(16, lengths[i] - s)
        np.testing.assert_array_equal(np.asarray(got_mask[i]), np.arange(16) < n)
        np.testing.assert_array_equal(np.asarray(got_ids[i])[:n], window[:n])
        assert (np.asarray(got_ids[i])[n:] == 0).all()
    np.testing.assert_array_equal(np.asarray(got_labels), labels)


def test_windows_cover_every_token_of_every_review():
    lengths = np.array([0, 1, 16, 17, 40, 100, 33])
    example, starts = batching.windows(lengths, 16)
    assert sorted(set(example.tolist())) == list(range(len(lengths)))
    for i, n in enumerate(lengths):
        mine = starts[example == i]
        assert len(mine) == max(1, -(-n // 16))
        covered = np.zeros(max(n, 1), bool)
        for s in mine:
            assert 0 <= s and (s + 16 <= n or s == 0)
            covered[s : s + 16] = True
        assert covered.all()


def test_step_groups_cover_every_batch_once_and_pad_the_last_group():
    widths = (64, 32, 64, 64, 32, 64, 64)
    groups = batching.step_groups(widths, 3)
    assert sorted(groups.js[groups.valid].tolist()) == list(range(len(widths)))
    for width, js in zip(groups.widths, groups.js, strict=True):
        assert all(widths[j] == width for j in js)
    assert groups.widths == (64, 32, 64)
    assert groups.js.tolist() == [[0, 2, 3], [1, 4, 4], [5, 6, 6]]
    assert groups.valid.tolist() == [[True] * 3, [True, True, False], [True, True, False]]
    assert batching.step_groups(widths, 1).js.tolist() == [[j] for j in range(7)]


def test_micro_batches_take_every_micro_th_row_and_merge_back_in_order():
    x = jnp.arange(12).reshape(6, 2)
    pieces = batching.split_rows(x, 3)
    assert pieces.shape == (3, 2, 2)
    np.testing.assert_array_equal(pieces[1], x[1::3])  # rows 1 and 4: piece k holds i*3 + k
    np.testing.assert_array_equal(batching.merge_rows(pieces), x)


def test_micro_batch_cells_default_to_a_split_on_the_cpu_only(monkeypatch):
    monkeypatch.setattr(batching.devices, "accelerator", lambda: "cpu")
    assert batching.resolve_micro_batch_cells(None) == batching.CPU_MICRO_BATCH_CELLS
    assert (
        batching.resolve_micro_batch_cells(0) is None and batching.resolve_micro_batch_cells(7) == 7
    )
    monkeypatch.setattr(batching.devices, "accelerator", lambda: "gpu")
    assert batching.resolve_micro_batch_cells(None) is None
