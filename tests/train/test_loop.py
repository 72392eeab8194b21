"""Tests of m2l_nlp.train.loop: the loop (epochs, evaluation, ties, several steps a call)."""

from __future__ import annotations

import dataclasses
import math

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from m2l_nlp.config import TrainSettings
from m2l_nlp.model import classifiers as models
from m2l_nlp.train import evaluation, metrics, optim, step
from m2l_nlp.train import loop as training
from m2l_nlp.transform import funcs_from_stateful


def test_the_loop_runs_the_train_step(tiny_config, tiny_params, signal_split):
    """An epoch of one batch through the loop is one call of ``train_step`` on that batch:
    same parameters, same loss (no dropout, so the keys do not matter)."""
    model = models.classifier(dataclasses.replace(tiny_config, p_dropout=0.0))
    ids, mask, labels = signal_split(8, seq_len=32, seed=2)
    split = (ids, np.ones_like(mask), labels)
    settings = TrainSettings(epochs=1, batch_size=8, learning_rate=1e-2, crop_len=32)
    trained = training.train(model, tiny_params, split, settings, progress=False, log=None)
    optimizer = optim.make_optimizer(settings, 1)  # the loop's: one epoch of one step
    state = optim.init_state(jax.tree_util.tree_map(jnp.array, tiny_params), optimizer)
    batch = step.Batch((ids, np.ones_like(mask)), labels, np.ones(8, np.float32))
    new, loss, _ = step.train_step(
        state, jax.random.PRNGKey(0), batch, model=model, optimizer=optimizer
    )
    assert trained.history["loss"] == [pytest.approx(float(loss), rel=1e-5)]
    paths = jax.tree_util.tree_leaves_with_path(new.params)
    for (path, a), b in zip(paths, jax.tree_util.tree_leaves(trained.params), strict=True):
        if "proj_k" in jax.tree_util.keystr(path):  # its bias: see the K-steps test below
            continue
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-6)
    moved = np.abs(
        np.asarray(new.params["classifier/~/head"]["w"]) - tiny_params["classifier/~/head"]["w"]
    )
    assert moved.max() > 1e-4  # the step did something


BASE, FIRST = 40, np.array([5, 5, 7, 9, 11, 13, 20, 21, 30, 39], np.int32)  # 10 pair tokens


@pytest.mark.parametrize("micro", [1, 4])
def test_a_tied_batch_gets_the_gradient_of_the_tied_model(tiny_config, tiny_params, micro):
    """With ``tie``, the micro-batches run on the tied parameters and their gradient is
    pulled back once: the gradient of the mean loss of ``apply(tie(stored))``."""
    model = models.classifier(dataclasses.replace(tiny_config, p_dropout=0.0))
    tie = models.pair_tie(FIRST, tiny_config.vocab_size)
    rng = np.random.default_rng(4)
    ids = rng.integers(1, tiny_config.vocab_size, (8, 16)).astype(np.int32)  # pairs included
    mask = (np.arange(16)[None, :] < rng.integers(2, 17, (8, 1))).astype(np.int32)
    labels = rng.integers(0, 2, 8).astype(np.int32)
    weights = np.array([1, 1, 0, 1, 1, 1, 0, 1], np.float32)
    key = jax.random.PRNGKey(1)

    def mean_loss(stored):
        logits = model.model.apply(tie(stored), key, ids, mask, True)
        return (metrics.BINARY.loss(logits, labels) * weights).sum() / weights.sum()

    def mean_grads(stored, tie):  # jitted: one program, not an operation at a time
        batch = step.Batch((ids, mask), labels, weights)
        return step.gradient(stored, key, batch, model.model.apply, metrics.BINARY, micro, tie)

    # Both sides in full float32: a GPU's default TF32 products differ by ~1e-6 (H200).
    with jax.default_matmul_precision("highest"):
        want = jax.jit(jax.grad(mean_loss))(tiny_params)
        grads, loss, _ = jax.jit(mean_grads, static_argnums=1)(tiny_params, tie)
        assert float(loss) == pytest.approx(float(jax.jit(mean_loss)(tiny_params)), rel=1e-5)
        table = lambda g: np.asarray(g["classifier/~/embedding/~/embed"]["embeddings"])
        assert np.abs(table(want)[FIRST]).sum() > 0
        jax.tree_util.tree_map(
            lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), grads, want
        )
        untied, _, _ = jax.jit(mean_grads, static_argnums=1)(tiny_params, None)
    assert not np.allclose(table(untied), table(want), atol=1e-6)  # the tie matters here


