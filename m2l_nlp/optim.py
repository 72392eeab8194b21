"""The optimizer and the training state of the loop.

:func:`make_optimizer` is where the training settings meet optax: gradient clipping, then
AdamW with a linear warm-up and a cosine decay, weight decay on matrices only, and optionally
lazy rows for the embedding tables (:func:`lazy_rows`).
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


def _embedding_tables(params: hk.Params) -> Any:
    """True for the tables of ``hk.Embed`` (a parameter named ``embeddings``), else False."""
    return {
        module: {name: name == "embeddings" for name in leaves} for module, leaves in params.items()
    }


def lazy_rows(adam: optax.GradientTransformation, tables: Any) -> optax.GradientTransformation:
    """``adam`` (``optax.scale_by_adam``) made lazy for the rows of the ``tables`` leaves.

    A row of a table whose gradient is zero in a step (its token is in no review of the
    batch) keeps its two moments as they were and gets no update; every other row and
    parameter gets ``adam``'s. With dense Adam a token seen once keeps moving for dozens of
    steps on its momentum, about ten times as far as in the step that saw it.
    ``tables(params)`` gives True for each ``(V, D)`` leaf to treat so.
    """

    def update(grads, state, params=None):
        updates, new = adam.update(grads, state, params)

        def rows_seen(is_table, g):  # (V, 1) for a table, a scalar True for the rest
            return jnp.any(g != 0, axis=-1, keepdims=True) if is_table else jnp.bool_(True)

        seen = jax.tree_util.tree_map(rows_seen, tables(grads), grads)

        def keep(old, now):  # the rows of a table not seen keep their moments
            return jax.tree_util.tree_map(lambda s, o, n: jnp.where(s, n, o), seen, old, now)

        updates = jax.tree_util.tree_map(lambda s, u: jnp.where(s, u, 0.0), seen, updates)
        return updates, new._replace(mu=keep(state.mu, new.mu), nu=keep(state.nu, new.nu))

    return optax.GradientTransformation(adam.init, update)


@functools.lru_cache(maxsize=16)
def make_optimizer(settings: TrainSettings, total_steps: int) -> optax.GradientTransformation:
    """Gradient clipping (unless ``clip_norm`` is 0), then AdamW with linear warm-up and
    cosine decay (constant with ``final_lr_fraction=1`` and no warm-up), lazy for the
    embedding tables' rows with ``lazy_embeddings`` (:func:`lazy_rows`).

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
    adam = optax.scale_by_adam()  # optax.adamw's, spelled out so that its rows can be lazy
    if settings.lazy_embeddings:
        adam = lazy_rows(adam, _embedding_tables)
    adamw = optax.chain(
        adam,
        optax.add_decayed_weights(settings.weight_decay, _decay_mask),
        optax.scale_by_learning_rate(schedule),
    )
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
