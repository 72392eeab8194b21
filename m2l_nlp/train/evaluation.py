"""Jitted evaluation over a whole split: every example counted exactly once.

Long reviews can be read in windows of the training crop length (:func:`batching.windows`),
their logits averaged, so that the model sees the lengths and positions it was trained on.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
from tqdm.auto import tqdm

from m2l_nlp import devices
from m2l_nlp.config import TrainSettings
from m2l_nlp.data import batching
from m2l_nlp.data.batching import DeviceData
from m2l_nlp.train import metrics
from m2l_nlp.train.metrics import EvalResult, Objective
from m2l_nlp.transform import ModelFuncs


@functools.lru_cache(maxsize=16)
def _make_logit_step(model: ModelFuncs, mesh) -> Callable:
    """The jitted evaluation step of ``model``, made once per model and mesh, so that every
    evaluation of a run (each epoch's, the test's) reuses its compiled programs."""
    shard = devices.batch_sharded(mesh)
    apply = model.model_fw.apply

    @functools.partial(jax.jit, static_argnames=("width", "micro"), donate_argnames=("sums",))
    def step(params, sums, data, idx, starts, weights, width, micro):
        inputs = jax.lax.with_sharding_constraint(
            batching.gather(data, idx, starts, width)[0], shard
        )
        logits = _in_pieces(lambda piece: apply(params, *piece), inputs, micro)
        logit_sum, count = sums
        if logits.ndim > 1 and logits.shape[1] < logit_sum.shape[1]:  # a logit per token
            pad = [(0, 0), (0, logit_sum.shape[1] - logits.shape[1])] + [(0, 0)] * (logits.ndim - 2)
            logits = jnp.pad(logits, pad)
        row_weights = weights.reshape(-1, *(1,) * (logits.ndim - 1))
        return logit_sum.at[idx].add(logits * row_weights), count.at[idx].add(weights)

    return step


def _in_pieces(run: Callable, inputs: tuple[jax.Array, ...], micro: int):
    """``run(inputs)``, or with ``micro > 1`` run on one cache-sized piece of the rows at a
    time (see :func:`batching.micro_batches`), the outputs put back together."""
    if micro == 1:
        return run(inputs)
    pieces = tuple(batching.split_rows(x, micro) for x in inputs)
    return jax.tree_util.tree_map(batching.merge_rows, jax.lax.map(run, pieces))


@functools.lru_cache(maxsize=16)
def _make_token_step(model: ModelFuncs, objective: Objective, mesh) -> Callable:
    """The jitted evaluation step of a per-token task: the weighted loss sum, hits and
    count of a batch added to ``sums``, on the device (its logits are never kept)."""
    shard = devices.batch_sharded(mesh)
    apply = model.model_fw.apply

    @functools.partial(jax.jit, static_argnames=("width", "micro"), donate_argnames=("sums",))
    def step(params, sums, data, idx, starts, weights, width, micro):
        inputs, labels, token_weights = batching.gather(data, idx, starts, width)
        inputs = jax.lax.with_sharding_constraint(inputs, shard)
        weights = objective.weights(weights, token_weights)

        def piece_sums(piece):
            piece_inputs, piece_labels, piece_weights = piece
            logits = apply(params, *piece_inputs)
            return jnp.stack(
                [*objective.weighted_sums(logits, piece_labels, piece_weights), piece_weights.sum()]
            )

        if micro == 1:
            return sums + piece_sums((inputs, labels, weights))
        split = functools.partial(batching.split_rows, micro=micro)
        pieces = jax.tree_util.tree_map(split, (inputs, labels, weights))
        return sums + jax.lax.map(piece_sums, pieces).sum(axis=0)

    return step


def _token_scores(
    params: hk.Params,
    model: ModelFuncs,
    data: DeviceData,
    objective: Objective,
    *,
    batch_size: int,
    mesh,
    progress: bool,
    desc: str,
    micro_batch_cells: int | None,
) -> EvalResult:
    """A per-token task's mean loss and accuracy over every token that counts."""
    cells = batching.resolve_micro_batch_cells(micro_batch_cells)
    first = data.ids[0] if isinstance(data.ids, tuple) else data.ids
    plans = batching.eval_plan(
        np.asarray(data.lengths), batch_size, int(first.shape[1]), mesh.devices.size
    )
    step = _make_token_step(model, objective, mesh)
    params = devices.put_replicated(params, mesh)
    sums = devices.put_replicated(np.zeros(3, np.float32), mesh)  # loss sum, hits, count
    with tqdm(
        total=sum(len(p.widths) for p in plans), desc=desc, disable=not progress, leave=False
    ) as bar:
        for plan in plans:
            micro = batching.micro_batches(
                plan.idx.shape[1], plan.widths[0], mesh.devices.size, cells
            )
            for j, width in enumerate(plan.widths):
                batch = devices.put_replicated((plan.idx[j], plan.starts[j], plan.weights[j]), mesh)
                sums = step(params, sums, data, *batch, width, micro)
                bar.update()
    loss_sum, hits, count = (float(x) for x in jax.device_get(sums))
    count_rows = int(data.labels.shape[0])
    return EvalResult(hits / max(count, 1.0), loss_sum / max(count, 1.0), None, count_rows)


