"""The optimizer and the training state of the loop.

:func:`make_optimizer` is where the training settings meet optax: gradient clipping, then
AdamW with a linear warm-up and a cosine decay, weight decay on matrices only.
:class:`TrainState` is what changes during training, with an optional moving average of the
parameters (:func:`update_ema`).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from m2l_nlp.config import TrainSettings


def _decay_mask(params: hk.Params) -> Any:
    return jax.tree_util.tree_map(lambda p: p.ndim >= 2, params)


@functools.lru_cache(maxsize=16)
def make_optimizer(settings: TrainSettings, total_steps: int) -> optax.GradientTransformation:
    """Gradient clipping (unless ``clip_norm`` is 0), then AdamW with linear warm-up and
    cosine decay (constant with ``final_lr_fraction=1`` and no warm-up).

    The same settings and step count give the same object, so the jitted steps that take
    the optimizer as a static argument compile once for both runs."""
    total_steps = max(int(total_steps), 1)
    warmup = min(round(settings.warmup_fraction * total_steps), total_steps - 1)
    end_value = settings.learning_rate * settings.final_lr_fraction
    if warmup > 0:
        schedule = optax.warmup_cosine_decay_schedule(
            init_value=0.0,
            peak_value=settings.learning_rate,
            warmup_steps=warmup,
            decay_steps=total_steps,
            end_value=end_value,
        )
    else:
        schedule = optax.cosine_decay_schedule(
            settings.learning_rate, total_steps, alpha=settings.final_lr_fraction
        )
    adamw = optax.adamw(schedule, weight_decay=settings.weight_decay, mask=_decay_mask)
    if not settings.clip_norm:
        return adamw
    return optax.chain(optax.clip_by_global_norm(settings.clip_norm), adamw)


class TrainState(NamedTuple):
    """What changes during training: the parameters, the optimizer's state and, if on,
    the moving average of the parameters ``(number of updates, averaged params)``."""

    params: hk.Params
    opt_state: optax.OptState
    ema: tuple[jax.Array, hk.Params] | None = None


def init_state(
    params: hk.Params, optimizer: optax.GradientTransformation, ema: bool = False
) -> TrainState:
    average = (jnp.zeros((), jnp.int32), jax.tree_util.tree_map(jnp.copy, params)) if ema else None
    return TrainState(params, optimizer.init(params), average)


def update_ema(state: TrainState, decay: float) -> TrainState:
    """One step of the exponential moving average of the parameters (Polyak averaging).

    The decay ramps up as ``min(decay, (1 + t) / (10 + t))`` after ``t`` updates, so the
    average forgets the random initial parameters quickly.
    """
    count, average = state.ema
    rate = 1.0 - jnp.minimum(decay, (1.0 + count) / (10.0 + count))
    average = jax.tree_util.tree_map(lambda a, p: a + rate * (p - a), average, state.params)
    return state._replace(ema=(count + 1, average))


def eval_params(state: TrainState) -> hk.Params:
    """The parameters to evaluate and keep: the moving average if there is one."""
    return state.params if state.ema is None else state.ema[1]
