"""The one training loop of the course, on CPU, GPU or many devices.

Every task runs through :func:`train`: practical 2's transformer, practical 1's baselines and
the reverse-sequence task. A task brings its model (:class:`~m2l_nlp.transform.ModelFuncs`,
made by ``funcs_from_stateful``) and its :class:`~m2l_nlp.metrics.Objective` (loss and
accuracy per row); the loop brings the rest. :func:`m2l_nlp.experiment.train_and_evaluate`
wraps it into the whole job of ``m2l-nlp train`` and of the notebooks.

Speed: the data go to the device(s) once and each epoch uploads only a small plan; batches
are cut to a few fixed widths (length buckets) and, on a CPU, run as cache-sized
micro-batches (:mod:`m2l_nlp.batching`); the step donates its state and returns running
sums, read once per epoch, so nothing waits on the host inside an epoch.

The step reads its optimizer from its arguments (it is a static argument of the jit), never
from a global: a new optimizer or schedule means a new compiled step, so it takes effect.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from m2l_nlp import batching, devices, metrics
from m2l_nlp.batching import DeviceData
from m2l_nlp.config import TrainSettings
from m2l_nlp.evaluation import evaluate
from m2l_nlp.metrics import EvalResult, Objective
from m2l_nlp.optim import TrainState, eval_params, init_state, make_optimizer, update_ema
from m2l_nlp.runs import Progress
from m2l_nlp.splits import Split
from m2l_nlp.transform import ModelFuncs


def _loss_sum_and_grads(params, key, ids, mask, labels, weights, apply, objective, micro):
    """Weighted sums of the row losses and accuracies, and the loss's gradient.

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


def _mean_grads(params, key, ids, mask, labels, weights, apply, objective, micro=1, tie=None):
    """Gradient of the mean row loss of one batch; returns ``(grads, loss, n_correct)``.

    With ``tie`` the model reads ``tie(params)``: the micro-batches are run on those, and
    their summed gradient is pulled back through the tie once."""
    weights = jnp.ones(labels.shape[:1], jnp.float32) if weights is None else weights
    weights = weights.astype(jnp.float32)
    read, pull_back = jax.vjp(tie, params) if tie is not None else (params, None)
    total, hits, grads = _loss_sum_and_grads(
        read, key, ids, mask, labels, weights, apply, objective, micro
    )
    grads = grads if tie is None else pull_back(grads)[0]
    count = jnp.maximum(weights.sum(), 1.0)
    return jax.tree_util.tree_map(lambda g: g / count, grads), total / count, hits


def _apply_grads(state, grads, optimizer, ema_decay=0.0):
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
    grads, loss, hits = _mean_grads(
        state.params, key, ids, mask, labels, weights, model.model.apply, objective, micro
    )
    return _apply_grads(state, grads, optimizer), loss, hits


class DivergedError(ValueError):
    """The training loss stopped being finite; the message says what to try."""

    def __init__(self, epoch: int, loss: float, learning_rate: float):
        self.epoch = epoch  # the first epoch whose loss was not finite (1-based)
        super().__init__(
            f"the training loss became {loss} in epoch {epoch}: training diverged; try a lower "
            f"learning rate (train.learning_rate is {learning_rate:g}; e.g. {learning_rate / 4:g})"
        )


class TrainResult(NamedTuple):
    """Final parameters and the per-epoch history (lists keyed by metric name)."""

    params: hk.Params
    history: dict[str, list[float]]
    eval_result: EvalResult | None
    best_epoch: int | None = None  # 1-based epoch whose parameters were returned


@functools.partial(jax.jit, static_argnums=(1, 2))
def _fresh_state(params: hk.Params, optimizer, ema: bool) -> TrainState:
    """A new training state for ``params``, on copies of them (the steps donate their
    state): one program, where eager copies and zeros would compile one per shape."""
    return init_state(jax.tree_util.tree_map(jnp.copy, params), optimizer, ema)