def test_train_with_a_tie_evaluates_and_returns_the_tied_parameters(
    tiny_model, tiny_config, tiny_params, signal_split
):
    tie = models.pair_tie(FIRST, tiny_config.vocab_size)
    val_split = signal_split(64, seed=7)
    settings = TrainSettings(
        epochs=2, batch_size=16, learning_rate=1e-2, crop_len=32, seed=3, keep_best=False
    )
    done = []
    result = training.train(
        tiny_model, tiny_params, signal_split(128, seed=6), settings, eval_data=val_split,
        progress=False, log=None, tie=tie, on_epoch=done.append,
    )  # fmt: skip
    tree = jax.tree_util.tree_structure(tiny_params)
    stored = jax.tree_util.tree_unflatten(tree, done[-1].state[: tree.num_leaves])
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-6), result.params, tie(stored)
    )
    again = evaluation.evaluate(result.params, tiny_model, val_split, window=32)
    assert again.accuracy == result.eval_result.accuracy
    assert again.loss == pytest.approx(result.eval_result.loss, rel=1e-5)
    assert again.loss != pytest.approx(
        evaluation.evaluate(stored, tiny_model, val_split, window=32).loss, rel=1e-3
    )


@pytest.mark.parametrize("steps_per_call", [1, 2])
def test_a_tie_trains_as_a_model_that_ties_in_its_forward(
    tiny_model, tiny_config, tiny_params, signal_split, steps_per_call
):
    """``train(..., tie=)`` (the tie pulled back once per step, over micro-batches) trains
    the stored rows as a model that ties them in every forward pass (a haiku custom getter)
    does, and returns that model's tied parameters."""
    from m2l_nlp.impl import practical_namespace

    tie = models.pair_tie(FIRST, tiny_config.vocab_size)
    practical = practical_namespace(models.PRACTICAL, "solutions")

    def tie_table(next_getter, value, context):
        if context.name == "embeddings":
            value = tie({"embed": {"embeddings": value}})["embed"]["embeddings"]
        return next_getter(value)

    def tied_forward(ids, mask, is_train=True):
        with hk.custom_getter(tie_table):
            return practical.classifier_forward(ids, mask, is_train, config=tiny_config)

    settings = TrainSettings(
        epochs=2, batch_size=16, learning_rate=1e-2, crop_len=32, seed=3,
        micro_batch_cells=4096, steps_per_call=steps_per_call,  # 4 micro-batches per step
    )  # fmt: skip
    run = lambda model, **kw: training.train(
        model, tiny_params, signal_split(64, seed=6), settings, progress=False, log=None,
        optimizer=optax.sgd(0.3),  # Adam would blow float noise in zero gradients up to steps
        **kw,
    )  # fmt: skip
    ours, reference = run(tiny_model, tie=tie), run(funcs_from_stateful(tied_forward))
    np.testing.assert_allclose(ours.history["loss"], reference.history["loss"], rtol=1e-5)
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6),
        ours.params,
        tie(jax.device_get(reference.params)),
    )


def test_train_learns_and_records_history(tiny_model, tiny_params, signal_split):
    model, params = tiny_model, tiny_params
    train_split = signal_split(256, seed=6)
    val_split = signal_split(64, seed=7)
    # 6 epochs: at 4, one seed in six stayed under 95 % (and most did with jax 0.4's random
    # streams, which start from other weights); at 6 every one of those reached 96.9 %
    settings = TrainSettings(
        epochs=6, batch_size=16, learning_rate=1e-2, crop_len=32, eval_every=2, seed=3
    )
    result = training.train(
        model, params, train_split, settings, eval_data=val_split, progress=False, log=None
    )
    h = result.history
    assert set(h) == {"loss", "train_acc", "val_loss", "val_acc"}
    assert all(len(v) == 6 for v in h.values())
    assert all(math.isnan(h["val_acc"][i]) for i in (0, 2, 4))
    assert h["loss"][-1] < h["loss"][0]
    assert h["val_acc"][-1] >= 0.95
    assert result.eval_result.accuracy == h["val_acc"][-1]
    again = training.train(model, params, train_split, settings, progress=False, log=None)
    np.testing.assert_allclose(again.history["loss"], h["loss"], rtol=1e-5)


