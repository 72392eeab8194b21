"""Jitted training and evaluation of the practical-2 classifier, on CPU, GPU or many devices.

Shapes: ``B`` batch, ``S`` padded length of the encoded data, ``W`` width of one batch
(a bucket, ``W <= S``), ``N`` examples.

Speed on a CPU comes from four things:

- **length buckets**: a batch is cut to the smallest width of a small fixed list
  (:data:`DEFAULT_WIDTHS`) that holds its longest review, so padding is hardly computed and
  only a handful of shapes is ever compiled (on a GPU/TPU, where compiling a shape costs
  far more than computing its padding, the coarser :data:`ACCELERATOR_WIDTHS`);
- **data on the device once**: the encoded dataset is copied to the device(s) at the start;
  each epoch uploads only a small plan (which examples go in which batch), and the jitted
  step gathers its batch on the device;
- **no host syncs inside an epoch**: the step donates and returns the training state and
  running sums of loss and correct predictions, read once at the end of the epoch.
- **cache-sized micro-batches**: the ``(B, h, W, W)`` attention weights of a long batch
  do not fit in a CPU's cache; the step runs the batch as a few micro-batches in a
  ``lax.scan`` and sums their gradients (the same update), so each piece stays in cache.

The step reads its optimizer from its arguments (it is a static argument of the jit), never
from a global: a new optimizer or schedule means a new compiled step, so it takes effect.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import optax
from tqdm.auto import tqdm

from m2l_nlp import devices
from m2l_nlp.config import ClassifierConfig, check_field_types
from m2l_nlp.impl import load_practical

PRACTICAL = "practical2_transformers"
# Steps of 32 tokens up to 384 (where most reviews are), coarser above: about 20 shapes.
DEFAULT_WIDTHS = (
    *range(32, 385, 32),
    *(448, 512, 576, 640, 768, 896, 1024, 1536, 2048, 3072, 4096),
)
# On a GPU/TPU padding is nearly free and every width is one more compilation of the step
# (seconds to tens of seconds each), so a few powers of two.
ACCELERATOR_WIDTHS = (128, 256, 512, 1024, 2048, 4096)
EVAL_ATTENTION_BUDGET = 2**27  # batch * width**2 per evaluation batch (bounds memory)
CPU_MICRO_BATCH_CELLS = 2**17  # rows * width**2 per micro-batch and device, on a CPU


# --------------------------------------------------------------------------------------
# Model, loss, optimizer
# --------------------------------------------------------------------------------------


def build_model(config: ClassifierConfig, impl: str = "solutions") -> hk.Transformed:
    """``hk.transform`` of the practical's classifier: ``apply(params, key, ids, mask, is_train)``.

    ``impl="exercises"`` trains the student's own modules.
    """
    practical = load_practical(PRACTICAL, impl)

    def forward(input_ids: jax.Array, mask: jax.Array, is_train: bool = True) -> jax.Array:
        return practical.classifier_forward(input_ids, mask, is_train, config=config)

    return hk.transform(forward)


def init_params(
    model: hk.Transformed, key: jax.Array, config: ClassifierConfig, embed_scale: float = 1.0
) -> hk.Params:
    """Parameters of ``model`` (they do not depend on the sequence length).

    ``embed_scale`` multiplies the initial token embeddings (haiku draws them with standard
    deviation 1). A small scale (e.g. 0.1) lets the sinusoidal positions and the learned
    sentiment directions dominate early on; on IMDB it trains much faster.
    """
    ids = jnp.ones((1, min(8, config.max_len)), jnp.int32)
    params = model.init(key, ids, jnp.ones_like(ids), True)
    if embed_scale != 1.0:
        params = {
            module: {
                name: value * embed_scale if name == "embeddings" else value
                for name, value in leaves.items()
            }
            for module, leaves in params.items()
        }
    return params


def sigmoid_bce(
    logits: jax.Array, labels: jax.Array, weights: jax.Array | None = None
) -> jax.Array:
    """Mean binary cross-entropy of logits ``(B,)`` against labels ``(B,)`` in {0, 1}.

    ``weights`` ``(B,)`` (e.g. 0 for padding rows of a partial batch) give a weighted mean.
    """
    if weights is None:
        weights = jnp.ones(jnp.shape(logits), jnp.float32)
    weights = jnp.asarray(weights, jnp.float32)
    return sigmoid_bce_sum(logits, labels, weights) / jnp.maximum(weights.sum(), 1.0)


def sigmoid_bce_sum(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> jax.Array:
    """Weighted sum (not mean) of the binary cross-entropies: what micro-batches add up."""
    losses = optax.sigmoid_binary_cross_entropy(logits, labels.astype(logits.dtype))
    return (losses * weights).sum()


@dataclasses.dataclass(frozen=True)
class TrainSettings:
    """How to train: optimisation, schedule, cropping and evaluation settings."""

    epochs: int = 4
    batch_size: int = 32
    learning_rate: float = 2e-3
    warmup_fraction: float = 0.05  # of all steps, linear warm-up from 0
    final_lr_fraction: float = 0.02  # cosine decays to learning_rate * this
    weight_decay: float = 0.05  # AdamW, on matrices only (not biases, norms)
    clip_norm: float = 1.0  # global gradient-norm clipping
    crop_len: int = 256  # training windows: a random crop of this many tokens
    token_dropout: float = 0.0  # training only: hide this fraction of tokens (word dropout)
    ema_decay: float = 0.0  # > 0: evaluate and keep a moving average of the parameters
    eval_every: int = 1  # evaluate every k epochs (and always after the last)
    keep_best: bool = True  # with eval data: return the epoch with the best eval accuracy
    eval_batch_size: int = 128
    # gradient accumulation: split a batch so that rows * width**2 <= this per device;
    # None: CPU_MICRO_BATCH_CELLS on a CPU (cache-sized pieces), no split on a GPU/TPU; 0: off
    micro_batch_cells: int | None = None
    seed: int = 0

    def __post_init__(self) -> None:
        check_field_types(self)
        for name in ("epochs", "batch_size", "crop_len", "eval_every", "eval_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be at least 1, not {getattr(self, name)}")
        if not 0 <= self.token_dropout < 1:
            raise ValueError(f"token_dropout must be in [0, 1), not {self.token_dropout}")
        if self.micro_batch_cells is not None and self.micro_batch_cells < 0:
            raise ValueError(
                f"micro_batch_cells must be >= 0 or None, not {self.micro_batch_cells}"
            )
        if not 0 <= self.ema_decay < 1:
            raise ValueError(f"ema_decay must be in [0, 1), not {self.ema_decay}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be positive, not {self.learning_rate}")


def _decay_mask(params: hk.Params) -> Any:
    return jax.tree_util.tree_map(lambda p: p.ndim >= 2, params)


def make_optimizer(settings: TrainSettings, total_steps: int) -> optax.GradientTransformation:
    """Gradient clipping, then AdamW with linear warm-up and cosine decay."""
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
    return optax.chain(
        optax.clip_by_global_norm(settings.clip_norm),
        optax.adamw(schedule, weight_decay=settings.weight_decay, mask=_decay_mask),
    )


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


# --------------------------------------------------------------------------------------
# One step, one batch
# --------------------------------------------------------------------------------------


def micro_batches(batch_size: int, width: int, n_devices: int = 1, cells: int | None = None) -> int:
    """How many micro-batches to cut a ``(batch_size, width)`` batch into.

    The smallest count whose micro-batch holds at most ``cells`` attention cells
    (``rows * width**2``) per device, keeping the rows of a micro-batch divisible by
    ``n_devices``. ``cells=None`` gives 1 (no split).
    """
    if cells is None:
        return 1
    per_device = batch_size // n_devices
    options = [n for n in range(1, per_device + 1) if per_device % n == 0]
    for n in options:
        if (per_device // n) * width**2 <= cells:
            return n
    return options[-1]


def resolve_micro_batch_cells(cells: int | None) -> int | None:
    """``None`` (automatic): :data:`CPU_MICRO_BATCH_CELLS` on a CPU, no split on a GPU/TPU,
    whose large batches are what keeps them busy; ``0``: no split."""
    if cells is None:
        return CPU_MICRO_BATCH_CELLS if devices.accelerator() == "cpu" else None
    return cells or None


def _loss_sum_and_grads(params, key, ids, mask, labels, weights, model, micro):
    """Weighted sum of the losses, its gradient and the logits ``(B,)``.

    With ``micro > 1`` the batch is processed as ``micro`` micro-batches in a ``lax.scan``
    and the gradients are summed (gradient accumulation): the result is the same as one
    pass over the whole batch, but only one micro-batch's activations (above all its
    ``(b, h, W, W)`` attention weights) are alive at a time, which on a CPU keeps them in
    cache. Rows ``i * micro + k`` form micro-batch ``k``, so with the batch sharded over
    several devices every micro-batch is too.
    """

    def loss_sum(params, key, ids, mask, labels, weights):
        logits = model.apply(params, key, ids, mask, True)
        return sigmoid_bce_sum(logits, labels, weights), logits

    grad_fn = jax.value_and_grad(loss_sum, has_aux=True)
    if micro == 1:
        (total, logits), grads = grad_fn(params, key, ids, mask, labels, weights)
        return total, grads, logits

    def body(acc, inputs):
        (total, logits), grads = grad_fn(params, *inputs)
        return jax.tree_util.tree_map(jnp.add, acc, (total, grads)), logits

    zeros = (jnp.zeros((), jnp.float32), jax.tree_util.tree_map(jnp.zeros_like, params))
    pieces = [_split_rows(x, micro) for x in (ids, mask, labels, weights)]
    (total, grads), logits = jax.lax.scan(body, zeros, (jax.random.split(key, micro), *pieces))
    return total, grads, _merge_rows(logits)


def _split_rows(x: jax.Array, micro: int) -> jax.Array:
    """``(B, ...) -> (micro, B // micro, ...)``: rows ``i * micro + k`` go to piece ``k``."""
    return jnp.swapaxes(x.reshape(-1, micro, *x.shape[1:]), 0, 1)


def _merge_rows(x: jax.Array) -> jax.Array:
    """Inverse of :func:`_split_rows`: ``(micro, b, ...) -> (micro * b, ...)``."""
    return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])


