"""The one training loop of the course, on CPU, GPU or many devices.

Every task runs through :func:`train`: practical 1's baselines, practical 2's transformer,
practical 3's language model and translator, and the reverse-sequence task. A task brings
its model (:class:`~m2l_nlp.transform.ModelFuncs`, made by ``funcs_from_stateful``) and its
:class:`~m2l_nlp.train.metrics.Objective` (loss and accuracy per row or per token); the loop
brings the rest. :func:`m2l_nlp.runs.experiment.train_and_evaluate`
wraps it into the whole job of ``m2l-nlp train`` and of the notebooks.

What a step computes is :mod:`m2l_nlp.train.step`: the gradient of the mean loss, then the
optimizer's update. Everything here is speed around it, and changes none of its numbers:

- placement: the data go to the device(s) once (:func:`~m2l_nlp.data.batching.put_data`),
  each epoch uploads only a small plan (which rows, which crops, which width), and batches
  are gathered on the device; with several devices each batch is sharded over them;
- length buckets: batches are cut to a few fixed widths, so a few programs serve an epoch;
- micro-batches: on a CPU a batch runs as cache-sized micro-batches, gradients summed;
- several steps per call (``steps_per_call`` K > 1): K steps run in one ``lax.scan``;
- no waiting: the step donates its state and returns running sums, read once per epoch.

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

from m2l_nlp import devices
from m2l_nlp.config import TrainSettings
from m2l_nlp.data import batching
from m2l_nlp.data.batching import DeviceData
from m2l_nlp.data.splits import Split
from m2l_nlp.train import metrics
from m2l_nlp.train.evaluation import evaluate
from m2l_nlp.train.metrics import EvalResult, Objective
from m2l_nlp.train.optim import TrainState, eval_params, init_state, make_optimizer
from m2l_nlp.train.progress import BestEpoch, Progress
from m2l_nlp.train.step import Batch, train_step
from m2l_nlp.transform import ModelFuncs


class DivergedError(ValueError):
    """The training loss stopped being finite; the message says what to try."""

    def __init__(self, epoch: int, loss: float, learning_rate: float):
        self.epoch = epoch  # the first epoch whose loss was not finite (1-based)
        super().__init__(
            f"the training loss became {loss} in epoch {epoch}: training diverged; try a lower "
            f"learning rate (train.learning_rate is {learning_rate:g}; e.g. {learning_rate / 4:g})"
        )


class StateMismatch(ValueError):
    """A saved training state (``start``) that is not this run's: nothing of it is loaded."""


class TrainResult(NamedTuple):
    """Final parameters and the per-epoch history (lists keyed by metric name)."""

    params: hk.Params
    history: dict[str, list[float]]
    eval_result: EvalResult | None
    best_epoch: int | None = None  # 1-based epoch whose parameters were returned


