"""Tests of m2l_nlp.training: loss, jitted step, evaluation, batch plans and the loop."""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from m2l_nlp import training
from m2l_nlp.config import ClassifierConfig

CONFIG = ClassifierConfig(
    vocab_size=50, num_layers=1, num_heads=2, d_model=8, d_ff=16, p_dropout=0.1, max_len=48
)


@pytest.fixture(scope="module")
def model():
    return training.build_model(CONFIG)


@pytest.fixture(scope="module")
def params(model):
    return training.init_params(model, jax.random.PRNGKey(0), CONFIG)


def random_split(n: int, seq_len: int = 48, seed: int = 0, min_len: int = 0):
    """Right-padded random ids, mask and labels; lengths spread over [min_len, seq_len]."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, seq_len + 1, n)
    lengths[:3] = [seq_len, 1, min_len]  # the extremes are always there
    mask = (np.arange(seq_len) < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1, CONFIG.vocab_size, (n, seq_len)).astype(np.int32) * mask
    labels = rng.integers(0, 2, n).astype(np.int32)
    return ids, mask, labels


def signal_split(n: int, seq_len: int = 48, seed: int = 0):
    """A learnable task: token 3 marks positive reviews, token 4 negative ones."""
    ids, mask, labels = random_split(n, seq_len, seed, min_len=4)
    ids = np.where(ids == 3, 5, np.where(ids == 4, 5, ids))
    marker = np.where(labels == 1, 3, 4)
    ids[:, 0] = marker
    ids[:, 2] = marker
    return ids, mask, labels


# ----------------------------------------------------------------------------- loss


def test_sigmoid_bce_matches_numpy():
    logits = np.array([-3.0, -0.5, 0.0, 0.7, 12.0], np.float32)
    labels = np.array([0, 1, 1, 0, 1], np.int32)
    p = 1.0 / (1.0 + np.exp(-logits.astype(np.float64)))
    per = -(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    assert float(training.sigmoid_bce(logits, labels)) == pytest.approx(per.mean(), rel=1e-5)
    w = np.array([1, 0, 1, 1, 0], np.float32)
    expected = (per * w).sum() / w.sum()
    assert float(training.sigmoid_bce(logits, labels, w)) == pytest.approx(expected, rel=1e-5)


# ----------------------------------------------------------------------------- step


def _delta(model, params, optimizer):
    ids, mask, labels = random_split(8, seed=1, min_len=2)
    state = training.init_state(jax.tree_util.tree_map(jnp.array, params), optimizer)
    new, loss, correct = training.train_step(
        state, jax.random.PRNGKey(1), ids, mask, labels, model=model, optimizer=optimizer
    )
    assert np.isfinite(float(loss)) and 0 <= float(correct) <= 8
    leaf = lambda p: np.asarray(p["classifier/~/head"]["w"])
    return leaf(new.params) - leaf(params)


def test_train_step_uses_the_optimizer_it_is_given(model, params):
    """The tutorial's bug: a step reading a global optimizer ignores a later change."""
    big = _delta(model, params, optax.sgd(0.1))
    small = _delta(model, params, optax.sgd(0.01))  # same step function, new optimizer
    frozen = _delta(model, params, optax.sgd(0.0))
    assert np.abs(big).max() > 0
    np.testing.assert_allclose(small, big / 10, rtol=1e-4, atol=1e-8)
    np.testing.assert_array_equal(frozen, 0)


def test_schedule_change_takes_effect(model, params):
    settings = training.TrainSettings(learning_rate=1e-2, warmup_fraction=0.5)
    warm = _delta(model, params, training.make_optimizer(settings, total_steps=100))
    # step 0 of a warm-up starts at learning rate 0: no change at all
    np.testing.assert_array_equal(warm, 0)
    settings = training.TrainSettings(learning_rate=1e-2, warmup_fraction=0.0)
    hot = _delta(model, params, training.make_optimizer(settings, total_steps=100))
    assert np.abs(hot).max() > 1e-4