def _update(state, key, ids, mask, labels, weights, model, optimizer, micro=1):
    """Gradient step on one batch; returns ``(state, loss, n_correct)`` (weighted)."""
    weights = jnp.ones(labels.shape, jnp.float32) if weights is None else weights
    weights = weights.astype(jnp.float32)
    total, grads, logits = _loss_sum_and_grads(
        state.params, key, ids, mask, labels, weights, model, micro
    )
    count = jnp.maximum(weights.sum(), 1.0)
    loss = total / count
    grads = jax.tree_util.tree_map(lambda g: g / count, grads)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    hits = ((logits > 0) == (labels > 0)).astype(jnp.float32) * weights
    return state._replace(params=params, opt_state=opt_state), loss, hits.sum()


@functools.partial(
    jax.jit, static_argnames=("model", "optimizer", "micro"), donate_argnames=("state",)
)
def train_step(
    state: TrainState,
    key: jax.Array,
    ids: jax.Array,
    mask: jax.Array,
    labels: jax.Array,
    weights: jax.Array | None = None,
    *,
    model: hk.Transformed,
    optimizer: optax.GradientTransformation,
    micro: int = 1,
) -> tuple[TrainState, jax.Array, jax.Array]:
    """One jitted gradient step on a batch ``ids, mask (B, W)``, ``labels (B,)``.

    ``model`` and ``optimizer`` are static: passing a different optimizer (another learning
    rate, another schedule) compiles a new step, so the change is never silently ignored.
    ``state`` is donated: do not use the old one afterwards. ``micro`` (static) splits the
    batch into that many micro-batches whose gradients are summed (same update, less memory).

    Returns ``(new_state, mean loss, number of correct predictions)``.
    """
    return _update(state, key, ids, mask, labels, weights, model, optimizer, micro)


