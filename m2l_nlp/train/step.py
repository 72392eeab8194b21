"""One training step: the function every training run of the course repeats.

A step is the course's recipe, in two halves:

1. :func:`gradient`: the model (``model.model.apply``, made by ``funcs_from_stateful`` from a
   student's forward function) scores a batch, the objective turns the scores into a mean
   loss, and ``jax.value_and_grad`` differentiates it with respect to the parameters;
2. :func:`update`: the optimizer (optax) turns the gradient into new parameters.

:func:`train_step` is the two halves as one jitted function, on a batch given as arrays.
The loop (:mod:`m2l_nlp.train.loop`) runs the same two halves on batches it cuts on the
device; its speed machinery (length buckets, micro-batches, several steps per call, device
placement) sits around them and changes no number they compute.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import haiku as hk
import jax
import jax.numpy as jnp
import optax

from m2l_nlp.data import batching
from m2l_nlp.train import metrics
from m2l_nlp.train.metrics import Objective
from m2l_nlp.train.optim import TrainState, update_ema
from m2l_nlp.transform import ModelFuncs

Apply = Callable[..., jax.Array]  # apply(params, key, ids, mask, is_train) -> outputs (B, ...)


def gradient(
    params: hk.Params,
    key: jax.Array,
    ids: jax.Array,
    mask: jax.Array,
    labels: jax.Array,
    weights: jax.Array | None,
    apply: Apply,
    objective: Objective,
    micro: int = 1,
    tie: Callable[[hk.Params], hk.Params] | None = None,
) -> tuple[hk.Params, jax.Array, jax.Array]:
    """Gradient of the mean row loss of a batch ``ids, mask (B, W)``, ``labels (B, ...)``,
    rows weighted by ``weights (B,)`` (None: all 1); returns ``(grads, loss, n_correct)``.

    ``micro > 1`` runs the batch as that many micro-batches and sums their gradients: the
    same gradient, with one micro-batch's activations alive at a time (:func:`_sums`).
    With ``tie`` the model reads ``tie(params)``: the micro-batches run on those, and their
    summed gradient is pulled back through the tie once."""
    weights = jnp.ones(labels.shape[:1], jnp.float32) if weights is None else weights
    weights = weights.astype(jnp.float32)
    read, pull_back = jax.vjp(tie, params) if tie is not None else (params, None)
    total, hits, grads = _sums(read, key, ids, mask, labels, weights, apply, objective, micro)
    grads = grads if tie is None else pull_back(grads)[0]
    count = jnp.maximum(weights.sum(), 1.0)
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
    jax.jit, static_argnames=("model", "optimizer", "objective", "micro"), donate_argnames="state"
)
def train_step(
    state: TrainState,
    key: jax.Array,
    ids: jax.Array,
    mask: jax.Array,
    labels: jax.Array,
    weights: jax.Array | None = None,
    *,
    model: ModelFuncs,
    optimizer: optax.GradientTransformation,
    objective: Objective = metrics.BINARY,
    micro: int = 1,
) -> tuple[TrainState, jax.Array, jax.Array]:
    """One jitted gradient step on a batch ``ids, mask (B, W)``, ``labels (B, ...)``.

    ``model``, ``optimizer`` and ``objective`` are static: passing a different optimizer
    (another learning rate, another schedule) compiles a new step, so the change is never
    silently ignored. ``state`` is donated: do not use the old one afterwards. ``micro``
    (static) splits the batch into that many micro-batches whose gradients are summed.

    Returns ``(new_state, mean loss, number of correct predictions)``.
    """
    apply = model.model.apply
    grads, loss, hits = gradient(
        state.params, key, ids, mask, labels, weights, apply, objective, micro
    )
    return update(state, grads, optimizer), loss, hits


def _sums(params, key, ids, mask, labels, weights, apply, objective, micro):
    """Weighted sums of the row losses and accuracies, and the summed loss's gradient.

    With ``micro > 1`` the batch is processed as ``micro`` micro-batches in a ``lax.scan``
    and the gradients are summed (gradient accumulation): the result is the same as one
    pass over the whole batch, but only one micro-batch's activations (above all its
    ``(b, h, W, W)`` attention weights) are alive at a time, which on a CPU keeps them in
    cache. Rows ``i * micro + k`` form micro-batch ``k``, so with the batch sharded over
    several devices every micro-batch is too.
    """

    def loss_sum(params, key, ids, mask, labels, weights):
        return objective.weighted_sums(apply(params, key, ids, mask, True), labels, weights)

    grad_fn = jax.value_and_grad(loss_sum, has_aux=True)
    if micro == 1:
        (total, hits), grads = grad_fn(params, key, ids, mask, labels, weights)
        return total, hits, grads

    def body(acc, inputs):
        (total, hits), grads = grad_fn(params, *inputs)
        return jax.tree_util.tree_map(jnp.add, acc, (total, hits, grads)), None

    zero = jnp.zeros((), jnp.float32)
    zeros = (zero, zero, jax.tree_util.tree_map(jnp.zeros_like, params))
    pieces = [batching.split_rows(x, micro) for x in (ids, mask, labels, weights)]
    (total, hits, grads), _ = jax.lax.scan(body, zeros, (jax.random.split(key, micro), *pieces))
    return total, hits, grads
