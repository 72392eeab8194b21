"""Tests of m2l_nlp.model: building the classifier and initialising its parameters."""

from __future__ import annotations

import jax
import numpy as np

from m2l_nlp import model as models


def test_init_params_scales_only_the_embeddings(tiny_model, tiny_config):
    key, max_len = jax.random.PRNGKey(0), tiny_config.max_len
    base = models.init_params(tiny_model, key, max_len)
    small = models.init_params(tiny_model, key, max_len, embed_scale=0.1)
    for module, leaves in base.items():
        for name, value in leaves.items():
            factor = 0.1 if name == "embeddings" else 1.0
            np.testing.assert_allclose(small[module][name], value * factor, rtol=1e-6)