def _counts(logits: jax.Array, labels: jax.Array, weights: jax.Array | None) -> jax.Array:
    """Confusion counts ``(2, 2)`` float32, ``[true, predicted]`` (0 = neg, 1 = pos)."""
    pred = (logits > 0).astype(jnp.int32)
    true = (labels > 0).astype(jnp.int32)
    w = jnp.ones_like(logits, jnp.float32) if weights is None else weights.astype(jnp.float32)
    onehot_true = jax.nn.one_hot(true, 2, dtype=jnp.float32) * w[:, None]
    onehot_pred = jax.nn.one_hot(pred, 2, dtype=jnp.float32)
    return onehot_true.T @ onehot_pred


def confusion_matrix(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """2x2 counts on the host: rows the true label (0 neg, 1 pos), columns the predicted one."""
    counts = np.zeros((2, 2), np.int64)
    np.add.at(counts, (np.asarray(labels, np.int64), (np.asarray(logits) > 0).astype(np.int64)), 1)
    return counts


@functools.partial(jax.jit, static_argnames=("model",))
def evaluate_on_batch(
    params: hk.Params,
    ids: jax.Array,
    mask: jax.Array,
    labels: jax.Array,
    weights: jax.Array | None = None,
    *,
    model: hk.Transformed,
) -> tuple[jax.Array, jax.Array]:
    """Accuracy and confusion matrix ``(2, 2)`` (``[true, predicted]``, counts) on one batch.

    Dropout is off. Rows with ``weights`` 0 (padding of a partial batch) are not counted.
    """
    logits = model.apply(params, None, ids, mask, False)
    confusion = _counts(logits, labels, weights)
    return jnp.trace(confusion) / jnp.maximum(confusion.sum(), 1.0), confusion


# --------------------------------------------------------------------------------------
# Data on the device, length buckets and batch plans
# --------------------------------------------------------------------------------------


class DeviceData(NamedTuple):
    """An encoded split on the device(s): ids ``(N, S)``, lengths ``(N,)``, labels ``(N,)``."""

    ids: jax.Array
    lengths: jax.Array
    labels: jax.Array


def token_lengths(mask: np.ndarray) -> np.ndarray:
    """Number of tokens per row ``(N,)``; raises if a mask is not right-padded."""
    mask = np.asarray(mask)
    lengths = mask.sum(axis=1).astype(np.int32)
    if not np.array_equal(mask != 0, np.arange(mask.shape[1]) < lengths[:, None]):
        raise ValueError(
            "the mask must be right-padded (1s then 0s in every row), as made by "
            "m2l_nlp.tokenization.batch_encode"
        )
    return lengths


def put_data(ids: np.ndarray, mask: np.ndarray, labels: np.ndarray, mesh=None) -> DeviceData:
    """Check an encoded split and copy it once to every device of ``mesh``."""
    ids, labels = np.asarray(ids), np.asarray(labels)
    if ids.ndim != 2 or np.shape(mask) != ids.shape or labels.shape != (ids.shape[0],):
        raise ValueError(
            f"expected ids and mask of shape (N, S) and labels (N,), got ids {ids.shape}, "
            f"mask {np.shape(mask)}, labels {labels.shape}"
        )
    if labels.size and not np.isin(labels, (0, 1)).all():
        raise ValueError("labels must be 0 (negative) or 1 (positive)")
    host = DeviceData(ids.astype(np.int32), token_lengths(mask), labels.astype(np.int32))
    return devices.put_replicated(host, mesh or devices.make_mesh())


def default_widths() -> tuple[int, ...]:
    """:data:`DEFAULT_WIDTHS` on a CPU, the coarser :data:`ACCELERATOR_WIDTHS` on a GPU/TPU."""
    return DEFAULT_WIDTHS if devices.accelerator() == "cpu" else ACCELERATOR_WIDTHS


def bucket_widths(max_width: int, widths: Sequence[int] | None = None) -> tuple[int, ...]:
    """The fixed widths used for ``max_width`` (those below it, then ``max_width`` itself).

    ``widths=None``: :func:`default_widths` for the platform JAX computes on.
    """
    widths = default_widths() if widths is None else widths
    return tuple(w for w in sorted(widths) if w < max_width) + (int(max_width),)


def width_for(length: int, widths: Sequence[int]) -> int:
    """Smallest width in ``widths`` (sorted) that holds ``length`` tokens."""
    for w in widths:
        if length <= w:
            return int(w)
    return int(widths[-1])


def bucket_of(lengths: np.ndarray, widths: Sequence[int]) -> np.ndarray:
    """The bucket width of each length, ``(N,)`` int64 (:func:`width_for` per example)."""
    return np.array([width_for(n, widths) for n in lengths], dtype=np.int64)


class BatchPlan(NamedTuple):
    """Batches of one epoch: ``idx``, ``starts``, ``weights`` ``(n_batches, B)`` and widths.

    Padding rows of partial batches point at example 0 with weight 0.
    """

    idx: np.ndarray
    starts: np.ndarray
    weights: np.ndarray
    widths: tuple[int, ...]


def _chunks(order: np.ndarray, size: int) -> list[tuple[np.ndarray, np.ndarray]]:
    out = []
    for i in range(0, len(order), size):
        part = order[i : i + size]
        weights = np.zeros(size, np.float32)
        weights[: len(part)] = 1.0
        out.append((np.pad(part, (0, size - len(part))), weights))
    return out


def train_plan(
    lengths: np.ndarray, batch_size: int, crop_len: int, rng: np.random.Generator, widths=None
) -> BatchPlan:
    """A shuffled epoch: every example once, grouped by (cropped) length into buckets.

    Reviews longer than ``crop_len`` are cut to a random window of ``crop_len`` tokens.
    """
    widths = bucket_widths(crop_len, widths)
    lengths = np.asarray(lengths)
    cropped = np.minimum(lengths, crop_len)
    bucket = bucket_of(cropped, widths)
    batches = []
    for w in np.unique(bucket):
        members = rng.permutation(np.flatnonzero(bucket == w))
        batches += [(idx, weights, int(w)) for idx, weights in _chunks(members, batch_size)]
    order = rng.permutation(len(batches))
    batches = [batches[i] for i in order]
    idx = np.stack([b[0] for b in batches]).astype(np.int32)
    weights = np.stack([b[1] for b in batches])
    room = np.maximum(lengths[idx] - crop_len, 0)
    starts = np.floor(rng.random(idx.shape) * (room + 1)).astype(np.int32)
    return BatchPlan(idx, starts, weights, tuple(b[2] for b in batches))


def eval_plan(
    lengths: np.ndarray, batch_size: int, max_width: int, n_devices: int = 1, widths=None
) -> list[BatchPlan]:
    """Evaluation batches, sorted by length: every example exactly once, from its start.

    One plan per width; long widths get smaller batches (``EVAL_ATTENTION_BUDGET``), always
    a multiple of ``n_devices``.
    """
    widths = bucket_widths(max_width, widths)
    lengths = np.minimum(np.asarray(lengths), max_width)
    bucket = bucket_of(lengths, widths)
    plans = []
    for w in np.unique(bucket):
        size = min(batch_size, max(1, EVAL_ATTENTION_BUDGET // int(w) ** 2))
        size = max(n_devices, size - size % n_devices)
        chunks = _chunks(np.flatnonzero(bucket == w), size)
        idx = np.stack([c[0] for c in chunks]).astype(np.int32)
        weights = np.stack([c[1] for c in chunks])
        plans.append(BatchPlan(idx, np.zeros_like(idx), weights, (int(w),) * len(chunks)))
    return plans


def _gather(data: DeviceData, idx: jax.Array, starts: jax.Array, width: int):
    """Batch ``ids, mask (B, width)`` and ``labels (B,)`` from device data (inside jit)."""
    lengths = data.lengths[idx]
    rows = data.ids[idx]
    if width == rows.shape[1]:
        positions = jnp.broadcast_to(jnp.arange(width), rows.shape)
        ids = rows
    else:
        positions = starts[:, None] + jnp.arange(width)[None, :]
        ids = jnp.take_along_axis(rows, jnp.minimum(positions, rows.shape[1] - 1), axis=1)
    mask = (positions < lengths[:, None]).astype(jnp.int32)
    return ids * mask, mask, data.labels[idx]


# --------------------------------------------------------------------------------------
# Evaluation over a whole split
# --------------------------------------------------------------------------------------


class EvalResult(NamedTuple):
    """Accuracy, loss and the 2x2 confusion matrix ``[true, predicted]`` over a split."""

    accuracy: float
    loss: float
    confusion: np.ndarray
    count: int


def windows(lengths: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Cover each review with ``ceil(len / window)`` windows of ``window`` tokens.

    Returns ``(example, start)`` per window. Windows of a long review are spread evenly from
    its start to its end (they overlap a little); a short review gets one window at 0.
    """
    lengths = np.asarray(lengths, np.int64)
    counts = np.maximum(1, -(-lengths // window))
    example = np.repeat(np.arange(len(lengths)), counts)
    first = np.cumsum(counts) - counts
    k = np.arange(len(example)) - np.repeat(first, counts)  # window number within its review
    room = np.maximum(lengths - window, 0)[example]
    spread = np.maximum(counts - 1, 1)[example]
    starts = np.rint(room * k / spread).astype(np.int32)
    return example.astype(np.int32), starts


def _make_logit_step(model: hk.Transformed, mesh) -> Callable:
    shard = devices.batch_sharded(mesh)

    @functools.partial(jax.jit, static_argnames=("width", "micro"), donate_argnames=("sums",))
    def step(params, sums, data, idx, starts, weights, width, micro):
        ids, mask, _ = _gather(data, idx, starts, width)
        ids, mask = jax.lax.with_sharding_constraint((ids, mask), shard)
        if micro == 1:
            logits = model.apply(params, None, ids, mask, False)
        else:  # one cache-sized piece at a time (see micro_batches)
            pieces = (_split_rows(ids, micro), _split_rows(mask, micro))
            logits = _merge_rows(
                jax.lax.map(lambda piece: model.apply(params, None, *piece, False), pieces)
            )
        logit_sum, count = sums
        return logit_sum.at[idx].add(logits * weights), count.at[idx].add(weights)

    return step


def predict_logits(
    params: hk.Params,
    model: hk.Transformed,
    data: DeviceData,
    *,
    window: int | None = None,
    batch_size: int = 128,
    mesh=None,
    progress: bool = False,
    desc: str = "predict",
    micro_batch_cells: int | None = None,
) -> np.ndarray:
    """Logits ``(N,)`` of every review of ``data``, each computed exactly once.

    ``window=None`` reads each review from its start (up to the padded length ``S``). With a
    ``window`` (e.g. the training crop length), a long review is cut into windows of that
    many tokens (:func:`windows`) and its logit is the mean over its windows, so the model
    sees the same lengths and positions as in training, and the whole review is read.
    ``micro_batch_cells``: as in :class:`TrainSettings` (None: automatic, 0: off).
    """
    mesh = mesh or devices.make_mesh()
    cells = resolve_micro_batch_cells(micro_batch_cells)
    n = int(data.labels.shape[0])
    width_max = int(data.ids.shape[1])
    window = min(int(window or width_max), width_max)
    lengths = np.asarray(data.lengths)  # one read of N ints, before any batch runs
    example, starts = windows(lengths, window)
    win_len = np.minimum(lengths[example] - starts, window)
    step = _make_logit_step(model, mesh)
    params = devices.put_replicated(params, mesh)
    sums = devices.put_replicated((jnp.zeros(n), jnp.zeros(n)), mesh)
    plans = eval_plan(win_len, batch_size, window, mesh.devices.size)
    with tqdm(
        total=sum(len(p.widths) for p in plans), desc=desc, disable=not progress, leave=False
    ) as bar:
        for plan in plans:
            arrays = (example[plan.idx], starts[plan.idx], plan.weights)
            idx, st, weights = devices.put_replicated(arrays, mesh)
            micro = micro_batches(idx.shape[1], plan.widths[0], mesh.devices.size, cells)
            for j, width in enumerate(plan.widths):
                sums = step(params, sums, data, idx[j], st[j], weights[j], width, micro)
                bar.update()
    logit_sum, count = (np.asarray(x, np.float64) for x in jax.device_get(sums))
    if not (count > 0).all():
        raise AssertionError("an example got no window: please report this bug")
    return logit_sum / count


def evaluate(
    params: hk.Params,
    model: hk.Transformed,
    data: DeviceData | tuple[np.ndarray, np.ndarray, np.ndarray],
    *,
    window: int | None = None,
    batch_size: int = 128,
    mesh=None,
    progress: bool = False,
    desc: str = "evaluate",
    micro_batch_cells: int | None = None,
) -> EvalResult:
    """Accuracy, mean loss and confusion matrix of ``model`` on a whole split.

    ``data`` is :class:`DeviceData` or ``(ids, mask, labels)`` NumPy arrays. Every example
    is counted exactly once (the last partial batch too). ``window``: see
    :func:`predict_logits` (None: read each review from its start), and
    ``micro_batch_cells``.
    """
    mesh = mesh or devices.make_mesh()
    if not isinstance(data, DeviceData):
        data = put_data(*data, mesh=mesh)
    if int(data.labels.shape[0]) == 0:
        raise ValueError("cannot evaluate on an empty split")
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
    labels = np.asarray(data.labels)
    confusion = confusion_matrix(labels, logits)
    p = np.clip(1.0 / (1.0 + np.exp(-logits)), 1e-12, 1 - 1e-12)
    loss = float(-np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p)))
    count = int(confusion.sum())
    return EvalResult(float(np.trace(confusion) / count), loss, confusion, count)


# --------------------------------------------------------------------------------------
# The training loop
# --------------------------------------------------------------------------------------


class TrainResult(NamedTuple):
    """Final parameters and the per-epoch history (lists keyed by metric name)."""

    params: hk.Params
    history: dict[str, list[float]]
    eval_result: EvalResult | None
    best_epoch: int | None = None  # 1-based epoch whose parameters were returned


def _make_epoch_step(
    model: hk.Transformed, optimizer, mesh, token_dropout: float = 0.0, ema_decay: float = 0.0
) -> Callable:
    shard = devices.batch_sharded(mesh)
    out = devices.replicated(mesh)

    @functools.partial(
        jax.jit,
        static_argnames=("width", "micro"),
        donate_argnames=("state", "sums"),
        out_shardings=(out, out),
    )
    def step(state, sums, key, data, plan_idx, plan_starts, plan_weights, j, width, micro):
        idx, starts, weights = plan_idx[j], plan_starts[j], plan_weights[j]
        ids, mask, labels = _gather(data, idx, starts, width)
        step_key, drop_key = jax.random.split(jax.random.fold_in(key, j))
        if token_dropout > 0:  # word dropout: hidden tokens become padding
            mask = mask * jax.random.bernoulli(drop_key, 1 - token_dropout, mask.shape)
            ids = ids * mask
        ids, mask, labels, weights = jax.lax.with_sharding_constraint(
            (ids, mask, labels, weights), shard
        )
        state, loss, correct = _update(
            state, step_key, ids, mask, labels, weights, model, optimizer, micro
        )
        if ema_decay > 0:
            state = update_ema(state, ema_decay)
        count = weights.sum()
        return state, sums + jnp.stack([loss * count, correct, count])

    return step


def train(
    model: hk.Transformed,
    params: hk.Params,
    train_data: DeviceData | tuple[np.ndarray, np.ndarray, np.ndarray],
    settings: TrainSettings = TrainSettings(),
    *,
    eval_data: DeviceData | tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    eval_name: str = "val",
    optimizer: optax.GradientTransformation | None = None,
    mesh=None,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
) -> TrainResult:
    """Train ``params`` of ``model`` for ``settings.epochs`` epochs; returns the history.

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
    """
    mesh = mesh or devices.make_mesh()
    devices.check_batch_size(settings.batch_size, mesh)
    if not isinstance(train_data, DeviceData):
        train_data = put_data(*train_data, mesh=mesh)
    if eval_data is not None and not isinstance(eval_data, DeviceData):
        eval_data = put_data(*eval_data, mesh=mesh)
    lengths = np.asarray(train_data.lengths)
    if lengths.size == 0:
        raise ValueError("the training split is empty")
    rng = np.random.default_rng(settings.seed)
    steps_per_epoch = len(train_plan(lengths, settings.batch_size, settings.crop_len, rng).widths)
    optimizer = optimizer or make_optimizer(settings, settings.epochs * steps_per_epoch)
    params = jax.tree_util.tree_map(lambda x: jnp.array(x, copy=True), params)  # steps donate
    state = devices.put_replicated(init_state(params, optimizer, settings.ema_decay > 0), mesh)
    step = _make_epoch_step(model, optimizer, mesh, settings.token_dropout, settings.ema_decay)
    cells = resolve_micro_batch_cells(settings.micro_batch_cells)
    n_devices = mesh.devices.size

    def micro(width: int) -> int:
        return micro_batches(settings.batch_size, width, n_devices, cells)

    key = jax.random.PRNGKey(settings.seed)
    history: dict[str, list[float]] = {"loss": [], "train_acc": []}
    if eval_data is not None:
        history[f"{eval_name}_loss"] = []
        history[f"{eval_name}_acc"] = []
    result = best = None
    for epoch in range(settings.epochs):
        plan = train_plan(
            lengths,
            settings.batch_size,
            settings.crop_len,
            np.random.default_rng([settings.seed, epoch]),
        )
        arrays = devices.put_replicated((plan.idx, plan.starts, plan.weights), mesh)
        sums = devices.put_replicated(jnp.zeros(3), mesh)
        epoch_key = jax.random.fold_in(key, epoch)
        desc = f"epoch {epoch + 1}/{settings.epochs}"
        for j, width in enumerate(tqdm(plan.widths, desc=desc, disable=not progress, leave=False)):
            state, sums = step(state, sums, epoch_key, train_data, *arrays, j, width, micro(width))
        loss_sum, correct, count = (float(x) for x in jax.device_get(sums))
        history["loss"].append(loss_sum / count)
        history["train_acc"].append(correct / count)
        line = f"epoch {epoch + 1}/{settings.epochs}: loss {loss_sum / count:.4f}"
        line += f"  train_acc {correct / count:.4f}"
        last = epoch + 1 == settings.epochs
        if eval_data is not None:
            if (epoch + 1) % settings.eval_every == 0 or last:
                result = evaluate(
                    eval_params(state),
                    model,
                    eval_data,
                    window=settings.crop_len,
                    micro_batch_cells=settings.micro_batch_cells,
                    batch_size=settings.eval_batch_size,
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
                    best = (score, epoch + 1, jax.device_get(eval_params(state)), result)
            else:
                history[f"{eval_name}_loss"].append(math.nan)
                history[f"{eval_name}_acc"].append(math.nan)
        if log is not None:
            log(line)
    if best is not None:
        _, best_epoch, best_params, best_result = best
        if log is not None and best_epoch != settings.epochs:
            log(f"keeping epoch {best_epoch} (best {eval_name}_acc {best_result.accuracy:.4f})")
        return TrainResult(
            devices.put_replicated(best_params, mesh), history, best_result, best_epoch
        )
    return TrainResult(eval_params(state), history, result, settings.epochs)