def test_micro_batches_fit_the_cell_budget_and_the_devices():
    assert training.micro_batches(8, 600, 1, None) == 1
    assert training.micro_batches(8, 64, 1, 2**17) == 1  # 8 * 64**2 fits
    assert training.micro_batches(8, 256, 1, 2**17) == 4  # 2 rows * 256**2 = 2**17
    assert training.micro_batches(8, 600, 1, 2**17) == 8  # one row is already too big
    assert training.micro_batches(12, 256, 1, 2**17) == 6
    assert training.micro_batches(16, 256, 4, 2**17) == 2  # 4 rows per device, 2 per piece
    assert training.micro_batches(8, 600, 8, 2**17) == 1  # one row per device: no split


@pytest.mark.parametrize("micro", [2, 4])
def test_micro_batched_step_makes_the_same_update(params, micro):
    """Gradient accumulation over micro-batches gives the update of the whole batch."""
    model = training.build_model(dataclasses.replace(CONFIG, p_dropout=0.0))
    ids, mask, labels = random_split(8, seed=3, min_len=2)
    weights = np.array([1, 1, 0, 1, 1, 1, 0, 1], np.float32)  # padding rows are ignored
    optimizer = optax.sgd(0.5)
    results = []
    for m in (1, micro):
        state = training.init_state(jax.tree_util.tree_map(jnp.array, params), optimizer)
        new, loss, correct = training.train_step(
            state, jax.random.PRNGKey(1), ids, mask, labels, weights,
            model=model, optimizer=optimizer, micro=m,
        )  # fmt: skip
        results.append((jax.device_get(new.params), float(loss), float(correct)))
    (p1, loss1, c1), (pm, lossm, cm) = results
    assert lossm == pytest.approx(loss1, rel=1e-5) and cm == c1
    moved = jax.tree_util.tree_map(lambda a, b: np.abs(a - b).max(), p1, params)
    assert max(jax.tree_util.tree_leaves(moved)) > 1e-3  # the step did something
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), p1, pm
    )


def test_weight_decay_spares_biases_and_norms(params):
    mask = training._decay_mask(params)
    assert mask["classifier/~/head"]["w"] and not mask["classifier/~/head"]["b"]
    norm = next(k for k in mask if k.endswith("norm_1"))
    assert not mask[norm]["scale"]


# ----------------------------------------------------------------------------- evaluation


def reference_logits(model, params, ids, mask):
    """Logits of one forward pass over the whole split at its full padded length."""
    return np.asarray(jax.jit(model.apply, static_argnums=4)(params, None, ids, mask, False))


def test_evaluate_on_batch_accuracy_and_confusion(model, params):
    ids, mask, labels = random_split(16, seed=2)
    acc, confusion = training.evaluate_on_batch(params, ids, mask, labels, model=model)
    logits = reference_logits(model, params, ids, mask)
    pred = (logits > 0).astype(int)
    expected = np.zeros((2, 2))
    np.add.at(expected, (labels, pred), 1)
    np.testing.assert_array_equal(np.asarray(confusion), expected)
    assert float(acc) == pytest.approx((pred == labels).mean())
    weights = np.r_[np.ones(10), np.zeros(6)].astype(np.float32)
    _, part = training.evaluate_on_batch(params, ids, mask, labels, weights, model=model)
    assert float(np.asarray(part).sum()) == 10


@pytest.mark.parametrize("batch_size", [8, 5, 64])
def test_evaluate_counts_every_example_once(model, params, batch_size):
    ids, mask, labels = random_split(37, seed=3)  # 37: a partial last batch for every size
    result = training.evaluate(params, model, (ids, mask, labels), batch_size=batch_size)
    logits = reference_logits(model, params, ids, mask)
    expected = np.zeros((2, 2), np.int64)
    np.add.at(expected, (labels, (logits > 0).astype(int)), 1)
    assert result.count == 37
    np.testing.assert_array_equal(result.confusion, expected)
    assert result.accuracy == pytest.approx(np.trace(expected) / 37)
    p = 1 / (1 + np.exp(-logits.astype(np.float64)))
    ref_loss = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
    assert result.loss == pytest.approx(ref_loss, rel=1e-4)