def train(
    model: ModelFuncs,
    params: hk.Params,
    train_data: DeviceData | Split,
    settings: TrainSettings | None = None,
    *,
    eval_data: DeviceData | Split | None = None,
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

    ``model`` comes from ``funcs_from_stateful`` (e.g.
    :func:`m2l_nlp.model.classifiers.classifier`); ``objective`` scores its output (default:
    one logit per review, binary labels).

    Every epoch reshuffles the training set (seeded by ``settings.seed`` and the epoch),
    cuts reviews longer than ``settings.crop_len`` to a random window, and runs the jitted
    step over length buckets. The history holds ``loss`` and ``train_acc`` per epoch and,
    every ``settings.eval_every`` epochs (and after the last), ``val_loss`` and ``val_acc``
    on ``eval_data`` (NaN for epochs without evaluation). With ``settings.keep_best`` and
    ``eval_data``, the parameters returned are those of the evaluated epoch with the best
    accuracy (ties: the lower loss, then the earlier epoch): model selection on the
    validation split, never on the test set. With ``settings.ema_decay`` the evaluated and
    returned parameters are the moving average of the trained ones
    (:func:`~m2l_nlp.train.optim.update_ema`). On a CPU each batch is cut into cache-sized
    micro-batches (``settings.micro_batch_cells``, same update). The optimizer defaults to
    :func:`make_optimizer` over the whole run.

    An epoch whose mean training loss is not finite ends the run with
    :class:`DivergedError` before ``on_epoch``: the last epoch it saw stays the last one kept.

    ``tie`` (e.g. :func:`m2l_nlp.model.classifiers.pair_tie`) trains ``params`` as stored
    rows that ``model`` reads as ``tie(params)``; evaluation, the parameters returned and
    those of the best epoch are ``model``'s (tied on the host), and ``on_epoch``'s state is
    stored.
    """
    settings = settings or TrainSettings()
    mesh = mesh or devices.make_mesh()
    devices.check_batch_size(settings.batch_size, mesh)
    train_data = _on_device(train_data, mesh, objective)
    eval_data = None if eval_data is None else _on_device(eval_data, mesh, objective)
    lengths = np.asarray(train_data.lengths)
    if lengths.size == 0:
        raise ValueError("the training split is empty")
    optimizer = optimizer or _whole_run_optimizer(settings, lengths)
    evaluated = () if eval_data is None else ("val_loss", "val_acc")
    state = _fresh_state(params, optimizer, settings.ema_decay > 0)
    state, first, history, best, result = _resume(state, params, start, evaluated)
    state = devices.put_replicated(state, mesh)
    step = _make_epoch_step(
        model, optimizer, objective, mesh, settings.token_dropout, settings.ema_decay, tie
    )
    cells = batching.resolve_micro_batch_cells(settings.micro_batch_cells)
    micro = functools.partial(
        batching.micro_batches, settings.batch_size, n_devices=mesh.devices.size, cells=cells
    )

    def model_params(state: TrainState) -> hk.Params:  # tied on the host: no program
        return eval_params(state) if tie is None else tie(jax.device_get(eval_params(state)))

    def validate(now: hk.Params, epoch: int) -> EvalResult:
        return evaluate(
            now,
            model,
            eval_data,
            objective=objective,
            settings=settings,
            mesh=mesh,
            desc=f"val {epoch + 1}",
            progress=progress,
        )

    log = log or _say_nothing
    now = None  # model_params of the last epoch, which is always evaluated if any is
    for epoch in range(first, settings.epochs):
        state, loss, accuracy = _epoch(
            step, state, train_data, lengths, settings, epoch, mesh, micro, progress
        )
        history["loss"].append(loss)
        history["train_acc"].append(accuracy)
        named = objective.loss_name
        line = f"epoch {epoch + 1}/{settings.epochs}: {named} {loss:.4f}  train_acc {accuracy:.4f}"
        due = (epoch + 1) % settings.eval_every == 0 or epoch + 1 == settings.epochs
        if evaluated and due:
            now = model_params(state)  # once: tying on the host copies the table
            result = validate(now, epoch)
            line += f"  val_{named} {result.loss:.4f}  val_acc {result.accuracy:.4f}"
            best = _better(best, result, epoch, now) if settings.keep_best else None
        if evaluated:  # NaN for an epoch without evaluation
            history["val_loss"].append(result.loss if due else math.nan)
            history["val_acc"].append(result.accuracy if due else math.nan)
        log(line)
        if on_epoch is not None:
            on_epoch(_progress(epoch, state, history, best, result))
    if best is not None:  # settings.keep_best: the best evaluated epoch
        return _kept(best, history, settings.epochs, mesh, log)
    if tie is None:
        params = eval_params(state)
    else:  # the last evaluation's copy, if there was one: tying copies the whole table
        params = devices.put_replicated(model_params(state) if now is None else now, mesh)
    return TrainResult(params, history, result, settings.epochs)


def _say_nothing(line: str) -> None:
    """The log of a run that shows nothing (``log=None``)."""


def _kept(
    best: BestEpoch, history: dict[str, list[float]], epochs: int, mesh, log: Callable
) -> TrainResult:
    """The result of a ``keep_best`` run: its best evaluated epoch, said if not the last."""
    if best.epoch != epochs:
        log(f"keeping epoch {best.epoch} (best val_acc {best.result.accuracy:.4f})")
    return TrainResult(devices.put_replicated(best.params, mesh), history, best.result, best.epoch)


def _whole_run_optimizer(
    settings: TrainSettings, lengths: np.ndarray
) -> optax.GradientTransformation:
    """:func:`make_optimizer` with its schedule over the run: epochs times an epoch's batches."""
    plan = batching.train_plan(
        lengths,
        settings.batch_size,
        settings.crop_len,
        np.random.default_rng(settings.seed),
        settings.widths or None,
    )
    return make_optimizer(settings, settings.epochs * len(plan.widths))


def _better(best: BestEpoch | None, result: EvalResult, epoch: int, params: hk.Params) -> BestEpoch:
    """The epoch to keep: ``epoch`` (0-based, scored ``result``) if it beats ``best``."""
    score = (result.accuracy, -result.loss)
    if best is not None and score <= best.score:
        return best
    return BestEpoch(score, epoch + 1, jax.device_get(params), result)


def _on_device(data: DeviceData | Split, mesh, objective: Objective) -> DeviceData:
    """A split's arrays placed on the device(s) once for the whole run (as they are if placed)."""
    if isinstance(data, DeviceData):
        return data
    return batching.put_data(*data, mesh=mesh, binary=objective.binary)


def _epoch(
    step: Callable,
    state: TrainState,
    data: DeviceData,
    lengths: np.ndarray,
    settings: TrainSettings,
    epoch: int,
    mesh,
    micro: Callable[[int], int],
    progress: bool,
) -> tuple[TrainState, float, float]:
    """One epoch (0-based) of ``step``: returns ``(state, mean loss, accuracy)``.

    The epoch's plan (its shuffle, crops and length buckets, seeded by the seed and the
    epoch) is placed once; every call then passes the same buffers. The running sums are
    read from the device once, at the end; a loss that is not finite raises
    :class:`DivergedError`."""
    rng = np.random.default_rng([settings.seed, epoch])
    plan = batching.train_plan(
        lengths, settings.batch_size, settings.crop_len, rng, settings.widths or None
    )
    groups = batching.step_groups(plan.widths, settings.steps_per_call)
    arrays = (plan.idx, plan.starts, plan.weights, groups.js, groups.valid)
    arrays = devices.put_replicated(arrays, mesh)  # once per epoch, as every call's input
    sums = devices.put_replicated(np.zeros(3, np.float32), mesh)  # loss sum, correct, count
    at = devices.put_replicated(np.zeros((), np.int32), mesh)  # the call, counted on device
    key = _epoch_key(settings.seed, epoch)
    desc = f"epoch {epoch + 1}/{settings.epochs}"
    for width in tqdm(groups.widths, desc=desc, disable=not progress, leave=False):
        state, sums, at = step(state, sums, at, key, data, arrays, width, micro(width))
    loss_sum, correct, count = (float(x) for x in jax.device_get(sums))
    if not math.isfinite(loss_sum):  # read once per epoch anyway: costs no host sync
        raise DivergedError(epoch + 1, loss_sum / count, settings.learning_rate)
    return state, loss_sum / count, correct / count


def _resume(
    state: TrainState, params: hk.Params, start: Progress | None, evaluated: tuple[str, ...]
) -> tuple[TrainState, int, dict[str, list[float]], BestEpoch | None, EvalResult | None]:
    """Where the run starts: ``(state, first epoch, history, best, last evaluation)``, fresh
    or those of ``start`` (an interrupted run's arrays, in the structure of this one)."""
    history: dict[str, list[float]] = {name: [] for name in ("loss", "train_acc", *evaluated)}
    if start is None:
        return state, 0, history, None, None
    want = [(np.shape(x), np.dtype(x.dtype)) for x in jax.tree_util.tree_leaves(state)]
    if [(np.shape(x), np.dtype(x.dtype)) for x in start.state] != want:
        raise StateMismatch(
            "the interrupted run's training state does not fit this run (another version of "
            "the course or of its optimizer saved it): start again with --overwrite"
        )
    state = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(state), start.state)
    history = {name: list(values) for name, values in start.history.items()}
    best = None
    if start.best is not None:
        kept = jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(params), start.best.params)
        best = start.best._replace(score=tuple(start.best.score), params=kept)
    return state, start.epoch, history, best, start.result


