"""Tests of m2l_nlp.train.optim: weight decay on matrices only, AdamW with clipping, the
moving average of the weights."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax

from m2l_nlp.config import TrainSettings
from m2l_nlp.train import optim


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
