"""Batches for the jitted loop: data on the device once, length buckets, batch plans and
cache-sized micro-batches.

Shapes: ``B`` batch, ``S`` padded length of the encoded data, ``W`` width of one batch
(a bucket, ``W <= S``), ``N`` examples.

- **length buckets**: a batch is cut to the smallest width of a small fixed list
  (:data:`DEFAULT_WIDTHS`) that holds its longest review, so padding is hardly computed and
  only a handful of shapes is ever compiled (on a GPU/TPU, where compiling a shape costs
  far more than computing its padding, the coarser :data:`ACCELERATOR_WIDTHS`);
- **data on the device once**: the encoded dataset is copied to the device(s) at the start;
  each epoch uploads only a small plan (which examples go in which batch), and the jitted
  step gathers its batch on the device (:func:`gather`);
- **cache-sized micro-batches**: the ``(B, h, W, W)`` attention weights of a long batch
  do not fit in a CPU's cache; the step runs the batch as a few micro-batches
  (:func:`micro_batches`, :func:`split_rows`) and sums their gradients (the same update).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp import devices

# Steps of 64 tokens up to 512 (where most reviews are), coarser above. Each width is one
# more compiled training step; steps of 32 computed a little less padding but compiled 6 more
# steps for 512-token crops, a loss on the whole (benchmarks/buckets.py, benchmarks/README.md).
DEFAULT_WIDTHS = (*range(64, 513, 64), 640, 768, 896, 1024, 1536, 2048, 3072, 4096)

# On a GPU/TPU padding is nearly free and every width is one more compilation of the step
# (seconds to tens of seconds each), so a few powers of two.
ACCELERATOR_WIDTHS = (128, 256, 512, 1024, 2048, 4096)

EVAL_ATTENTION_BUDGET = 2**27  # batch * width**2 per evaluation batch (bounds memory)

# rows * width**2 per micro-batch and device, on a CPU: small enough for the attention
# weights to stay in cache, large enough that adding each micro-batch's gradient (as large
# as the parameters, 70,000-row embeddings included) costs little (benchmarks/buckets.py)
CPU_MICRO_BATCH_CELLS = 2**19


class DeviceData(NamedTuple):
    """An encoded split on the device(s).

    ``ids``: the model's token ids, one ``(N, S)`` array, or a tuple of them (a translation
    pair's source and target), each right-padded with 0; ``lengths (N,)``: a row's longest
    part; ``labels (N, ...)``; ``weights``: None (every label counts), or ``(N, S)`` for a
    label per token, 1 where a token has a label to predict and 0 where it has none."""

    ids: jax.Array | tuple[jax.Array, ...]
    lengths: jax.Array
    labels: jax.Array
    weights: jax.Array | None = None


def token_lengths(mask: np.ndarray) -> np.ndarray:
    """Number of tokens per row ``(N,)``; raises if a mask is not right-padded."""
    mask = np.asarray(mask)
    lengths = mask.sum(axis=1).astype(np.int32)
    if not np.array_equal(mask != 0, np.arange(mask.shape[1]) < lengths[:, None]):
        raise ValueError(
            "the mask must be right-padded (1s then 0s in every row), as made by "
            "m2l_nlp.data.tokenization.batch_encode"
        )
    return lengths


def put_data(
    ids: np.ndarray | tuple[np.ndarray, ...],
    mask: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray | None = None,
    *,
    mesh=None,
    binary: bool = True,
) -> DeviceData:
    """Check an encoded split and copy it once to every device of ``mesh``.

    ``ids`` and ``mask`` are ``(N, S)`` (or ``ids`` a tuple of such arrays, each
    right-padded with 0, and ``mask`` the union of their tokens). ``labels`` are ``(N,)`` in
    {0, 1} for a ``binary`` task, else ``(N, ...)`` class ids (e.g. ``(N, S)``, a label per
    token, with its ``weights``).
    """
    parts = tuple(np.asarray(i) for i in ids) if isinstance(ids, tuple) else (np.asarray(ids),)
    labels, first = np.asarray(labels), parts[0]
    rows_ok = labels.shape == (first.shape[0],) if binary else labels.shape[:1] == first.shape[:1]
    if (
        any(p.shape != first.shape for p in parts)
        or first.ndim != 2
        or not rows_ok
        or (np.shape(mask) != first.shape)
    ):
        raise ValueError(
            f"expected ids and mask of shape (N, S) and labels (N,), got ids "
            f"{[p.shape for p in parts]}, mask {np.shape(mask)}, labels {labels.shape}"
        )
    if weights is not None and np.shape(weights) != labels.shape:
        raise ValueError(f"weights {np.shape(weights)} must have the labels' shape {labels.shape}")
    if binary and labels.size and not np.isin(labels, (0, 1)).all():
        raise ValueError("labels must be 0 (negative) or 1 (positive)")
    if len(parts) > 1:
        for part in parts:
            token_lengths(part != 0)  # each part right-padded: its mask is its tokens
    host = DeviceData(
        tuple(p.astype(np.int32) for p in parts) if len(parts) > 1 else first.astype(np.int32),
        token_lengths(mask),
        labels.astype(np.int32),
        None if weights is None else np.asarray(weights, np.float32),
    )
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


class StepGroups(NamedTuple):
    """An epoch's calls of ``K`` steps: ``widths`` (one per call), batch indices ``js (G, K)``
    and ``valid (G, K)`` (False for the steps that fill up a width's last call)."""

    widths: tuple[int, ...]
    js: np.ndarray
    valid: np.ndarray


def step_groups(widths: tuple[int, ...], k: int) -> StepGroups:
    """The batches of an epoch plan as calls of ``k`` steps.

    Batches of one width go together, ``k`` at a time, in the plan's order; a width's last
    call is filled up with its last batch, marked not valid. Calls are ordered by their
    first batch. With ``k == 1`` that is the plan itself, one batch per call.
    """
    by_width: dict[int, list[int]] = {}
    for j, width in enumerate(widths):
        by_width.setdefault(width, []).append(j)
    groups = []
    for width, js in by_width.items():
        for first in range(0, len(js), k):
            chunk = js[first : first + k]
            groups.append((chunk[0], width, chunk + [chunk[-1]] * (k - len(chunk)), len(chunk)))
    groups.sort()
    return StepGroups(
        tuple(width for _, width, _, _ in groups),
        np.array([js for _, _, js, _ in groups], np.int32).reshape(-1, k),
        np.array([np.arange(k) < n for _, _, _, n in groups], bool).reshape(-1, k),
    )


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


def gather(data: DeviceData, idx: jax.Array, starts: jax.Array, width: int):
    """A batch cut from device data (inside jit): ``(inputs, labels, weights)``.

    ``inputs`` are ``(ids, mask)``, each ``(B, width)`` (for a tuple of ids, an ``(ids,
    mask)`` pair per part, each part's mask its own tokens); ``labels (B, ...)`` and the
    per-token ``weights`` (or None) are cut to the same window as the ids.
    """
    lengths = data.lengths[idx]
    labels = data.labels[idx]
    weights = None if data.weights is None else data.weights[idx]
    parts = data.ids if isinstance(data.ids, tuple) else (data.ids,)
    rows = [part[idx] for part in parts]
    if width == rows[0].shape[1]:
        positions = jnp.broadcast_to(jnp.arange(width), rows[0].shape)
    else:
        positions = starts[:, None] + jnp.arange(width)[None, :]
        clipped = jnp.minimum(positions, rows[0].shape[1] - 1)
        rows = [jnp.take_along_axis(r, clipped, axis=1) for r in rows]
        if labels.ndim == 2:
            labels = jnp.take_along_axis(labels, clipped, axis=1)
        if weights is not None:
            weights = jnp.take_along_axis(weights, clipped, axis=1)
    mask = (positions < lengths[:, None]).astype(jnp.int32)
    if len(rows) == 1:
        return (rows[0] * mask, mask), labels, weights
    inputs = []
    for r in rows:  # each part padded with 0 after its own tokens
        inputs += [r * mask, ((r != 0) & (mask != 0)).astype(jnp.int32)]
    return tuple(inputs), labels, weights


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


def split_rows(x: jax.Array, micro: int) -> jax.Array:
    """``(B, ...) -> (micro, B // micro, ...)``: rows ``i * micro + k`` go to piece ``k``."""
    return jnp.swapaxes(x.reshape(-1, micro, *x.shape[1:]), 0, 1)


def merge_rows(x: jax.Array) -> jax.Array:
    """Inverse of :func:`split_rows`: ``(micro, b, ...) -> (micro * b, ...)``."""
    return jnp.swapaxes(x, 0, 1).reshape(-1, *x.shape[2:])
