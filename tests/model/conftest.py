"""What the tests of the models share."""

from __future__ import annotations

from collections.abc import Callable

import jax
import numpy as np
import pytest


@pytest.fixture(scope="session")
def moved_params() -> Callable:
    """``move(params)``: each parameter plus 0.3 of a standard normal draw (seed 0), away from
    the initial LayerNorms and zero biases, where a term left out could go unseen; on the host,
    so that no program is compiled per shape of parameter."""

    def move(params):
        rng = np.random.default_rng(0)

        def moved(p):
            return np.asarray(p) + 0.3 * rng.standard_normal(p.shape).astype(np.float32)

        return jax.tree_util.tree_map(moved, params)

    return move