@jax.jit
def _epoch_key(seed: int, epoch: int) -> jax.Array:
    """The key of one epoch's crops and dropout: one small program for every epoch."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), epoch)


@functools.lru_cache(maxsize=8)
def _make_epoch_step(
    model: ModelFuncs,
    optimizer: optax.GradientTransformation,
    objective: Objective,
    mesh,
    token_dropout: float = 0.0,
    ema_decay: float = 0.0,
    tie: Callable | None = None,
) -> Callable:
    """The jitted epoch step: ``step(state, sums, at, key, data, plan, width, micro)`` runs
    call ``at`` of the epoch (a device scalar, returned plus one). ``plan`` is the epoch's
    ``(idx, starts, weights, group_js, group_valid)`` on the device: the call runs the steps
    of batches ``group_js[at]`` (``(K,)``) that ``group_valid[at]`` counts, in a ``lax.scan``
    when K > 1. A step that does not count leaves the state and the sums as they were
    (optimizer count and weight average included), so the result is that of the counted
    steps run one by one; K is part of the shapes, so one program serves every epoch. With
    K = 1 a step is two programs: the gradient (per width) and the update (once). Made once
    per model, optimizer and settings: a run started again reuses the programs.

    Every argument is a buffer placed once per epoch or one the previous call gave back
    (donated): calls pass the same device addresses, so XLA replays its CUDA graphs of them
    on a GPU (it records a graph again when an address it captured changes)."""
    shard = devices.batch_sharded(mesh)
    out = devices.replicated(mesh)

    def batch_grads(params, sums, key, data, plan, j, width, micro):
        idx, starts, weights = (a[j] for a in plan[:3])
        ids, mask, labels = batching.gather(data, idx, starts, width)
        step_key, drop_key = jax.random.split(jax.random.fold_in(key, j))
        if token_dropout > 0:  # word dropout: hidden tokens become padding
            mask = mask * jax.random.bernoulli(drop_key, 1 - token_dropout, mask.shape)
            ids = ids * mask
        ids, mask, labels, weights = jax.lax.with_sharding_constraint(
            (ids, mask, labels, weights), shard
        )
        apply = model.model.apply
        grads, loss, correct = _mean_grads(
            params, step_key, ids, mask, labels, weights, apply, objective, micro, tie
        )
        count = weights.sum()
        return grads, sums + jnp.stack([loss * count, correct, count])

    def advance(state, grads):
        return _apply_grads(state, grads, optimizer, ema_decay)

    # One step per call (K = 1): the gradient (one program per width) and the update (one
    # program for every width) are compiled apart, so each width compiles only the model's
    # forward and backward pass, not another copy of the optimizer and the weight average.
    def first_grads(params, sums, at, key, data, plan, width, micro):
        *_, group_js, _ = plan
        grads, sums = batch_grads(params, sums, key, data, plan, group_js[at, 0], width, micro)
        return grads, sums, at + 1

    jit = functools.partial(jax.jit, static_argnames=("width", "micro"))
    grads_program = jit(first_grads, donate_argnames=("sums", "at"), out_shardings=(out,) * 3)
    update_program = jax.jit(advance, donate_argnames="state", out_shardings=out)

    @functools.partial(jit, donate_argnames=("state", "sums", "at"), out_shardings=(out,) * 3)
    def steps(state, sums, at, key, data, plan, width, micro):
        def body(carry, x):
            (state, sums), (j, ok) = carry, x
            grads, new_sums = batch_grads(state.params, sums, key, data, plan, j, width, micro)
            new = (advance(state, grads), new_sums)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, carry), None

        *_, group_js, group_valid = plan
        (state, sums), _ = jax.lax.scan(body, (state, sums), (group_js[at], group_valid[at]))
        return state, sums, at + 1

    def step(state, sums, at, key, data, plan, width, micro):
        *_, group_js, _ = plan
        if group_js.shape[1] > 1:  # (G, K)
            return steps(state, sums, at, key, data, plan, width=width, micro=micro)
        grads, sums, at = grads_program(
            state.params, sums, at, key, data, plan, width=width, micro=micro
        )
        return update_program(state, grads), sums, at

    return step


def train(
    model: ModelFuncs,
    params: hk.Params,
    train_data: DeviceData | Split,
    settings: TrainSettings | None = None,
    *,
    eval_data: DeviceData | Split | None = None,
    eval_name: str = "val",
    objective: Objective = metrics.BINARY,
    optimizer: optax.GradientTransformation | None = None,
    mesh=None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
    start: Progress | None = None,
    on_epoch: Callable[[Progress], None] | None = None,
    tie: Callable[[hk.Params], hk.Params] | None = None,
) -> TrainResult:
    """Train ``params`` of ``model`` for ``settings.epochs`` epochs; returns the history.

    ``on_epoch(progress)`` is called after every epoch; ``start`` (such a progress) continues
    an interrupted run from its last completed epoch, with the same result as if it had not
    stopped (every epoch's shuffle, crops and dropout depend on the seed and the epoch only).

    ``model`` comes from ``funcs_from_stateful`` (e.g. :func:`m2l_nlp.model.classifier`);
    ``objective`` scores its output (default: one logit per review, binary labels).

    Every epoch reshuffles the training set (seeded by ``settings.seed`` and the epoch),
    cuts reviews longer than ``settings.crop_len`` to a random window, and runs the jitted
    step over length buckets. The history holds ``loss`` and ``train_acc`` per epoch and,
    every ``settings.eval_every`` epochs (and after the last), ``<eval_name>_loss`` and
    ``<eval_name>_acc`` on ``eval_data`` (NaN for epochs without evaluation). With
    ``settings.keep_best`` and ``eval_data``, the parameters returned are those of the
    evaluated epoch with the best accuracy (ties: the lower loss, then the earlier epoch):
    model selection on the validation split, never on the test set. With
    ``settings.ema_decay`` the evaluated and returned parameters are the moving average of
    the trained ones (:func:`update_ema`). On a CPU each batch is cut into cache-sized
    micro-batches (``settings.micro_batch_cells``, same update). The optimizer defaults
    to :func:`make_optimizer` over the whole run.

    An epoch whose mean training loss is not finite ends the run with
    :class:`DivergedError` before ``on_epoch``: the last epoch it saw stays the last one kept.

    ``tie`` (e.g. :func:`m2l_nlp.model.pair_tie`) trains ``params`` as stored rows that
    ``model`` reads as ``tie(params)``; evaluation, the parameters returned and those of
    the best epoch are ``model``'s (tied on the host), and ``on_epoch``'s state is stored.
    """
    settings = settings or TrainSettings()
    mesh = mesh or devices.make_mesh()
    devices.check_batch_size(settings.batch_size, mesh)
    if not isinstance(train_data, DeviceData):
        train_data = batching.put_data(*train_data, mesh=mesh, binary=objective.binary)
    if eval_data is not None and not isinstance(eval_data, DeviceData):
        eval_data = batching.put_data(*eval_data, mesh=mesh, binary=objective.binary)
    lengths = np.asarray(train_data.lengths)
    if lengths.size == 0:
        raise ValueError("the training split is empty")
    rng = np.random.default_rng(settings.seed)
    plan = batching.train_plan(lengths, settings.batch_size, settings.crop_len, rng)
    steps_per_epoch = len(plan.widths)
    optimizer = optimizer or make_optimizer(settings, settings.epochs * steps_per_epoch)
    state = _fresh_state(params, optimizer, settings.ema_decay > 0)
    first, result, best = 0, None, None
    history: dict[str, list[float]] = {"loss": [], "train_acc": []}
    if eval_data is not None:
        history[f"{eval_name}_loss"] = []
        history[f"{eval_name}_acc"] = []
    if start is not None:  # the arrays of the interrupted run, in the structure of this one
        state = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(state), start.state)
        first, result = start.epoch, start.result
        history = {name: list(values) for name, values in start.history.items()}
        if start.best is not None:
            score, epoch, leaves, best_result = start.best
            kept = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params), leaves)
            best = (tuple(score), epoch, kept, best_result)
    state = devices.put_replicated(state, mesh)
    knobs = (settings.token_dropout, settings.ema_decay, tie)
    step = _make_epoch_step(model, optimizer, objective, mesh, *knobs)

    def model_params(state: TrainState) -> hk.Params:  # tied on the host: no program
        return eval_params(state) if tie is None else tie(jax.device_get(eval_params(state)))

    now = None  # model_params of the last epoch, which is always evaluated if any is

    cells = batching.resolve_micro_batch_cells(settings.micro_batch_cells)
    n_devices = mesh.devices.size

    def micro(width: int) -> int:
        return batching.micro_batches(settings.batch_size, width, n_devices, cells)

    for epoch in range(first, settings.epochs):
        plan = batching.train_plan(
            lengths,
            settings.batch_size,
            settings.crop_len,
            np.random.default_rng([settings.seed, epoch]),
        )
        groups = batching.step_groups(plan.widths, settings.steps_per_call)
        arrays = (plan.idx, plan.starts, plan.weights, groups.js, groups.valid)
        arrays = devices.put_replicated(arrays, mesh)  # once per epoch, as every call's input
        sums = devices.put_replicated(np.zeros(3, np.float32), mesh)
        at = devices.put_replicated(np.zeros((), np.int32), mesh)  # the call, counted on device
        epoch_key = _epoch_key(settings.seed, epoch)
        desc = f"epoch {epoch + 1}/{settings.epochs}"
        for width in tqdm(groups.widths, desc=desc, disable=not progress, leave=False):
            state, sums, at = step(
                state, sums, at, epoch_key, train_data, arrays, width, micro(width)
            )
        loss_sum, correct, count = (float(x) for x in jax.device_get(sums))
        if not math.isfinite(loss_sum):  # read once per epoch anyway: costs no host sync
            raise DivergedError(epoch + 1, loss_sum / count, settings.learning_rate)
        history["loss"].append(loss_sum / count)
        history["train_acc"].append(correct / count)
        line = f"epoch {epoch + 1}/{settings.epochs}: loss {loss_sum / count:.4f}"
        line += f"  train_acc {correct / count:.4f}"
        last = epoch + 1 == settings.epochs
        if eval_data is not None:
            if (epoch + 1) % settings.eval_every == 0 or last:
                now = model_params(state)  # once: tying on the host copies the table
                result = evaluate(
                    now,
                    model,
                    eval_data,
                    objective=objective,
                    settings=settings,
                    mesh=mesh,
                    progress=progress,
                    desc=f"{eval_name} {epoch + 1}",
                )
                history[f"{eval_name}_loss"].append(result.loss)
                history[f"{eval_name}_acc"].append(result.accuracy)
                line += (
                    f"  {eval_name}_loss {result.loss:.4f}  {eval_name}_acc {result.accuracy:.4f}"
                )
                score = (result.accuracy, -result.loss)
                if settings.keep_best and (best is None or score > best[0]):
                    best = (score, epoch + 1, jax.device_get(now), result)
            else:
                history[f"{eval_name}_loss"].append(math.nan)
                history[f"{eval_name}_acc"].append(math.nan)
        if log is not None:
            log(line)
        if on_epoch is not None:
            leaves = jax.tree_util.tree_leaves
            kept = best and (best[0], best[1], [np.asarray(x) for x in leaves(best[2])], best[3])
            host_state = [np.asarray(x) for x in leaves(jax.device_get(state))]
            on_epoch(Progress(epoch + 1, host_state, history, kept, result))
    if best is not None:
        _, best_epoch, best_params, best_result = best
        if log is not None and best_epoch != settings.epochs:
            log(f"keeping epoch {best_epoch} (best {eval_name}_acc {best_result.accuracy:.4f})")
        return TrainResult(
            devices.put_replicated(best_params, mesh), history, best_result, best_epoch
        )
    if tie is None:
        params = eval_params(state)
    else:  # the last evaluation's copy, if there was one: tying copies the whole table
        params = devices.put_replicated(model_params(state) if now is None else now, mesh)
    return TrainResult(params, history, result, settings.epochs)