def test_keep_best_returns_the_epoch_with_the_best_validation_accuracy(
    tiny_model, tiny_params, signal_split
):
    """Validation labels are flipped, so validation accuracy falls as the model learns."""
    model, params = tiny_model, tiny_params
    train_split = signal_split(256, seed=6)
    ids, mask, labels = signal_split(64, seed=7)
    flipped = (ids, mask, 1 - labels)
    settings = TrainSettings(epochs=4, batch_size=16, learning_rate=1e-2, crop_len=32, seed=3)
    run = lambda s: training.train(
        model, params, train_split, s, eval_data=flipped, progress=False, log=None
    )
    best = run(settings)
    accs = best.history["val_acc"]
    assert best.best_epoch == int(np.argmax(accs)) + 1 < 4
    again = evaluation.evaluate(best.params, model, flipped, window=32)
    assert again.accuracy == pytest.approx(max(accs)) == best.eval_result.accuracy
    last = run(dataclasses.replace(settings, keep_best=False))
    assert last.best_epoch == 4
    assert evaluation.evaluate(last.params, model, flipped, window=32).accuracy == pytest.approx(
        accs[-1]
    )


def test_train_with_ema_evaluates_and_returns_the_average(tiny_model, tiny_params, signal_split):
    model, params = tiny_model, tiny_params
    train_split = signal_split(128, seed=6)
    val_split = signal_split(64, seed=7)
    settings = TrainSettings(
        epochs=2, batch_size=16, learning_rate=1e-2, crop_len=32, seed=3, keep_best=False
    )
    run = lambda s: training.train(
        model, params, train_split, s, eval_data=val_split, progress=False, log=None
    )
    plain, averaged = run(settings), run(dataclasses.replace(settings, ema_decay=0.9))
    np.testing.assert_allclose(averaged.history["loss"], plain.history["loss"], rtol=1e-5)
    gap = jax.tree_util.tree_map(lambda a, b: np.abs(a - b).max(), plain.params, averaged.params)
    assert max(jax.tree_util.tree_leaves(gap)) > 1e-4  # same training, other parameters
    again = evaluation.evaluate(averaged.params, model, val_split, window=32)
    assert again.accuracy == pytest.approx(averaged.eval_result.accuracy)
    assert again.loss == pytest.approx(averaged.eval_result.loss, rel=1e-4)


def test_train_rejects_bad_settings(tiny_model, tiny_params, random_split):
    with pytest.raises(ValueError, match="epochs"):
        TrainSettings(epochs=0)
    empty = tuple(a[:0] for a in random_split(4))
    with pytest.raises(ValueError, match="empty"):
        training.train(tiny_model, tiny_params, empty, progress=False, log=None)


def test_a_diverging_run_stops_at_the_epoch_whose_loss_is_not_finite(
    tiny_model, tiny_params, signal_split
):
    """A learning rate of 1e30 is finite, but the loss is NaN from the first epoch on: the
    run ends there, says what to try, and keeps no epoch (on_epoch is never called)."""
    settings = TrainSettings(epochs=2, batch_size=16, learning_rate=1e30, crop_len=32)
    kept = []
    with pytest.raises(training.DivergedError, match="epoch 1: .*try a lower learning rate"):
        training.train(
            tiny_model,
            tiny_params,
            signal_split(64, seed=6),
            settings,
            progress=False,
            log=None,
            on_epoch=kept.append,
        )
    assert kept == []


def test_token_dropout_takes_effect(tiny_model, tiny_params, signal_split):
    model, params = tiny_model, tiny_params
    split = signal_split(64, seed=9)
    base = TrainSettings(epochs=1, batch_size=16, crop_len=32, seed=1)
    drop = TrainSettings(epochs=1, batch_size=16, crop_len=32, seed=1, token_dropout=0.5)
    run = lambda s: training.train(model, params, split, s, progress=False, log=None).history
    assert run(drop)["loss"] != pytest.approx(run(base)["loss"], rel=1e-6)
    with pytest.raises(ValueError, match="token_dropout"):
        TrainSettings(token_dropout=1.0)


@pytest.mark.parametrize("seq_len", [8, 12])
def test_train_with_the_tokens_objective_learns_a_copy_task(seq_len):
    """The generic loop with a label per token: a per-token model learns labels = ids."""
    vocab = 10

    def forward(ids, mask, is_train=True):  # (B, L) -> (B, L, vocab) logits
        return hk.Linear(vocab)(hk.Embed(vocab, 16)(ids))

    funcs = funcs_from_stateful(forward)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, vocab, (256, seq_len)).astype(np.int32)
    mask = np.ones_like(ids)  # full-length rows: the per-token labels need no crop
    split = (ids, mask, ids)
    params = funcs.init_params(jax.random.PRNGKey(0), ids[:1], mask[:1], True)
    settings = TrainSettings(
        epochs=4, batch_size=32, learning_rate=3e-2, crop_len=seq_len, micro_batch_cells=0
    )
    result = training.train(
        funcs,
        params,
        split,
        settings,
        eval_data=split,
        objective=metrics.TOKENS,
        progress=False,
        log=None,
    )
    assert set(result.history) == {"loss", "train_acc", "val_loss", "val_acc"}
    assert result.history["loss"][-1] < result.history["loss"][0]
    fresh = rng.integers(0, vocab, (50, seq_len)).astype(np.int32)
    scored = evaluation.evaluate(
        result.params, funcs, (fresh, np.ones_like(fresh), fresh), objective=metrics.TOKENS
    )
    assert scored.accuracy > 0.9
    assert scored.confusion is None and scored.count == 50
    assert result.eval_result.confusion is None


