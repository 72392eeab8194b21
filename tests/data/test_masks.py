"""m2l_nlp.data.masks: padding masks from lengths."""

from __future__ import annotations

import numpy as np


def test_padding_mask_is_ones_then_zeros_per_length():
    from m2l_nlp.data.masks import padding_mask

    mask = padding_mask(np.array([3, 0, 6]), 4)
    assert mask.dtype == np.int32
    np.testing.assert_array_equal(mask, [[1, 1, 1, 0], [0, 0, 0, 0], [1, 1, 1, 1]])
    assert padding_mask(np.zeros((2, 3), int), 5).shape == (2, 3, 5)  # any leading axes
