"""Tests of m2l_nlp.bigrams: the pair table and the interleaved pair tokens."""

from __future__ import annotations

import numpy as np
import pytest

from m2l_nlp import bigrams


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
    """Pair tokens one review at a time, with a dict: t0 b01 t1 b12 ... t(n-1)."""
    index = {(int(a), int(b)): base + 1 + k for k, (a, b) in enumerate(table)}
    out = []
    for i, token in enumerate(row):
        out.append(token)
        if i + 1 < len(row):
            out.append(index.get((token, row[i + 1]), base))
    return out


def test_interleaving_matches_a_per_review_reference():
    rng = np.random.default_rng(0)
    base = 12
    rows = [list(rng.integers(1, base, size=n)) for n in (0, 1, 2, 9, 16, 16, 5)]
    ids, mask = _padded(rows, width=16)
    table = bigrams.fit_bigram_table(ids, mask, size=15, base=base)
    out_ids, out_mask = bigrams.add_bigram_tokens(ids, mask, table, base)
    assert out_ids.shape == out_mask.shape == (len(rows), 32)
    assert out_ids.dtype == out_mask.dtype == np.int32
    for i, row in enumerate(rows):
        expected = _reference([int(t) for t in row], table, base)
        n = len(expected)  # 2 * len(row) - 1 real positions, then padding
        assert out_mask[i].tolist() == [1] * n + [0] * (32 - n)
        assert out_ids[i, :n].tolist() == expected
        assert not out_ids[i, n:].any()
    found = out_ids[:, 1::2][out_mask[:, 1::2] == 1]
    assert (found > base).any() and (found == base).any()  # known and rare pairs both occur
    assert out_ids.max() < bigrams.vocab_size_with_bigrams(base, table)


def test_pairs_are_counted_over_all_reviews_not_per_review():
    ids, mask = _padded([[1, 2], [1, 2], [3, 4, 3, 4, 3, 4]], width=6)
    # (3, 4) three times in one review, (1, 2) once in each of two: counts are totals
    np.testing.assert_array_equal(bigrams.fit_bigram_table(ids, mask, 1, base=5), [[3, 4]])


def test_an_empty_table_gives_every_pair_the_rare_id():
    ids, mask = _padded([[1, 2, 3]], width=4)
    out_ids, out_mask = bigrams.add_bigram_tokens(ids, mask, np.zeros((0, 2), np.int32), base=4)
    assert out_ids[0].tolist() == [1, 4, 2, 4, 3, 0, 0, 0]
    assert out_mask[0].tolist() == [1, 1, 1, 1, 1, 0, 0, 0]


def test_bad_input_says_what_is_wrong():
    ids, mask = _padded([[1, 2, 3]], width=4)
    with pytest.raises(ValueError, match="positive number of pairs"):
        bigrams.fit_bigram_table(ids, mask, 0, base=4)
    with pytest.raises(ValueError, match="same"):
        bigrams.fit_bigram_table(ids, mask[:, :3], 5, base=4)
    with pytest.raises(ValueError, match=r"\[0, 3\)"):
        bigrams.fit_bigram_table(ids, mask, 5, base=3)
    with pytest.raises(ValueError, match=r"\(K, 2\)"):
        bigrams.add_bigram_tokens(ids, mask, np.zeros(3, np.int32), base=4)
