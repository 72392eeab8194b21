"""Tests of m2l_nlp.optim: weight decay on matrices only, the moving average of the weights."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from m2l_nlp import optim


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
