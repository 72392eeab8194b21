"""The one validation split: which training reviews validate a run.

The reviews of a prepared split are shuffled (:func:`shuffle_order`); the validation reviews
are runs of neighbouring file ids (:func:`film_blocks`), so that, as for the test set, most
of their films have no review in training (docs/results.md, "How runs are made").
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from m2l_nlp.data.pipeline import PreparedData

Split = tuple[np.ndarray, np.ndarray, np.ndarray]  # ids (N, S), mask (N, S), labels (N,)


def shuffle_order(n: int, seed: int) -> np.ndarray:
    """The shuffle of a split of ``n`` reviews prepared with ``seed``: row ``r`` holds review
    ``order[r]`` of the split in file order (by label, then file id)."""
    return np.random.default_rng(seed).permutation(n)


VAL_BLOCK = 50  # neighbouring file ids per run of the validation split: about one film


def validation_rng(seed: int | None) -> np.random.Generator:
    """The generator that draws the validation runs of reviews shuffled with ``seed``."""
    return np.random.default_rng(1000 + (seed or 0))


def film_blocks(
    order: np.ndarray, labels: np.ndarray, size: int, block: int, rng: np.random.Generator
) -> np.ndarray:
    """Rows of a split to hold out, ``size`` of them, as runs of ``block`` neighbouring file
    ids. Row ``r`` holds review ``order[r]`` of the split in file order, and ``labels`` are
    the rows' labels. Each label gives its share of ``size`` (in proportion to its reviews),
    taken as whole runs drawn at random, the last one cut to fit. Sorted rows.

    Neighbouring file ids of the IMDB archive are mostly reviews of one film, and the test
    films have no review in training: held out this way, most validation films have none
    either, so validation accuracy measures what carries over to unseen films.
    """
    order, labels = np.asarray(order), np.asarray(labels)
    by_position = np.empty_like(labels)
    by_position[order] = labels
    held = np.zeros(len(order), bool)  # by file position
    values, first, counts = np.unique(by_position, return_index=True, return_counts=True)
    in_file_order = np.argsort(first)
    values, counts = values[in_file_order], counts[in_file_order]
    shares = np.diff(np.round(np.cumsum(counts) * size / len(order)), prepend=0).astype(int)
    for value, share in zip(values, shares, strict=True):
        positions = np.flatnonzero(by_position == value)
        taken = 0
        for start in rng.permutation(np.arange(0, len(positions), block)):
            if taken >= share:
                break
            run = positions[start : start + min(block, share - taken)]
            held[run] = True
            taken += len(run)
    return np.flatnonzero(held[order])


def split_validation(data: PreparedData, val_size: int) -> tuple[Split, Split | None]:
    """``(train, validation)`` splits of the training reviews (None for ``val_size=0``).

    The validation reviews are :func:`film_blocks` of :data:`VAL_BLOCK` neighbouring file
    ids, drawn with the seed that shuffled the reviews (:func:`m2l_nlp.data.pipeline.prepare_imdb`):
    for a given seed, every model, whatever its encoding, validates on the same reviews.
    Both splits keep the shuffled order."""
    n = len(data.train_labels)
    if not 0 <= val_size < n:
        raise ValueError(f"val_size must be in [0, {n}), not {val_size}")
    arrays = (data.train_ids, data.train_mask, data.train_labels)
    if not val_size:
        return arrays, None
    seed = data.shuffle_seed
    order = np.arange(n) if seed is None else shuffle_order(n, seed)
    rng = validation_rng(seed)
    held = np.zeros(n, bool)
    held[film_blocks(order, data.train_labels, val_size, VAL_BLOCK, rng)] = True
    return tuple(a[~held] for a in arrays), tuple(a[held] for a in arrays)
