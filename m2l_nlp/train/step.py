"""One training step: the function every training run of the course repeats.

:func:`train_step` is the course's recipe, in two halves:

1. :func:`gradient`: the model (``model.model.apply``, made by ``funcs_from_stateful`` from a
   student's forward function) scores a :class:`Batch`, the objective turns the scores into
   a mean loss over what counts, and ``jax.value_and_grad`` differentiates it with respect
   to the parameters;
2. :func:`update`: the optimizer (optax) turns the gradient into new parameters.

The loop (:mod:`m2l_nlp.train.loop`) calls :func:`train_step` on the batches it cuts on the
device: one step per compiled call, or K of them in a ``lax.scan``. Its speed machinery
(length buckets, micro-batches, device placement) sits around the step and changes no
number it computes.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from m2l_nlp.data import batching
from m2l_nlp.train import metrics
from m2l_nlp.train.metrics import Objective
from m2l_nlp.train.optim import TrainState, update_ema
from m2l_nlp.transform import ModelFuncs

Apply = Callable[..., jax.Array]  # apply(params, key, *inputs, is_train) -> outputs (B, ...)


class Batch(NamedTuple):
    """One batch of a task: what the model reads, what it should predict, and what counts.

    ``inputs`` are the forward's arguments (``(ids, mask)``, each ``(B, W)``, for the
    classifier; ``(source, source_mask, target, target_mask)`` for the translator);
    ``labels`` are ``(B, ...)``; ``weights`` have the shape of the objective's losses:
    ``(B,)`` a weight per row, or ``(B, S)`` a weight per token, 0 for padding."""

    inputs: tuple[jax.Array, ...]
    labels: jax.Array
    weights: jax.Array


def gradient(
    params: hk.Params,
    key: jax.Array,
    batch: Batch,
    apply: Apply,
    objective: Objective,
    micro: int = 1,
    tie: Callable[[hk.Params], hk.Params] | None = None,
) -> tuple[hk.Params, jax.Array, jax.Array]:
    """Gradient of the batch's mean loss over what counts (the losses weighted by
    ``batch.weights``, divided by their sum); returns ``(grads, mean loss, hits)``.

    ``micro > 1`` runs the batch as that many micro-batches and sums their gradients: the
    same gradient, with one micro-batch's activations alive at a time (:func:`_sums`).
    With ``tie`` the model reads ``tie(params)``: the micro-batches run on those, and their
    summed gradient is pulled back through the tie once."""
    batch = batch._replace(weights=batch.weights.astype(jnp.float32))
    read, pull_back = jax.vjp(tie, params) if tie is not None else (params, None)
    total, hits, grads = _sums(read, key, batch, apply, objective, micro)
    grads = grads if tie is None else pull_back(grads)[0]
    count = jnp.maximum(batch.weights.sum(), 1.0)
    return jax.tree_util.tree_map(lambda g: g / count, grads), total / count, hits


def update(
    state: TrainState,
    grads: hk.Params,
    optimizer: optax.GradientTransformation,
    ema_decay: float = 0.0,
) -> TrainState:
    """The optimizer's step with ``grads``, then the weight average's (if ``ema_decay``)."""
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    state = state._replace(params=params, opt_state=opt_state)
    return update_ema(state, ema_decay) if ema_decay > 0 else state


@functools.partial(
    jax.jit,
    static_argnames=("model", "optimizer", "objective", "micro", "ema_decay", "tie"),
    donate_argnames="state",
)
def train_step(
    state: TrainState,
    key: jax.Array,
    batch: Batch,
    *,
    model: ModelFuncs,
    optimizer: optax.GradientTransformation,
    objective: Objective = metrics.BINARY,
    micro: int = 1,
    ema_decay: float = 0.0,
    tie: Callable[[hk.Params], hk.Params] | None = None,
) -> tuple[TrainState, jax.Array, jax.Array]:
    """One gradient step on ``batch``: returns ``(new state, mean loss, hits)``.

    ``model``, ``optimizer`` and ``objective`` are static: passing a different optimizer
    (another learning rate, another schedule) compiles a new step, so the change is never
    silently ignored. ``state`` is donated: do not use the old one afterwards. ``micro``
    splits the batch into that many micro-batches whose gradients are summed; ``ema_decay``
    keeps a moving average of the parameters; ``tie`` as in :func:`gradient`."""
    grads, loss, hits = gradient(state.params, key, batch, model.model.apply, objective, micro, tie)
    # The optimizer reads the finished gradient: XLA may not fuse its update into the
    # backward pass, so a step's numbers do not depend on how many steps a call runs.
    grads = jax.lax.optimization_barrier(grads)
    return update(state, grads, optimizer, ema_decay), loss, hits


def _sums(params, key, batch: Batch, apply, objective, micro):
    """Weighted sums of the losses and accuracies, and the summed loss's gradient.

    With ``micro > 1`` the batch is processed as ``micro`` micro-batches in a ``lax.scan``
    and the gradients are summed (gradient accumulation): the result is the same as one
    pass over the whole batch, but only one micro-batch's activations (above all its
    ``(b, h, W, W)`` attention weights) are alive at a time, which on a CPU keeps them in
    cache. Rows ``i * micro + k`` form micro-batch ``k``, so with the batch sharded over
    several devices every micro-batch is too.
    """

    def loss_sum(params, key, batch):
        outputs = apply(params, key, *batch.inputs, True)
        return objective.weighted_sums(outputs, batch.labels, batch.weights)

    grad_fn = jax.value_and_grad(loss_sum, has_aux=True)
    if micro == 1:
        (total, hits), grads = grad_fn(params, key, batch)
        return total, hits, grads

    def body(acc, inputs):
        (total, hits), grads = grad_fn(params, *inputs)
        return jax.tree_util.tree_map(jnp.add, acc, (total, hits, grads)), None

    zero = jnp.zeros((), jnp.float32)
    zeros = (zero, zero, jax.tree_util.tree_map(jnp.zeros_like, params))
    pieces = jax.tree_util.tree_map(lambda x: batching.split_rows(x, micro), batch)
    (total, hits, grads), _ = jax.lax.scan(body, zeros, (jax.random.split(key, micro), pieces))
    return total, hits, grads