def test_predict_logits_in_micro_batches_matches_the_reference(model, params):
    """Cut into cache-sized pieces (here 1 to 4 rows), the logits do not change."""
    ids, mask, labels = random_split(37, seed=4)
    data = training.put_data(ids, mask, labels)
    pieces = training.predict_logits(params, model, data, batch_size=8, micro_batch_cells=4000)
    whole = training.predict_logits(params, model, data, batch_size=8, micro_batch_cells=0)
    np.testing.assert_allclose(pieces, reference_logits(model, params, ids, mask), atol=1e-5)
    np.testing.assert_allclose(whole, pieces, atol=1e-5)
    assert training.micro_batches(8, 48, 1, 4000) == 8  # the widest bucket: 1 row a piece


def test_put_data_rejects_left_padding_and_bad_labels():
    ids, mask, labels = random_split(4, seed=4, min_len=2)
    with pytest.raises(ValueError, match="right-padded"):
        training.put_data(ids, mask[:, ::-1], labels)
    with pytest.raises(ValueError, match="0 .negative. or 1"):
        training.put_data(ids, mask, labels + 2)
    with pytest.raises(ValueError, match="shape"):
        training.put_data(ids, mask, labels[:2])


# ----------------------------------------------------------------------------- plans


def test_train_plan_covers_every_example_once_and_reshuffles():
    lengths = np.random.default_rng(0).integers(0, 700, 203)
    plans = [training.train_plan(lengths, 16, 256, np.random.default_rng(s)) for s in (0, 0, 1)]
    for plan in plans:
        real = plan.idx[plan.weights > 0]
        assert sorted(real.tolist()) == list(range(203))
        assert set(plan.widths) <= set(training.bucket_widths(256))
        for row, w, width in zip(plan.idx, plan.weights, plan.widths, strict=True):
            need = np.minimum(lengths[row[w > 0]], 256)
            assert (need <= width).all()
        room = np.maximum(lengths[plan.idx] - 256, 0)
        assert ((plan.starts >= 0) & (plan.starts <= room)).all()
    np.testing.assert_array_equal(plans[0].idx, plans[1].idx)  # same seed, same epoch
    assert not np.array_equal(plans[0].idx, plans[2].idx)  # another seed reshuffles


def test_bucket_widths_are_coarse_on_an_accelerator(monkeypatch):
    monkeypatch.setattr(training.devices, "accelerator", lambda: "cpu")
    assert training.bucket_widths(600) == (*training.DEFAULT_WIDTHS[:15], 600)
    monkeypatch.setattr(training.devices, "accelerator", lambda: "gpu")
    assert training.bucket_widths(600) == (128, 256, 512, 600)
    lengths = np.random.default_rng(0).integers(0, 700, 203)
    plan = training.train_plan(lengths, 16, 600, np.random.default_rng(0))
    assert set(plan.widths) == {128, 256, 512, 600}


def test_eval_plan_shapes_are_few_and_memory_bounded():
    lengths = np.random.default_rng(0).integers(0, 4000, 500)
    plans = training.eval_plan(lengths, 128, 4000, n_devices=8)
    idx = np.concatenate([p.idx[p.weights > 0] for p in plans])
    assert sorted(idx.tolist()) == list(range(500))
    for plan in plans:
        batch, width = plan.idx.shape[1], plan.widths[0]
        assert batch % 8 == 0 and batch <= 128
        assert batch * width**2 <= max(training.EVAL_ATTENTION_BUDGET, 8 * width**2)
    assert len(plans) <= len(training.bucket_widths(4000))


