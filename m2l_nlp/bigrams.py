"""Bigram tokens: the frequent pairs of neighbouring tokens as tokens of their own.

A review encoded to token ids ``t0 t1 t2 ...`` becomes ``p0 p1 p2 ...``, where ``p_i`` is
the id of the pair ``(t_i, t_i+1)`` when that pair is in a table of the ``size`` most
frequent pairs of the training reviews, and ``t_i`` itself otherwise (always for the last
token). A pair id still says which token stands at its position, so nothing is lost; it
also says which token comes next, so each position's embedding can depend on a two-token
phrase ("not good" is not "good"). The sequence keeps its length and the model is
unchanged: the pairs are tokens like any other, with their own embedding rows after the
tokenizer's vocabulary.

That is the ``"merge"`` mode. The ``"interleave"`` mode keeps every token and puts the
pair's id right after it instead: ``t0 p01 t1 p12 t2 ...``, with a pair slot only where the
pair is in the table. The sequence grows (by 78 % on IMDB with 50,000 pairs), but every word
keeps a vector of its own next to those of its phrases, where merging spreads what is learnt
about "great" over "great film", "great acting" and every other pair that starts with it.
(On our validation split it did not beat merging; see docs/results.md.) A preset's
``bigram_backoff`` keeps the merged sequence and gives each pair its first token's vector
as well (:func:`m2l_nlp.model.pair_tie`).

Ids: ``0 .. base - 1`` are the tokenizer's; ``base + k`` is pair ``k`` of the table. The
table is ``(K, 2)`` int32, sorted, and saved with the tokenizer.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

TABLE_FILE = "bigrams.npy"
MODE_FILE = "bigram_mode.txt"  # beside the table; absent: "merge"
MODES = ("merge", "interleave")


def check_mode(mode: str) -> str:
    """``mode`` if it is one of :data:`MODES`, else a ``ValueError`` that lists them."""
    if mode not in MODES:
        raise ValueError(f"bigram_mode must be one of {MODES}, not {mode!r}")
    return mode


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


def interleave_bigram_tokens(
    ids: np.ndarray, mask: np.ndarray, table: np.ndarray, base: int, seq_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Token ids ``(N, S)`` -> ids and mask int32 ``(N, seq_len)``: each real token, then the
    id of its pair with the next token when that pair is in ``table`` (``t0 p01 t1 ...``).

    Reviews longer than ``seq_len`` positions are cut (default: the longest result).
    """
    merged = merge_bigram_tokens(ids, mask, table, base)
    mask = np.asarray(mask) != 0
    if np.any(mask[:, 1:] & ~mask[:, :-1]):
        raise ValueError("interleaving needs the real tokens first in each row, then padding")
    has_pair = merged >= base  # only where the pair is real and in the table
    n, s = merged.shape
    # each token moves right by the number of pair slots before it
    shift = np.cumsum(has_pair, axis=1) - has_pair
    pos = np.arange(s)[None, :] + shift
    lengths = mask.sum(axis=1) + has_pair.sum(axis=1)
    width = int(lengths.max(initial=0)) if seq_len is None else seq_len
    out = np.zeros((n, max(2 * s, width)), np.int32)
    rows = np.broadcast_to(np.arange(n)[:, None], (n, s))
    tokens = np.asarray(ids).astype(np.int32)
    out[rows[mask], pos[mask]] = tokens[mask]
    out[rows[has_pair], pos[has_pair] + 1] = merged[has_pair]
    out = out[:, :width]
    new_mask = (np.arange(width)[None, :] < lengths[:, None]).astype(np.int32)
    return out * new_mask, new_mask


def apply_bigram_tokens(
    ids: np.ndarray,
    mask: np.ndarray,
    table: np.ndarray,
    base: int,
    mode: str = "merge",
    seq_len: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Ids and mask with the pair tokens of ``table`` added the ``mode`` way (see above).

    ``"merge"`` keeps the shape ``(N, S)``; ``"interleave"`` returns ``(N, seq_len)``.
    """
    if check_mode(mode) == "interleave":
        return interleave_bigram_tokens(ids, mask, table, base, seq_len)
    return merge_bigram_tokens(ids, mask, table, base), np.asarray(mask, np.int32)


def save_table(folder: Path, table: np.ndarray, mode: str) -> None:
    """Write ``table`` (and ``mode`` unless it is ``"merge"``) into ``folder``."""
    check_mode(mode)
    np.save(Path(folder) / TABLE_FILE, np.asarray(table, np.int32))
    if mode != "merge":
        (Path(folder) / MODE_FILE).write_text(mode + "\n")


def load_table(folder: Path) -> tuple[np.ndarray | None, str]:
    """The table and mode :func:`save_table` wrote in ``folder`` (``None, "merge"`` if none)."""
    folder = Path(folder)
    if not (folder / TABLE_FILE).is_file():
        return None, "merge"
    table = np.load(folder / TABLE_FILE, allow_pickle=False)
    mode = "merge"
    if (folder / MODE_FILE).is_file():
        mode = (folder / MODE_FILE).read_text().strip()
        if mode not in MODES:
            raise ValueError(f"{folder / MODE_FILE} names an unknown bigram mode {mode!r}")
    return table, mode
