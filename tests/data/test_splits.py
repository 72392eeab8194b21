"""The one validation split: runs of neighbouring file ids (films), the same for every encoding."""

import dataclasses

import numpy as np
import pytest

from m2l_nlp.data import pipeline as data
from m2l_nlp.data.splits import film_blocks, shuffle_order, split_validation


def assert_runs(positions: np.ndarray, first: int, block: int) -> list[int]:
    """``positions`` (file positions of one label, which start at ``first``) fill the starts
    of runs ``[first + k * block, first + (k + 1) * block)``: the lengths of those runs."""
    relative = np.sort(positions) - first
    lengths = []
    for run in np.unique(relative // block):
        held = relative[relative // block == run]
        np.testing.assert_array_equal(held, run * block + np.arange(len(held)))
        lengths.append(len(held))
    return lengths


def test_film_blocks_are_runs_of_neighbouring_file_ids_in_each_labels_share():
    """600 negative then 400 positive reviews in file order, shuffled: 95 held out as runs of
    10 file ids, 57 negative and 38 positive (each label's share), whole runs but the last."""
    file_labels = np.r_[np.zeros(600, np.int32), np.ones(400, np.int32)]
    order = shuffle_order(1000, 7)
    labels = file_labels[order]
    rows = film_blocks(order, labels, 95, 10, np.random.default_rng(0))
    assert len(rows) == 95 and np.all(np.diff(rows) > 0)
    for label, first, share in ((0, 0, 57), (1, 600, 38)):
        lengths = assert_runs(order[rows][labels[rows] == label], first, 10)
        assert sum(lengths) == share and sorted(lengths)[1:] == [10] * (len(lengths) - 1)
    again = film_blocks(order, labels, 95, 10, np.random.default_rng(0))
    np.testing.assert_array_equal(rows, again)


def test_one_validation_split_of_films_for_every_encoding(tmp_path):
    """For a given seed, presets with other encodings validate on the same reviews: runs of
    neighbouring file ids, not reviews drawn one by one; both splits keep the shuffle."""
    from m2l_nlp.config import PRESETS

    demo = data.prepare_for(PRESETS["demo"], "small", seed=3, cache_dir=tmp_path, progress=False)
    plain = data.prepare_imdb(
        data.SMALL_DATA, vocab_size=500, seq_len=64, seed=3, cache_dir=tmp_path, progress=False
    )
    again = data.prepare_for(PRESETS["demo"], "small", seed=3, cache_dir=tmp_path, progress=False)
    assert again.from_cache and demo.shuffle_seed == plain.shuffle_seed == again.shuffle_seed == 3
    n = len(demo.train_labels)
    rows = np.arange(n, dtype=np.int32)[:, None]  # each review's row, in place of its ids
    train, val = split_validation(dataclasses.replace(demo, train_ids=rows), 40)
    assert len(train[2]) == n - 40 and len(val[2]) == 40
    held, kept = val[0][:, 0], train[0][:, 0]
    np.testing.assert_array_equal(np.sort(np.r_[held, kept]), np.arange(n))
    assert np.all(np.diff(held) > 0) and np.all(np.diff(kept) > 0)  # the shuffled order
    np.testing.assert_array_equal(val[2], demo.train_labels[held])
    # one run of 20 neighbouring file ids per label (runs of 50, the last cut to fit)
    positions, file_labels = shuffle_order(n, 3)[held], val[2]
    negatives = int((demo.train_labels == 0).sum())
    assert assert_runs(positions[file_labels == 0], 0, 50) == [20]
    assert assert_runs(positions[file_labels == 1], negatives, 50) == [20]
    _, other_val = split_validation(plain, 40)
    np.testing.assert_array_equal(val[2], other_val[2])
    np.testing.assert_array_equal(val[1].sum(1) > 0, True)
    assert split_validation(demo, 0)[1] is None
    with pytest.raises(ValueError, match="val_size"):
        split_validation(demo, n)
