"""What the check modules of practical 1 share: the practical's name and random padded batches."""

from __future__ import annotations

import numpy as np

from m2l_nlp.data.masks import padding_mask

PRACTICAL = "practical1_baselines"


def random_batch(rng: np.random.Generator, batch: int, length: int, vocab: int):
    """Ids `(batch, length)` with repeats, right padding holding junk ids, and the mask."""
    ids = rng.integers(1, vocab, size=(batch, length)).astype(np.int32)
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length
    if batch > 1:
        lengths[1] = max(1, length // 2)
    return ids, padding_mask(lengths, length)
