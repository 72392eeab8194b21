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


def test_weight_decay_shrinks_matrices_only_and_warm_up_starts_at_zero():
    settings = TrainSettings(learning_rate=1e-2, weight_decay=0.5, warmup_fraction=0.5)
    params = {"m/~/linear": {"w": jnp.ones((4, 2)), "b": jnp.ones((2,))}}
    zero = jax.tree_util.tree_map(jnp.zeros_like, params)
    optimizer = optim.make_optimizer(settings, 10)
    first, _ = _run(optimizer, params, [zero])
    assert jax.tree_util.tree_all(jax.tree_util.tree_map(jnp.array_equal, first, params))
    later, _ = _run(optimizer, params, [zero] * 6)  # no gradient: only the decay moves them
    assert float(later["m/~/linear"]["w"].max()) < 1.0
    np.testing.assert_array_equal(later["m/~/linear"]["b"], params["m/~/linear"]["b"])


def test_init_state_starts_the_average_at_a_copy_of_the_parameters_when_asked():
    params = {"m/~/linear": {"w": jnp.ones((2, 2)), "b": jnp.zeros(2)}}
    optimizer = optax.adam(1e-3)
    plain = optim.init_state(params, optimizer)
    assert plain.params is params and plain.ema is None
    assert jax.tree_util.tree_structure(plain.opt_state) == jax.tree_util.tree_structure(
        optimizer.init(params)
    )
    averaged = optim.init_state(params, optimizer, ema=True)
    count, average = averaged.ema
    assert int(count) == 0 and count.dtype == jnp.int32
    np.testing.assert_array_equal(average["m/~/linear"]["w"], params["m/~/linear"]["w"])
    assert average["m/~/linear"]["w"] is not params["m/~/linear"]["w"]  # its own buffer