@pytest.mark.parametrize("ema", [0.0, 0.9])
def test_k_steps_in_one_call_equal_k_single_steps(tiny_model, tiny_params, random_split, ema):
    """A call of 4 steps (one of them padding) gives the parameters, optimizer state, weight
    average and sums of the 3 real steps run one call each."""
    from m2l_nlp import devices
    from m2l_nlp.data import batching

    settings = TrainSettings(batch_size=8, crop_len=32, ema_decay=ema, micro_batch_cells=0)
    mesh = devices.make_mesh()
    data = batching.put_data(*random_split(64, seed=4, min_len=2), mesh=mesh)
    plan = batching.train_plan(np.asarray(data.lengths), 8, 32, np.random.default_rng(0))
    optimizer = optim.make_optimizer(settings, 100)
    step = training._make_epoch_step(
        tiny_model, optimizer, metrics.BINARY, mesh, ema_decay=settings.ema_decay
    )
    width = plan.widths[0]
    js = [j for j, w in enumerate(plan.widths) if w == width][:3]
    assert len(js) == 3
    key = jax.random.PRNGKey(5)

    def fresh(group_js, group_valid):  # placed as train() places them
        params = jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), tiny_params)
        state = optim.init_state(params, optimizer, ema > 0)
        plan_arrays = (plan.idx, plan.starts, plan.weights, group_js, group_valid)
        placed = (state, jnp.zeros(3), jnp.zeros((), jnp.int32), plan_arrays)
        return devices.put_replicated(placed, mesh)

    state, sums, at, arrays = fresh(np.array([[j] for j in js], np.int32), np.ones((3, 1), bool))
    for _ in js:  # the calls read their batch through the counter ``at``
        state, sums, at = step(state, sums, at, key, data, arrays, width, 1)
    assert int(at) == 3
    group = np.array([[*js, js[-1]]], np.int32)
    valid = np.array([[True, True, True, False]])
    k_state, k_sums, k_at, arrays = fresh(group, valid)
    k_state, k_sums, k_at = step(k_state, k_sums, k_at, key, data, arrays, width, 1)
    assert int(k_at) == 1
    # The key projection's bias adds the same q . b to every score of a query's row, which
    # the softmax cancels: its gradient is float rounding alone, and Adam turns any rounding
    # into a step of the full learning rate. Its value says nothing of the two paths' steps.
    paths = jax.tree_util.tree_leaves_with_path(state)
    compared = 0
    for (path, a), b in zip(paths, jax.tree_util.tree_leaves(k_state), strict=True):
        if "proj_k" in jax.tree_util.keystr(path) and "'b'" in jax.tree_util.keystr(path):
            continue
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-5)
        compared += 1
    assert compared >= len(paths) - 4  # the bias, its two moments and its average at most
    np.testing.assert_allclose(np.asarray(sums), np.asarray(k_sums), rtol=1e-5)
    assert float(k_sums[2]) == float(sums[2])  # the padding step counted no example


@pytest.mark.slow  # over 3 s here
def test_a_run_at_three_steps_per_call_trains_as_the_run_at_one(
    tiny_model, tiny_params, signal_split
):
    """Reviews of one width run in the same order at any K: two epochs of 11 batches (calls
    of 3, the last one padded) give the parameters and history of 11 calls of one, so every
    call reads its own group of batches, epoch after epoch."""
    ids, mask, labels = signal_split(88, seq_len=32, seed=9)
    split = (ids, np.ones_like(mask), labels)  # every review 32 tokens: one width

    def run(k):
        settings = TrainSettings(
            epochs=2, batch_size=8, learning_rate=1e-2, crop_len=32, steps_per_call=k
        )
        return training.train(tiny_model, tiny_params, split, settings, progress=False, log=None)

    one, three = run(1), run(3)
    np.testing.assert_allclose(one.history["loss"], three.history["loss"], rtol=1e-5)
    assert one.history["train_acc"] == three.history["train_acc"]
    paths = jax.tree_util.tree_leaves_with_path(one.params)
    for (path, a), b in zip(paths, jax.tree_util.tree_leaves(three.params), strict=True):
        if "proj_k" in jax.tree_util.keystr(path):  # its bias: see the test above
            continue
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=1e-5)