def predict_logits(
    params: hk.Params,
    model: ModelFuncs,
    data: DeviceData,
    *,
    window: int | None = None,
    batch_size: int = 128,
    mesh=None,
    progress: bool = False,
    desc: str = "predict",
    micro_batch_cells: int | None = None,
) -> np.ndarray:
    """Logits ``(N, ...)`` of every example of ``data``, each computed exactly once.

    ``window=None`` reads each review from its start (up to the padded length ``S``). With a
    ``window`` (e.g. the training crop length), a long review is cut into windows of that
    many tokens (:func:`batching.windows`) and its logit is the mean over its windows, so the
    model sees the same lengths and positions as in training, and the whole review is read.
    ``micro_batch_cells``: as in :class:`~m2l_nlp.config.TrainSettings` (None: automatic).
    """
    mesh = mesh or devices.make_mesh()
    cells = batching.resolve_micro_batch_cells(micro_batch_cells)
    n = int(data.labels.shape[0])
    width_max = int(data.ids.shape[1])  # a row task's ids: one array
    window = min(int(window or width_max), width_max)
    lengths = np.asarray(data.lengths)  # one read of N ints, before any batch runs
    example, starts = batching.windows(lengths, window)
    win_len = np.minimum(lengths[example] - starts, window)
    one = jax.ShapeDtypeStruct((1, window), jnp.int32)  # shapes only: nothing is computed
    out = jax.eval_shape(model.model_fw.apply, params, one, one).shape[1:]
    step = _make_logit_step(model, mesh)
    params = devices.put_replicated(params, mesh)
    # built on the host and copied: an eager jnp.zeros would compile a program of its own
    zeros = (np.zeros((n, *out), np.float32), np.zeros(n, np.float32))
    sums = devices.put_replicated(zeros, mesh)
    plans = batching.eval_plan(win_len, batch_size, window, mesh.devices.size)
    with tqdm(
        total=sum(len(p.widths) for p in plans), desc=desc, disable=not progress, leave=False
    ) as bar:
        for plan in plans:
            idx, st = example[plan.idx], starts[plan.idx]
            micro = batching.micro_batches(idx.shape[1], plan.widths[0], mesh.devices.size, cells)
            for j, width in enumerate(plan.widths):
                # each batch's plan is copied from the host: slicing an array already on the
                # device would compile a program per shape
                batch = devices.put_replicated((idx[j], st[j], plan.weights[j]), mesh)
                sums = step(params, sums, data, *batch, width, micro)
                bar.update()
    logit_sum, count = (np.asarray(x, np.float64) for x in jax.device_get(sums))
    if not (count > 0).all():
        raise AssertionError("an example got no window: please report this bug")
    return logit_sum / count.reshape(-1, *(1,) * len(out))


def evaluate(
    params: hk.Params,
    model: ModelFuncs,
    data: DeviceData | tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    objective: Objective = metrics.BINARY,
    window: int | None = None,
    batch_size: int = 128,
    mesh=None,
    progress: bool = False,
    desc: str = "evaluate",
    micro_batch_cells: int | None = None,
    settings: TrainSettings | None = None,
) -> EvalResult:
    """Accuracy, mean loss and (binary tasks) confusion matrix of ``model`` on a whole split.

    ``data`` is :class:`~m2l_nlp.data.batching.DeviceData` or ``(ids, mask, labels)`` NumPy
    arrays. Every example is counted exactly once (the last partial batch too). ``window``:
    see :func:`predict_logits` (None: read each review from its start). ``settings``: read
    the split as a run with these training settings does (windows of ``crop_len``,
    ``eval_batch_size``, ``micro_batch_cells``), in place of those three arguments.
    """
    if settings is not None:
        window, batch_size = settings.crop_len, settings.eval_batch_size
        micro_batch_cells = settings.micro_batch_cells
    mesh = mesh or devices.make_mesh()
    if not isinstance(data, DeviceData):
        data = batching.put_data(*data, mesh=mesh, binary=objective.binary)
    if int(data.labels.shape[0]) == 0:
        raise ValueError("cannot evaluate on an empty split")
    if objective.per_token:  # read with the course's loss, whatever trained the model
        return _token_scores(
            params,
            model,
            data,
            objective.as_scored(),
            batch_size=batch_size,
            mesh=mesh,
            progress=progress,
            desc=desc,
            micro_batch_cells=micro_batch_cells,
        )
    logits = predict_logits(
        params,
        model,
        data,
        window=window,
        batch_size=batch_size,
        mesh=mesh,
        progress=progress,
        desc=desc,
        micro_batch_cells=micro_batch_cells,
    )
    return metrics.score(objective, logits, np.asarray(data.labels))
