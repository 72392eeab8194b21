"""Practical 3's translation data for the loop: Tatoeba pairs split, tokenized, encoded.

A pair is two rows of ``max_len`` token ids, each padded with 0: the English source, and
the Greek target ``y_1 .. y_n [EOS]``. The loop's batches hold both
(:class:`~m2l_nlp.data.batching.DeviceData` with a tuple of ids), cut by its length buckets
to the pair's longer side. The labels are the target itself, weighted 1 where it has a
token and 0 where it is padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np
from tokenizers import Tokenizer

from m2l_nlp.data import tatoeba
from m2l_nlp.data.masks import padding_mask
from m2l_nlp.data.tatoeba import Pair, PairSplit
from m2l_nlp.data.tokenization import EOS_ID, PAD_ID, encode_sentences, train_translation_tokenizer

VAL_SCORED = 300  # distinct validation sentences translated after every epoch (chrF)


# ((source, target), mask, labels, weights): the pairs as the loop reads them, each (N, L);
# the mask covers a pair's longer side
Pairs = tuple[tuple[np.ndarray, np.ndarray], np.ndarray, np.ndarray, np.ndarray]


class TranslationData(NamedTuple):
    """The split pairs, the tokenizer trained on the training side, and the encoded pairs."""

    pairs: PairSplit
    tokenizer: Tokenizer
    train: Pairs
    val: Pairs | None
    dropped: int  # training pairs longer than the window on either side
    max_len: int


def encode_pairs(tokenizer: Tokenizer, pairs: Sequence[Pair], max_len: int) -> tuple[Pairs, int]:
    """The pairs whose source fits in ``max_len`` tokens and whose target fits with its end
    token, as the loop reads them (:data:`Pairs`), and how many did not fit (left out)."""
    sources = encode_sentences(tokenizer, [p.en for p in pairs])
    targets = encode_sentences(tokenizer, [p.el for p in pairs])
    kept = [
        (source, [*target, EOS_ID])
        for source, target in zip(sources, targets, strict=True)
        if 0 < len(source) <= max_len and len(target) < max_len
    ]
    source_ids = np.full((len(kept), max_len), PAD_ID, np.int32)
    target_ids = np.full((len(kept), max_len), PAD_ID, np.int32)
    for row, (source, target) in enumerate(kept):
        source_ids[row, : len(source)] = source
        target_ids[row, : len(target)] = target
    mask = padding_mask([max(len(s), len(t)) for s, t in kept], max_len)
    weights = (target_ids != PAD_ID).astype(np.int32)
    return ((source_ids, target_ids), mask, target_ids, weights), len(pairs) - len(kept)


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
    (both languages) and encode the training and validation pairs."""
    pairs = tatoeba.read_pairs(tatoeba.resolve_pairs(source, progress=progress))
    split = tatoeba.split_pairs(pairs, seed=seed)
    texts = [text for pair in split.train for text in pair]
    tokenizer = train_translation_tokenizer(texts, vocab_size)
    train, dropped = encode_pairs(tokenizer, split.train, max_len)
    val = encode_pairs(tokenizer, split.val, max_len)[0] if split.val else None
    return TranslationData(split, tokenizer, train, val, dropped, max_len)