def _progress(
    epoch: int,
    state: TrainState,
    history: dict[str, list[float]],
    best: BestEpoch | None,
    result: EvalResult | None,
) -> Progress:
    """The loop after epoch ``epoch`` (0-based) on the host, as :func:`_resume` reads it."""
    leaves = jax.tree_util.tree_leaves
    kept = best and best._replace(params=[np.asarray(x) for x in leaves(best.params)])
    host_state = [np.asarray(x) for x in leaves(jax.device_get(state))]
    return Progress(epoch + 1, host_state, history, kept, result)


@functools.partial(jax.jit, static_argnums=(1, 2))
def _fresh_state(params: hk.Params, optimizer, ema: bool) -> TrainState:
    """A new training state for ``params``, on copies of them (the steps donate their
    state): one program, where eager copies and zeros would compile one per shape."""
    return init_state(jax.tree_util.tree_map(jnp.copy, params), optimizer, ema)


@jax.jit
def _epoch_key(seed: int, epoch: int) -> jax.Array:
    """The key of one epoch's crops and dropout: one small program for every epoch."""
    return jax.random.fold_in(jax.random.PRNGKey(seed), epoch)


def _drop_tokens(inputs: tuple[jax.Array, ...], key: jax.Array, rate: float) -> tuple:
    """Word dropout on a batch's ``(ids, mask, ...)`` pairs: each token is hidden (made
    padding) with probability ``rate``."""
    out = []
    for k in range(0, len(inputs), 2):
        ids, mask = inputs[k : k + 2]
        part_key = key if k == 0 else jax.random.fold_in(key, k)
        mask = mask * jax.random.bernoulli(part_key, 1 - rate, mask.shape)
        out += [ids * mask, mask]
    return tuple(out)


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
    ``(idx, starts, weights, group_js, group_valid)`` on the device: the call runs
    :func:`~m2l_nlp.train.step.train_step` on batches ``group_js[at]`` (``(K,)``) that
    ``group_valid[at]`` counts, in a ``lax.scan``. A step that does not count leaves the
    state and the sums as they were (optimizer count and weight average included), so the
    result is that of the counted steps run one by one; K is part of the shapes, so one
    program per width serves every epoch. Made once per model, optimizer and settings: a
    run started again reuses the programs.

    Every argument is a buffer placed once per epoch or one the previous call gave back
    (donated): calls pass the same device addresses, so XLA replays its CUDA graphs of them
    on a GPU (it records a graph again when an address it captured changes)."""
    shard = devices.batch_sharded(mesh)
    out = devices.replicated(mesh)
    run_step = functools.partial(
        train_step,
        model=model,
        optimizer=optimizer,
        objective=objective,
        ema_decay=ema_decay,
        tie=tie,
    )

    def one(state, sums, key, data, plan, j, width, micro):
        """Step ``j`` of the epoch: its batch cut on the device, then the train step."""
        idx, starts, weights = (a[j] for a in plan[:3])
        inputs, labels, token_weights = batching.gather(data, idx, starts, width)
        step_key, drop_key = jax.random.split(jax.random.fold_in(key, j))
        if token_dropout > 0:  # word dropout: hidden tokens become padding
            inputs = _drop_tokens(inputs, drop_key, token_dropout)
        weights = objective.weights(weights, token_weights)  # per row, or per token
        batch = jax.lax.with_sharding_constraint(Batch(inputs, labels, weights), shard)
        state, loss, correct = run_step(state, step_key, batch, micro=micro)
        count = weights.sum()
        return state, sums + jnp.stack([loss * count, correct, count])

    @functools.partial(
        jax.jit,
        static_argnames=("width", "micro"),
        donate_argnames=("state", "sums", "at"),
        out_shardings=(out,) * 3,
    )
    def step(state, sums, at, key, data, plan, width, micro):
        *_, group_js, group_valid = plan
        if group_js.shape[1] == 1:  # one step a call: no loop, nothing to skip
            state, sums = one(state, sums, key, data, plan, group_js[at, 0], width, micro)
            return state, sums, at + 1

        def body(carry, x):
            (j, ok) = x
            new = one(*carry, key, data, plan, j, width, micro)
            return jax.tree_util.tree_map(lambda a, b: jnp.where(ok, a, b), new, carry), None

        (state, sums), _ = jax.lax.scan(body, (state, sums), (group_js[at], group_valid[at]))
        return state, sums, at + 1

    return step