def test_train_with_several_steps_per_call_learns_and_compiles_nothing_per_epoch(
    tiny_model, tiny_params, signal_split
):
    from m2l_nlp import devices

    settings = TrainSettings(
        epochs=3, batch_size=16, learning_rate=1e-2, crop_len=32, seed=3, steps_per_call=4
    )
    after_epoch = []
    result = training.train(
        tiny_model,
        tiny_params,
        signal_split(256, seed=6),
        settings,
        progress=False,
        log=None,
        on_epoch=lambda _: after_epoch.append(devices.compile_counter()["programs"]),
    )
    assert result.history["loss"][-1] < result.history["loss"][0]
    assert result.history["train_acc"][-1] > 0.75
    assert after_epoch[0] == after_epoch[-1]  # epochs 2 and 3 compiled nothing


def test_nothing_compiles_after_the_first_epoch_nor_when_the_same_run_is_started_again(
    tiny_model, tiny_params, signal_split
):
    """Evaluation included: epochs 2 and 3 compile nothing, and a second run with the same
    settings (a notebook's training cell run again) reuses every program of the first."""
    from m2l_nlp import devices

    settings = TrainSettings(epochs=3, batch_size=16, crop_len=40, seed=2)
    programs = [devices.compile_counter()["programs"]]  # counting starts here, if not before

    def run():
        return training.train(
            tiny_model,
            tiny_params,
            signal_split(96, seed=7),
            settings,
            eval_data=signal_split(40, seed=8),
            progress=False,
            log=None,
            on_epoch=lambda _: programs.append(devices.compile_counter()["programs"]),
        )

    first = run()
    assert programs[1] > programs[0]  # the first epoch compiled the step and the evaluation
    assert len(set(programs[1:])) == 1, programs  # after each epoch, evaluation included
    second = run()
    assert programs[-1] == programs[1], programs
    assert second.history == first.history


def test_a_per_token_objective_counts_the_targets_that_exist():
    """An epoch of one step reports the mean over the positions that have a next character
    (weight 1), not over the padding nor the window's ends, and the loss is the practical's
    own ``next_token_loss`` (in bits): training lowers what the student wrote."""
    import math

    from m2l_nlp.config import TransformerConfig
    from m2l_nlp.model.language_models import init_params, language_model
    from solutions import practical3_translation as p3

    config = TransformerConfig(
        vocab_size=12, num_layers=1, num_heads=2, d_model=8, d_ff=16, p_dropout=0.0, max_len=8
    )
    funcs, _ = language_model(config)
    rng = np.random.default_rng(0)
    lengths = np.array([8, 5, 3, 8])
    mask = (np.arange(8)[None, :] < lengths[:, None]).astype(np.int32)
    ids = rng.integers(2, 12, (4, 8)).astype(np.int32) * mask
    weights = (np.arange(8)[None, :] < lengths[:, None] - 1).astype(np.int32)
    labels = np.roll(ids, -1, 1) * weights
    params = init_params(funcs, 0, 8)
    settings = TrainSettings(epochs=1, batch_size=4, learning_rate=1e-3, crop_len=8)
    objective = metrics.next_token_objective(p3.next_token_loss)
    split = (ids, mask, labels, weights)
    trained = training.train(
        funcs, params, split, settings, objective=objective, progress=False, log=None
    )
    logits = np.asarray(funcs.model_fw.apply(params, ids, mask), np.float64)
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    nats = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    counted = weights == 1
    want = nats[counted].mean() / math.log(2)
    assert trained.history["loss"] == [pytest.approx(want, rel=1e-5)]
    assert want != pytest.approx(nats.mean() / math.log(2), rel=1e-3)  # padding would change it
    scored = evaluation.evaluate(params, funcs, split, objective=objective)
    assert scored.loss == pytest.approx(want, rel=1e-5)
    # the student's loss is what counts: a loss of nothing trains nothing
    idle = metrics.next_token_objective(lambda logits, ids, mask: 0.0 * logits.sum())
    still = training.train(funcs, params, split, settings, objective=idle, progress=False, log=None)
    assert still.history["loss"] == [0.0]
    # and the figures are the course's: a loss function is not the judge of its own run
    assert evaluation.evaluate(params, funcs, split, objective=idle).loss == pytest.approx(
        want, rel=1e-5
    )
