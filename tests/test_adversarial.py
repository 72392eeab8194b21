"""Tests of m2l_nlp.adversarial: adversarial training on the token embeddings."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from m2l_nlp import adversarial, metrics, training
from m2l_nlp import model as models
from m2l_nlp.config import PRESETS, BaselineConfig, TrainSettings
from m2l_nlp.overrides import override

BINARY = metrics.BINARY
# the loop's gradient of a batch, with (apply, objective, micro, adversarial) static
_GRADS = jax.jit(training._loss_sum_and_grads, static_argnums=(6, 7, 8, 9))


def _batch(random_split, n=8, seed=1):
    ids, mask, labels = random_split(n, seed=seed, min_len=2)
    weights = np.ones(n, np.float32)
    weights[-1] = 0.0  # a padding row of a partial batch
    return jax.random.PRNGKey(4), ids, mask, labels.astype(np.float32), weights


@functools.cache
def _row_loss_fn(apply):
    loss = adversarial.embedding_loss(apply, BINARY)

    def rows(params, delta, key, ids, mask, labels):
        one = lambda weights: loss(params, delta, key, ids, mask, labels, weights)[0]
        return jax.vmap(one)(jnp.eye(len(ids)))

    return jax.jit(rows)


def _row_losses(tiny_model, params, delta, batch):
    """Each review's loss alone, with ``delta`` added to its embedding output."""
    return np.asarray(_row_loss_fn(tiny_model.model.apply)(params, delta, *batch[:4]))


def test_each_reviews_step_has_its_share_of_norm_and_raises_its_loss(
    tiny_model, tiny_params, random_split
):
    batch = _batch(random_split)
    apply = tiny_model.model.apply
    r = np.asarray(jax.jit(adversarial.perturbation(apply, BINARY, 0.05))(tiny_params, *batch))
    mask, weights = batch[2], batch[4]
    assert np.all(r[mask == 0] == 0)  # nothing moves at padding
    zeros = np.zeros_like(r)
    loss = jax.jit(adversarial.embedding_loss(apply, BINARY))
    norms = np.asarray(loss(tiny_params, zeros, *batch)[1][1])
    live = weights > 0
    np.testing.assert_allclose(np.linalg.norm(r, axis=(1, 2))[live], 0.05 * norms[live], rtol=1e-5)
    assert np.all(r[~live] == 0)  # a row that does not count has no gradient, so no step
    clean = _row_losses(tiny_model, tiny_params, zeros, batch)
    moved = _row_losses(tiny_model, tiny_params, r, batch)
    backwards = _row_losses(tiny_model, tiny_params, -r, batch)
    noise = np.asarray(jax.random.normal(jax.random.PRNGKey(9), r.shape)) * mask[..., None]
    noise *= (np.linalg.norm(r, axis=(1, 2)) / np.linalg.norm(noise, axis=(1, 2)))[:, None, None]
    randomly = _row_losses(tiny_model, tiny_params, noise, batch)
    assert np.all(moved[live] > clean[live])
    assert np.all(moved[live] > backwards[live])
    assert np.mean(moved[live] - clean[live]) > 3 * np.mean(np.abs(randomly - clean)[live])


def test_a_tiny_step_doubles_the_clean_gradient_and_a_real_one_does_not(
    tiny_model, tiny_params, random_split
):
    batch = _batch(random_split)
    apply = tiny_model.model.apply

    def grads(alpha):
        # full float32 products: a GPU's default TF32 ones differ by ~5e-6 here (H200)
        with jax.default_matmul_precision("highest"):
            return _GRADS(tiny_params, *batch, apply, BINARY, 1, alpha)

    total, _, plain = grads(0.0)

    def moved(alpha):
        loss, _, g = grads(alpha)
        assert float(loss) == pytest.approx(float(total))  # the clean pass's sums
        return g

    doubled = jax.tree_util.tree_map(lambda g: 2 * g, plain)
    leaves = lambda tree: np.concatenate([np.ravel(x) for x in jax.tree_util.tree_leaves(tree)])
    np.testing.assert_allclose(leaves(moved(1e-6)), leaves(doubled), rtol=1e-3, atol=1e-6)
    gap = np.abs(leaves(moved(0.1)) - leaves(doubled)).max()
    assert gap > 1e-2 * np.abs(leaves(doubled)).max()


def test_micro_batches_give_the_adversarial_gradient_of_the_whole_batch(
    tiny_config, tiny_params, random_split
):
    """Each review's step depends on that review alone (no dropout: micro-batches draw
    their own keys)."""
    batch = _batch(random_split)
    apply = models.classifier(dataclasses.replace(tiny_config, p_dropout=0.0)).model.apply
    grads = _GRADS
    whole = grads(tiny_params, *batch, apply, BINARY, 1, 0.05)
    pieces = grads(tiny_params, *batch, apply, BINARY, 4, 0.05)
    leaves = jax.tree_util.tree_leaves
    for a, b in zip(leaves(whole), leaves(pieces), strict=True):
        np.testing.assert_allclose(b, a, rtol=1e-4, atol=1e-6)
    plain = grads(tiny_params, *batch, apply, BINARY, 4, 0.0)
    assert np.abs(leaves(pieces)[-1] - leaves(plain)[-1]).max() > 1e-3  # the step is taken


def test_training_with_it_learns_and_only_the_transformer_takes_it(
    tiny_model, tiny_params, signal_split, random_split
):
    split = signal_split(256, seed=6)
    settings = TrainSettings(
        epochs=6, batch_size=16, learning_rate=1e-2, crop_len=32, seed=3, adversarial=0.05
    )
    run = lambda s: training.train(tiny_model, tiny_params, split, s, progress=False, log=None)
    history = run(settings).history
    assert history["loss"][-1] < history["loss"][0] and history["train_acc"][-1] > 0.9
    with pytest.raises(ValueError, match="adversarial"):
        TrainSettings(adversarial=-0.1)
    with pytest.raises(ValueError, match="train.adversarial"):  # refused before any data
        override(PRESETS["bow-mlp"], ["train.adversarial=0.03"]).check()
    override(PRESETS["default"], ["train.adversarial=0.03"]).check()
    bag = models.baseline(BaselineConfig(model="bow-mlp"), 50)
    ids = jnp.asarray(random_split(4)[0])
    params = bag.init_params(jax.random.PRNGKey(0), ids, ids > 0, True)
    with pytest.raises(ValueError, match="train.adversarial=0"):
        adversarial.value_and_grad(bag.model.apply, BINARY, 0.05)(params, *_batch(random_split, 4))
