"""Bigram tokens: the frequent pairs of neighbouring tokens as tokens of their own.

A review encoded to token ids ``t0 t1 t2 ...`` becomes ``p0 p1 p2 ...``, where ``p_i`` is
the id of the pair ``(t_i, t_i+1)`` when that pair is in a table of the ``size`` most
frequent pairs of the training reviews, and ``t_i`` itself otherwise (always for the last
token). A pair id still says which token stands at its position, so nothing is lost; it
also says which token comes next, so each position's embedding can depend on a two-token
phrase ("not good" is not "good"). The sequence keeps its length and the model is
unchanged: the pairs are tokens like any other, with their own embedding rows after the
tokenizer's vocabulary.

A preset's ``bigram_backoff`` also gives each pair its first token's vector
(:func:`m2l_nlp.model.classifiers.pair_tie`).

Ids: ``0 .. base - 1`` are the tokenizer's; ``base + k`` is pair ``k`` of the table. The
table is ``(K, 2)`` int32, sorted, and saved with the tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TABLE_FILE = "bigrams.npy"


def _codes(ids: np.ndarray, base: int) -> np.ndarray:
    """Pair codes ``first * base + second`` of neighbouring tokens: int64 ``(N, S - 1)``."""
    ids = np.asarray(ids, dtype=np.int64)
    return ids[:, :-1] * base + ids[:, 1:]


def _check_shapes(ids: np.ndarray, mask: np.ndarray) -> None:
    if ids.shape != mask.shape or ids.ndim != 2:
        raise ValueError(f"ids {ids.shape} and mask {mask.shape} must be the same (N, S) shape")


def fit_bigram_table(ids: np.ndarray, mask: np.ndarray, size: int, base: int) -> np.ndarray:
    """The ``size`` most frequent pairs of neighbouring real tokens in ``ids`` ``(N, S)``.

    ``base`` is the tokenizer's vocabulary size. Ties go to the smaller pair, so the table
    depends on the data only. Returns int32 ``(K, 2)`` sorted pairs, ``K <= size``.
    """
    if size < 1:
        raise ValueError(f"size must be a positive number of pairs, not {size}")
    ids, mask = np.asarray(ids), np.asarray(mask)
    _check_shapes(ids, mask)
    if ids.size and (ids.min() < 0 or ids.max() >= base):
        raise ValueError(f"token ids must lie in [0, {base}): is base the tokenizer's size?")
    valid = (mask[:, :-1] != 0) & (mask[:, 1:] != 0)
    codes, counts = np.unique(_codes(ids, base)[valid], return_counts=True)
    keep = np.sort(codes[np.argsort(-counts, kind="stable")[:size]])
    return np.stack([keep // base, keep % base], axis=1).astype(np.int32)


def vocab_size_with_bigrams(base: int, table: np.ndarray) -> int:
    """Embedding rows needed: the tokenizer's ``base`` ids, then one per pair of the table."""
    return base + len(table)


def merge_bigram_tokens(
    ids: np.ndarray, mask: np.ndarray, table: np.ndarray, base: int
) -> np.ndarray:
    """Token ids ``(N, S)`` -> int32 ``(N, S)`` where each token followed by a real token
    is replaced by the id of that pair if the pair is in ``table``. The mask is unchanged.
    """
    ids, mask, table = np.asarray(ids), np.asarray(mask), np.asarray(table)
    _check_shapes(ids, mask)
    if table.ndim != 2 or table.shape[1] != 2:
        raise ValueError(f"the bigram table must have shape (K, 2), not {table.shape}")
    out = ids.astype(np.int32)
    if ids.shape[1] < 2 or len(table) == 0:
        return out
    known = table[:, 0].astype(np.int64) * base + table[:, 1]
    if np.any(np.diff(known) <= 0):
        raise ValueError(
            "the bigram table must be sorted without repeats, as fit_bigram_table returns it"
        )
    codes = _codes(ids, base)
    at = np.minimum(np.searchsorted(known, codes), len(known) - 1)
    found = (known[at] == codes) & (mask[:, :-1] != 0) & (mask[:, 1:] != 0)
    out[:, :-1] = np.where(found, base + at, out[:, :-1])
    return out


def save_table(folder: Path, table: np.ndarray) -> None:
    """Write ``table`` into ``folder``."""
    np.save(Path(folder) / TABLE_FILE, np.asarray(table, np.int32))


def load_table(folder: Path) -> np.ndarray | None:
    """The table :func:`save_table` wrote in ``folder`` (``None`` if none)."""
    folder = Path(folder)
    if not (folder / TABLE_FILE).is_file():
        return None
    return np.load(folder / TABLE_FILE, allow_pickle=False)
