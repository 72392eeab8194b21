"""Practical 3's translation data for the loop: Tatoeba pairs split, tokenized and packed.

The loop trains on rows of one array (:mod:`m2l_nlp.train.loop`), so a pair is packed into
one row of ``2 * max_len`` token ids, interleaved: the English source at the even columns,
the Greek target ``y_1 .. y_n [EOS]`` at the odd ones, each padded to ``max_len``. Both
sides then end near the front of the row, and the loop's length buckets cut a batch of short
sentences to a few columns (a row's length is twice its longer side). Its labels
``(2 * max_len,)`` are the target's ids at the odd columns, ``-1`` elsewhere (nothing to
score). The practical's ``translation_forward`` unpacks a row.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from tokenizers import Tokenizer

from m2l_nlp.data import tatoeba
from m2l_nlp.data.tatoeba import Pair, PairSplit
from m2l_nlp.data.tokenization import EOS_ID, PAD_ID, encode_sentences, train_translation_tokenizer

NOTHING = -1  # the label of a target position that is padding
VAL_SCORED = 300  # distinct validation sentences translated after every epoch (chrF)


class TranslationData(NamedTuple):
    """The split pairs, the tokenizer trained on the training side, and the packed rows."""

    pairs: PairSplit
    tokenizer: Tokenizer
    train: tuple[np.ndarray, np.ndarray, np.ndarray]  # ids (N, 2L), mask (N, 2L), labels (N, L)
    val: tuple[np.ndarray, np.ndarray, np.ndarray] | None
    dropped: int  # training pairs longer than the window on either side
    max_len: int


def pack(
    tokenizer: Tokenizer, pairs: Sequence[Pair], max_len: int
) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], int]:
    """Packed rows ``(ids, mask, labels)``, each ``(N, 2L)``, of the pairs whose source fits
    in ``max_len`` tokens and whose target fits with its end token, and how many did not
    (left out)."""
    sources = encode_sentences(tokenizer, [p.en for p in pairs])
    targets = encode_sentences(tokenizer, [p.el for p in pairs])
    kept = [
        (source, [*target, EOS_ID])
        for source, target in zip(sources, targets, strict=True)
        if 0 < len(source) <= max_len and len(target) < max_len
    ]
    ids = np.full((len(kept), 2 * max_len), PAD_ID, np.int32)
    lengths = np.zeros(len(kept), np.int64)
    for row, (source, target) in zip(ids, kept, strict=True):
        row[0 : 2 * len(source) : 2] = source
        row[1 : 2 * len(target) : 2] = target
    for i, (source, target) in enumerate(kept):
        lengths[i] = 2 * max(len(source), len(target))
    mask = (np.arange(2 * max_len)[None, :] < lengths[:, None]).astype(np.int32)
    labels = np.full_like(ids, NOTHING)
    labels[:, 1::2] = np.where(ids[:, 1::2] == PAD_ID, NOTHING, ids[:, 1::2])
    return (ids, mask, labels), len(pairs) - len(kept)


def encode_sources(
    tokenizer: Tokenizer, sentences: Sequence[str], max_len: int
) -> tuple[np.ndarray, np.ndarray, int]:
    """Source ids and mask ``(N, max_len)`` of English sentences, each cut to ``max_len``
    tokens, and how many were cut."""
    encoded = encode_sentences(tokenizer, list(sentences))
    ids = np.zeros((len(encoded), max_len), np.int32)
    for row, tokens in zip(ids, encoded, strict=True):
        row[: min(len(tokens), max_len)] = tokens[:max_len]
    return ids, (ids != PAD_ID).astype(np.int32), sum(len(t) > max_len for t in encoded)


def prepare_translation(
    source: str | None = None,
    *,
    vocab_size: int,
    max_len: int,
    seed: int = 0,
    progress: bool = True,
) -> TranslationData:
    """Read the pairs (``source`` as :func:`m2l_nlp.data.tatoeba.resolve_pairs` takes it),
    split them by component with ``seed``, train the shared tokenizer on the training side
    (both languages) and pack the training and validation pairs."""
    pairs = tatoeba.read_pairs(tatoeba.resolve_pairs(source, progress=progress))
    split = tatoeba.split_pairs(pairs, seed=seed)
    texts = [text for pair in split.train for text in pair]
    tokenizer = train_translation_tokenizer(texts, vocab_size)
    train, dropped = pack(tokenizer, split.train, max_len)
    val = pack(tokenizer, split.val, max_len)[0] if split.val else None
    return TranslationData(split, tokenizer, train, val, dropped, max_len)
