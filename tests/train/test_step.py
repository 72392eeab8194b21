"""Tests of m2l_nlp.train.step: the jitted step's gradient and update (micro-batches, ties)."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from m2l_nlp.config import TrainSettings
from m2l_nlp.model import classifiers as models
from m2l_nlp.train import optim, step


def _delta(model, params, optimizer, random_split):
    ids, mask, labels = random_split(8, seed=1, min_len=2)
    state = optim.init_state(jax.tree_util.tree_map(jnp.array, params), optimizer)
    batch = step.Batch((ids, mask), labels, np.ones(len(labels), np.float32))
    new, loss, correct = step.train_step(
        state, jax.random.PRNGKey(1), batch, model=model, optimizer=optimizer
    )
    assert np.isfinite(float(loss)) and 0 <= float(correct) <= 8
    leaf = lambda p: np.asarray(p["classifier/~/head"]["w"])
    return leaf(new.params) - leaf(params)


def test_train_step_uses_the_optimizer_it_is_given(tiny_model, tiny_params, random_split):
    """The tutorial's bug: a step reading a global optimizer ignores a later change."""
    delta = lambda optimizer: _delta(tiny_model, tiny_params, optimizer, random_split)
    big = delta(optax.sgd(0.1))
    small = delta(optax.sgd(0.01))  # same step function, new optimizer
    frozen = delta(optax.sgd(0.0))
    assert np.abs(big).max() > 0
    np.testing.assert_allclose(small, big / 10, rtol=1e-4, atol=1e-8)
    np.testing.assert_array_equal(frozen, 0)


def test_schedule_change_takes_effect(tiny_model, tiny_params, random_split):
    delta = lambda optimizer: _delta(tiny_model, tiny_params, optimizer, random_split)
    settings = TrainSettings(learning_rate=1e-2, warmup_fraction=0.5)
    warm = delta(optim.make_optimizer(settings, total_steps=100))
    # step 0 of a warm-up starts at learning rate 0: no change at all
    np.testing.assert_array_equal(warm, 0)
    settings = TrainSettings(learning_rate=1e-2, warmup_fraction=0.0)
    hot = delta(optim.make_optimizer(settings, total_steps=100))
    assert np.abs(hot).max() > 1e-4


@pytest.mark.parametrize("micro", [2, 4])
def test_micro_batched_step_makes_the_same_update(tiny_config, tiny_params, random_split, micro):
    """Gradient accumulation over micro-batches gives the update of the whole batch."""
    params = tiny_params
    model = models.classifier(dataclasses.replace(tiny_config, p_dropout=0.0))
    ids, mask, labels = random_split(8, seed=3, min_len=2)
    weights = np.array([1, 1, 0, 1, 1, 1, 0, 1], np.float32)  # padding rows are ignored
    optimizer = optax.sgd(0.5)
    results = []
    for m in (1, micro):
        state = optim.init_state(jax.tree_util.tree_map(jnp.array, params), optimizer)
        batch = step.Batch((ids, mask), labels, weights)
        new, loss, correct = step.train_step(
            state, jax.random.PRNGKey(1), batch, model=model, optimizer=optimizer, micro=m
        )
        results.append((jax.device_get(new.params), float(loss), float(correct)))
    (p1, loss1, c1), (pm, lossm, cm) = results
    assert lossm == pytest.approx(loss1, rel=1e-5) and cm == c1
    moved = jax.tree_util.tree_map(lambda a, b: np.abs(a - b).max(), p1, params)
    assert max(jax.tree_util.tree_leaves(moved)) > 1e-3  # the step did something
    jax.tree_util.tree_map(
        lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-6), p1, pm
    )
