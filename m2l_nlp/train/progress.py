"""Where the training loop stands after an epoch, as plain host arrays (a run folder saves it)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np

if TYPE_CHECKING:
    from m2l_nlp.train.metrics import EvalResult


class BestEpoch(NamedTuple):
    """The evaluated epoch kept so far (``keep_best``): its score ``(accuracy, -loss)``, its
    number (1-based), its parameters and its evaluation."""

    score: tuple[float, float]
    epoch: int
    params: Any  # the params' pytree in the loop; their flat leaves in a Progress
    result: EvalResult


class Progress(NamedTuple):
    """The training loop (:func:`m2l_nlp.train.loop.train`) after a completed epoch, on the
    host: enough to continue it exactly.

    ``state`` and the best epoch's parameters are flat lists of arrays (the leaves of the
    :class:`~m2l_nlp.train.optim.TrainState` and of the params, in ``jax.tree_util`` order), so
    that they can be saved as plain arrays (:func:`progress_to_save`).
    """

    epoch: int  # epochs completed
    state: list[np.ndarray]
    history: dict[str, list[float]]
    best: BestEpoch | None = None  # its params: flat leaves
    result: EvalResult | None = None  # the last evaluation
