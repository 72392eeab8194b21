"""Tests of m2l_nlp.optim: weight decay on matrices only, AdamW and its lazy table rows, the
moving average of the weights."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax

from m2l_nlp import optim
from m2l_nlp.config import TrainSettings


def test_weight_decay_spares_biases_and_norms(tiny_params):
    mask = optim._decay_mask(tiny_params)
    assert mask["classifier/~/head"]["w"] and not mask["classifier/~/head"]["b"]
    norm = next(k for k in mask if k.endswith("norm_1"))
    assert not mask[norm]["scale"]


def test_update_ema_moves_the_average_toward_the_parameters():
    params = {"m": {"w": jnp.ones(3)}}
    state = optim.TrainState(params, (), (jnp.array(0), {"m": {"w": jnp.zeros(3)}}))
    first = optim.update_ema(state, 0.99)  # step 0: rate 1 - 1/10
    np.testing.assert_allclose(first.ema[1]["m"]["w"], 0.9, rtol=1e-6)
    assert int(first.ema[0]) == 1
    late = optim.update_ema(state._replace(ema=(jnp.array(10**6), state.ema[1])), 0.99)
    np.testing.assert_allclose(late.ema[1]["m"]["w"], 0.01, rtol=1e-4)  # rate 1 - decay
    assert optim.eval_params(late) is late.ema[1]
    assert optim.eval_params(state._replace(ema=None)) is params


def _run(optimizer, params, grads_per_step):
    state = optimizer.init(params)
    for grads in grads_per_step:
        updates, state = optimizer.update(grads, state, params)
        params = optax.apply_updates(params, updates)
    return params, state


def _table_params_and_grads(steps: int, rows_seen):
    """A (6, 4) embedding table and a linear layer; ``rows_seen(t)``: the table's rows
    with a gradient at step ``t`` (the others get exact zeros, as an absent token does)."""
    key = jax.random.PRNGKey(0)
    params = {
        "m/~/embed": {"embeddings": jax.random.normal(key, (6, 4))},
        "m/~/linear": {"w": jax.random.normal(key, (4, 2)), "b": jax.random.normal(key, (2,))},
    }
    grads = []
    for t in range(steps):
        g = jax.tree_util.tree_map(
            lambda p, t=t: jax.random.normal(jax.random.PRNGKey(t + 1), p.shape), params
        )
        seen = jnp.zeros(6, bool).at[jnp.asarray(rows_seen(t), int)].set(True)
        g["m/~/embed"]["embeddings"] = jnp.where(seen[:, None], g["m/~/embed"]["embeddings"], 0.0)
        grads.append(g)
    return params, grads


def test_the_optimizer_is_optax_adamw_with_clipping():
    settings = TrainSettings(learning_rate=1e-2, weight_decay=0.1, warmup_fraction=0.1)
    params, grads = _table_params_and_grads(12, lambda t: [t % 6])
    schedule = optax.warmup_cosine_decay_schedule(0.0, 1e-2, 1, 12, 1e-2 * 0.02)
    reference = optax.chain(
        optax.clip_by_global_norm(1.0),
        optax.adamw(schedule, weight_decay=0.1, mask=optim._decay_mask),
    )
    ours, _ = _run(optim.make_optimizer(settings, 12), params, grads)
    theirs, _ = _run(reference, params, grads)
    for a, b in zip(
        jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(theirs), strict=True
    ):
        np.testing.assert_array_equal(a, b)


def _constant_rate(**changes) -> TrainSettings:
    """Adam at a constant learning rate of 1e-2, no clipping."""
    return TrainSettings(
        learning_rate=1e-2, clip_norm=0.0, warmup_fraction=0.0, final_lr_fraction=1.0, **changes
    )


def test_lazy_rows_move_only_in_steps_that_see_them():
    settings = _constant_rate(weight_decay=0.0)
    lazy = optim.make_optimizer(dataclasses.replace(settings, lazy_embeddings=True), 10)
    dense = optim.make_optimizer(settings, 10)
    # row 0 in every step, row 1 only in the first, rows 2-5 never
    params, grads = _table_params_and_grads(10, lambda t: [0, 1] if t == 0 else [0])
    lazy_params, lazy_state = _run(lazy, params, grads)
    dense_params, _ = _run(dense, params, grads)
    table = params["m/~/embed"]["embeddings"]
    lazy_table = lazy_params["m/~/embed"]["embeddings"]
    dense_table = dense_params["m/~/embed"]["embeddings"]
    np.testing.assert_allclose(lazy_table[0], dense_table[0], rtol=1e-6)  # seen: Adam's step
    np.testing.assert_array_equal(lazy_table[2:], table[2:])  # never seen: never moved
    # row 1 moved in step 0 only: one learning rate per coordinate (Adam's first step)
    np.testing.assert_allclose(np.abs(lazy_table[1] - table[1]), 1e-2, rtol=1e-4)
    # dense Adam carried it on for nine more steps on its momentum
    assert np.all(np.abs(dense_table[1] - table[1]) > 3 * 1e-2)
    adam_state = lazy_state[0]
    mu = adam_state.mu["m/~/embed"]["embeddings"]
    assert np.all(mu[2:] == 0) and np.all(mu[1] != 0)
    np.testing.assert_allclose(mu[1], 0.1 * grads[0]["m/~/embed"]["embeddings"][1], rtol=1e-6)
    # the matrix is no table: lazy or not, the same AdamW steps
    np.testing.assert_array_equal(lazy_params["m/~/linear"]["w"], dense_params["m/~/linear"]["w"])


def test_lazy_rows_still_decay():
    settings = _constant_rate(weight_decay=0.5, lazy_embeddings=True)
    params, grads = _table_params_and_grads(4, lambda t: [0])
    out, _ = _run(optim.make_optimizer(settings, 4), params, grads)
    table = params["m/~/embed"]["embeddings"]
    np.testing.assert_allclose(
        out["m/~/embed"]["embeddings"][3], table[3] * (1 - 1e-2 * 0.5) ** 4, rtol=1e-6
    )
