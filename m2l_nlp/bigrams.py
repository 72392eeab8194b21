"""Bigram tokens: the frequent pairs of neighbouring tokens as extra tokens of the input.

A review encoded to token ids ``t0 t1 t2 ...`` becomes ``t0 b01 t1 b12 t2 ...``, where
``b01`` is the id of the pair ``(t0, t1)`` in a table of the ``size`` most frequent pairs
of the training reviews (pairs not in the table share one "rare pair" id). The model is
unchanged: the pairs are tokens like any other, with their own embedding rows after the
tokenizer's vocabulary. Sequences get twice as long (``2 * seq_len``).

Ids: ``0 .. base - 1`` are the tokenizer's; ``base`` is the rare pair; ``base + 1 + k`` is
pair ``k`` of the table. The table is ``(K, 2)`` int32, sorted, and saved with the tokenizer.
"""

from __future__ import annotations

import numpy as np

TABLE_FILE = "bigrams.npy"


def _codes(ids: np.ndarray, base: int) -> np.ndarray:
    """Pair codes ``first * base + second`` of neighbouring tokens: int64 ``(N, S - 1)``."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids[:, :-1] * base + ids[:, 1:]


def fit_bigram_table(ids: np.ndarray, mask: np.ndarray, size: int, base: int) -> np.ndarray:
    """The ``size`` most frequent pairs of neighbouring real tokens in ``ids`` ``(N, S)``.

    ``base`` is the tokenizer's vocabulary size. Ties go to the smaller pair, so the table
    depends on the data only. Returns int32 ``(K, 2)`` sorted pairs, ``K <= size``.
    """
    if size < 1:
        raise ValueError(f"size must be a positive number of pairs, not {size}")
    ids, mask = np.asarray(ids), np.asarray(mask)
    if ids.shape != mask.shape or ids.ndim != 2:
        raise ValueError(f"ids {ids.shape} and mask {mask.shape} must be the same (N, S) shape")
    if ids.size and (ids.min() < 0 or ids.max() >= base):
        raise ValueError(f"token ids must lie in [0, {base}): is base the tokenizer's size?")
    valid = (mask[:, :-1] != 0) & (mask[:, 1:] != 0)
    codes, counts = np.unique(_codes(ids, base)[valid], return_counts=True)
    keep = np.sort(codes[np.argsort(-counts, kind="stable")[:size]])
    return np.stack([keep // base, keep % base], axis=1).astype(np.int32)


def vocab_size_with_bigrams(base: int, table: np.ndarray) -> int:
    """Embedding rows needed: the tokenizer's ``base`` ids, the rare pair, the table."""
    return base + 1 + len(table)


def add_bigram_tokens(
    ids: np.ndarray, mask: np.ndarray, table: np.ndarray, base: int
) -> tuple[np.ndarray, np.ndarray]:
    """Interleave pair tokens: ``(N, S)`` ids and mask -> int32 ``(N, 2S)`` ids and mask.

    Position ``2i`` holds token ``i``; position ``2i + 1`` the pair ``(i, i + 1)`` when both
    are real tokens, else padding. A review of ``n`` tokens gets ``2n - 1`` real positions,
    all at the start (padding stays on the right).
    """
    ids, mask, table = np.asarray(ids), np.asarray(mask), np.asarray(table)
    if ids.shape != mask.shape or ids.ndim != 2:
        raise ValueError(f"ids {ids.shape} and mask {mask.shape} must be the same (N, S) shape")
    if table.ndim != 2 or table.shape[1] != 2:
        raise ValueError(f"the bigram table must have shape (K, 2), not {table.shape}")
    n, s = ids.shape
    out_ids = np.zeros((n, 2 * s), np.int32)
    out_mask = np.zeros((n, 2 * s), np.int32)
    out_ids[:, 0::2] = ids
    out_mask[:, 0::2] = mask != 0
    if s > 1:
        known = table[:, 0].astype(np.int64) * base + table[:, 1]
        codes = _codes(ids, base)
        at = np.minimum(np.searchsorted(known, codes), max(len(known) - 1, 0))
        found = known[at] == codes if len(known) else np.zeros(codes.shape, bool)
        pair_ids = np.where(found, base + 1 + at, base)
        valid = (mask[:, :-1] != 0) & (mask[:, 1:] != 0)
        out_ids[:, 1:-1:2] = np.where(valid, pair_ids, 0)
        out_mask[:, 1:-1:2] = valid
    return out_ids, out_mask