def test_gather_crops_a_window_and_masks_it():
    ids, mask, labels = random_split(6, seq_len=40, seed=5, min_len=1)
    data = training.put_data(ids, mask, labels)
    lengths = mask.sum(1)
    idx = jnp.arange(6)
    starts = jnp.asarray(np.maximum(lengths - 16, 0) // 2, jnp.int32)
    got_ids, got_mask, got_labels = training._gather(data, idx, starts, 16)
    for i in range(6):
        s = int(starts[i])
        window = ids[i, s : s + 16]
        n = min(16, lengths[i] - s)
        np.testing.assert_array_equal(np.asarray(got_mask[i]), np.arange(16) < n)
        np.testing.assert_array_equal(np.asarray(got_ids[i])[:n], window[:n])
        assert (np.asarray(got_ids[i])[n:] == 0).all()
    np.testing.assert_array_equal(np.asarray(got_labels), labels)


# ----------------------------------------------------------------------------- the loop


def test_train_learns_and_records_history(model, params):
    train_split = signal_split(256, seed=6)
    val_split = signal_split(64, seed=7)
    settings = training.TrainSettings(
        epochs=4, batch_size=16, learning_rate=1e-2, crop_len=32, eval_every=2, seed=3
    )
    result = training.train(
        model, params, train_split, settings, eval_data=val_split, progress=False, log=None
    )
    h = result.history
    assert set(h) == {"loss", "train_acc", "val_loss", "val_acc"}
    assert all(len(v) == 4 for v in h.values())
    assert math.isnan(h["val_acc"][0]) and math.isnan(h["val_acc"][2])
    assert h["loss"][-1] < h["loss"][0]
    assert h["val_acc"][-1] >= 0.95
    assert result.eval_result.accuracy == h["val_acc"][-1]
    again = training.train(model, params, train_split, settings, progress=False, log=None)
    np.testing.assert_allclose(again.history["loss"], h["loss"], rtol=1e-5)


def test_keep_best_returns_the_epoch_with_the_best_validation_accuracy(model, params):
    """Validation labels are flipped, so validation accuracy falls as the model learns."""
    train_split = signal_split(256, seed=6)
    ids, mask, labels = signal_split(64, seed=7)
    flipped = (ids, mask, 1 - labels)
    settings = training.TrainSettings(
        epochs=4, batch_size=16, learning_rate=1e-2, crop_len=32, seed=3
    )
    run = lambda s: training.train(
        model, params, train_split, s, eval_data=flipped, progress=False, log=None
    )
    best = run(settings)
    accs = best.history["val_acc"]
    assert best.best_epoch == int(np.argmax(accs)) + 1 < 4
    again = training.evaluate(best.params, model, flipped, window=32)
    assert again.accuracy == pytest.approx(max(accs)) == best.eval_result.accuracy
    last = run(dataclasses.replace(settings, keep_best=False))
    assert last.best_epoch == 4
    assert training.evaluate(last.params, model, flipped, window=32).accuracy == pytest.approx(
        accs[-1]
    )


def test_update_ema_moves_the_average_toward_the_parameters():
    params = {"m": {"w": jnp.ones(3)}}
    state = training.TrainState(params, (), (jnp.array(0), {"m": {"w": jnp.zeros(3)}}))
    first = training.update_ema(state, 0.99)  # step 0: rate 1 - 1/10
    np.testing.assert_allclose(first.ema[1]["m"]["w"], 0.9, rtol=1e-6)
    assert int(first.ema[0]) == 1
    late = training.update_ema(state._replace(ema=(jnp.array(10**6), state.ema[1])), 0.99)
    np.testing.assert_allclose(late.ema[1]["m"]["w"], 0.01, rtol=1e-4)  # rate 1 - decay
    assert training.eval_params(late) is late.ema[1]
    assert training.eval_params(state._replace(ema=None)) is params


def test_train_with_ema_evaluates_and_returns_the_average(model, params):
    train_split = signal_split(128, seed=6)
    val_split = signal_split(64, seed=7)
    settings = training.TrainSettings(
        epochs=2, batch_size=16, learning_rate=1e-2, crop_len=32, seed=3, keep_best=False
    )
    run = lambda s: training.train(
        model, params, train_split, s, eval_data=val_split, progress=False, log=None
    )
    plain, averaged = run(settings), run(dataclasses.replace(settings, ema_decay=0.9))
    np.testing.assert_allclose(averaged.history["loss"], plain.history["loss"], rtol=1e-5)
    gap = jax.tree_util.tree_map(lambda a, b: np.abs(a - b).max(), plain.params, averaged.params)
    assert max(jax.tree_util.tree_leaves(gap)) > 1e-4  # same training, other parameters
    again = training.evaluate(averaged.params, model, val_split, window=32)
    assert again.accuracy == pytest.approx(averaged.eval_result.accuracy)
    assert again.loss == pytest.approx(averaged.eval_result.loss, rel=1e-4)


def test_train_rejects_bad_settings(model, params):
    with pytest.raises(ValueError, match="epochs"):
        training.TrainSettings(epochs=0)
    empty = tuple(a[:0] for a in random_split(4))
    with pytest.raises(ValueError, match="empty"):
        training.train(model, params, empty, progress=False, log=None)


def test_windows_cover_every_token_of_every_review():
    lengths = np.array([0, 1, 16, 17, 40, 100, 33])
    example, starts = training.windows(lengths, 16)
    assert sorted(set(example.tolist())) == list(range(len(lengths)))
    for i, n in enumerate(lengths):
        mine = starts[example == i]
        assert len(mine) == max(1, -(-n // 16))
        covered = np.zeros(max(n, 1), bool)
        for s in mine:
            assert 0 <= s and (s + 16 <= n or s == 0)
            covered[s : s + 16] = True
        assert covered.all()


def test_evaluate_with_a_window_averages_window_logits(model, params):
    ids, mask, labels = random_split(23, seed=8)  # lengths up to 48, windows of 16
    result = training.evaluate(params, model, (ids, mask, labels), window=16, batch_size=8)
    example, starts = training.windows(mask.sum(1), 16)
    apply = jax.jit(model.apply, static_argnums=4)
    sums = np.zeros(23)
    for i, s in zip(example, starts, strict=True):
        n = min(int(mask[i].sum()) - s, 16)
        x = np.zeros((1, 16), np.int32)
        m = np.zeros((1, 16), np.int32)
        x[0, :n], m[0, :n] = ids[i, s : s + n], 1
        sums[i] += float(apply(params, None, x, m, False)[0])
    mean = sums / np.bincount(example, minlength=23)
    expected = np.zeros((2, 2), np.int64)
    np.add.at(expected, (labels, (mean > 0).astype(int)), 1)
    np.testing.assert_array_equal(result.confusion, expected)
    assert result.count == 23


def test_init_params_scales_only_the_embeddings(model):
    base = training.init_params(model, jax.random.PRNGKey(0), CONFIG)
    small = training.init_params(model, jax.random.PRNGKey(0), CONFIG, embed_scale=0.1)
    for module, leaves in base.items():
        for name, value in leaves.items():
            factor = 0.1 if name == "embeddings" else 1.0
            np.testing.assert_allclose(small[module][name], value * factor, rtol=1e-6)


def test_token_dropout_takes_effect(model, params):
    split = signal_split(64, seed=9)
    base = training.TrainSettings(epochs=1, batch_size=16, crop_len=32, seed=1)
    drop = training.TrainSettings(epochs=1, batch_size=16, crop_len=32, seed=1, token_dropout=0.5)
    run = lambda s: training.train(model, params, split, s, progress=False, log=None).history
    assert run(drop)["loss"] != pytest.approx(run(base)["loss"], rel=1e-6)
    with pytest.raises(ValueError, match="token_dropout"):
        training.TrainSettings(token_dropout=1.0)
