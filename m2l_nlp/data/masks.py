"""Padding masks: the one way the library turns lengths into a right-padded mask."""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike


def padding_mask(lengths: ArrayLike, width: int) -> np.ndarray:
    """``(..., width)`` int32: 1 at the first ``lengths[i]`` positions of row ``i``, then 0
    (right padding). ``lengths`` is ``(...)``; a length above ``width`` fills the row."""
    return (np.arange(width) < np.asarray(lengths)[..., None]).astype(np.int32)
