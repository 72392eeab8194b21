"""Tests of m2l_nlp.data.bigrams: the pair table and the merged pair tokens."""

from __future__ import annotations

import numpy as np
import pytest

from m2l_nlp.data import bigrams


def _padded(rows: list[list[int]], width: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    for i, row in enumerate(rows):
        ids[i, : len(row)] = row
        mask[i, : len(row)] = 1
    return ids, mask


def test_fit_keeps_the_most_frequent_pairs_of_real_tokens():
    # (5, 6) three times, (6, 7) twice, (7, 5) and (6, 5) once each; padding pairs never count
    ids, mask = _padded([[5, 6, 7, 5, 6], [5, 6, 7], [6, 5]], width=7)
    table = bigrams.fit_bigram_table(ids, mask, size=2, base=10)
    np.testing.assert_array_equal(table, [[5, 6], [6, 7]])
    assert table.dtype == np.int32
    # a tie between (6, 5) and (7, 5) goes to the smaller pair; the table comes out sorted
    table = bigrams.fit_bigram_table(ids, mask, size=3, base=10)
    np.testing.assert_array_equal(table, [[5, 6], [6, 5], [6, 7]])
    assert len(bigrams.fit_bigram_table(ids, mask, size=100, base=10)) == 4  # all there are


def _reference(row: list[int], table: np.ndarray, base: int) -> list[int]:
    """Pair tokens one review at a time, with a dict: each token, or its pair with the next."""
    index = {(int(a), int(b)): base + k for k, (a, b) in enumerate(table)}
    return [
        index.get((token, row[i + 1]), token) if i + 1 < len(row) else token
        for i, token in enumerate(row)
    ]


def _random_reviews(seed: int, base: int, lengths: tuple[int, ...], pairs: int):
    """Random reviews of the given lengths (as lists, and padded), and their pair table."""
    rng = np.random.default_rng(seed)
    rows = [[int(t) for t in rng.integers(1, base, size=n)] for n in lengths]
    ids, mask = _padded(rows, width=max(lengths))
    return rows, ids, mask, bigrams.fit_bigram_table(ids, mask, size=pairs, base=base)


def test_merging_matches_a_per_review_reference():
    base = 12
    rows, ids, mask, table = _random_reviews(0, base, (0, 1, 2, 9, 16, 16, 5), pairs=15)
    out = bigrams.merge_bigram_tokens(ids, mask, table, base)
    assert out.shape == ids.shape and out.dtype == np.int32
    for i, row in enumerate(rows):
        n = len(row)
        assert out[i, :n].tolist() == _reference(row, table, base)
        assert not out[i, n:].any()  # padding stays padding
    real = out[mask == 1]
    assert (real >= base).any() and (real < base).any()  # pairs and plain tokens both occur
    assert out.max() < bigrams.vocab_size_with_bigrams(base, table)
    # a pair id says which token stands at its position: nothing is lost
    merged = out >= base
    np.testing.assert_array_equal(table[out[merged] - base, 0], ids[merged])


def test_a_pair_with_padding_is_never_merged():
    ids = np.array([[3, 4, 0, 0], [3, 4, 3, 0]], np.int32)
    mask = np.array([[1, 0, 0, 0], [1, 1, 1, 0]], np.int32)  # row 0: token 4 is masked out
    out = bigrams.merge_bigram_tokens(ids, mask, np.array([[3, 4], [4, 3]], np.int32), base=5)
    assert out.tolist() == [[3, 4, 0, 0], [5, 6, 3, 0]]


def test_pairs_are_counted_over_all_reviews_not_per_review():
    ids, mask = _padded([[1, 2], [1, 2], [3, 4, 3, 4, 3, 4]], width=6)
    # (3, 4) three times in one review, (1, 2) once in each of two: counts are totals
    np.testing.assert_array_equal(bigrams.fit_bigram_table(ids, mask, 1, base=5), [[3, 4]])


def test_an_empty_table_changes_nothing():
    ids, mask = _padded([[1, 2, 3]], width=4)
    out = bigrams.merge_bigram_tokens(ids, mask, np.zeros((0, 2), np.int32), base=4)
    assert out.tolist() == ids.tolist()


def test_bad_input_says_what_is_wrong():
    ids, mask = _padded([[1, 2, 3]], width=4)
    with pytest.raises(ValueError, match="positive number of pairs"):
        bigrams.fit_bigram_table(ids, mask, 0, base=4)
    with pytest.raises(ValueError, match="same"):
        bigrams.fit_bigram_table(ids, mask[:, :3], 5, base=4)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        bigrams.fit_bigram_table(ids, mask, 5, base=3)
    with pytest.raises(ValueError, match=r"\(K, 2\)"):
        bigrams.merge_bigram_tokens(ids, mask, np.zeros(3, np.int32), base=4)
    with pytest.raises(ValueError, match="sorted"):
        bigrams.merge_bigram_tokens(ids, mask, np.array([[2, 3], [1, 2]], np.int32), base=4)


def test_the_table_round_trips(tmp_path):
    table = np.array([[1, 2], [3, 4]], np.int32)
    assert bigrams.load_table(tmp_path) is None  # nothing saved
    bigrams.save_table(tmp_path, table)
    np.testing.assert_array_equal(bigrams.load_table(tmp_path), table)
