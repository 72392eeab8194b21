"""IMDB reviews as characters, for practical 3's language model.

The vocabulary is the most frequent characters of the training reviews (most frequent
first); id 0 is padding and id 1 stands for any other character. A review becomes windows
of ``width`` consecutive characters; each position's label is the next character of the
review, with a weight of 1 (0 where the review ends: nothing is predicted there).
:func:`char_bits` scores the two baselines a language model must beat: the unigram and the
bigram character models of the training text (add-one smoothing).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import os
from collections.abc import Iterable, Sequence

import numpy as np

PAD, UNKNOWN = 0, 1


@dataclasses.dataclass(frozen=True)
class CharVocab:
    """Characters and their ids: ``chars[i]`` has id ``i + 2``."""

    chars: str

    @property
    def size(self) -> int:
        return len(self.chars) + 2

    @functools.cached_property
    def _ids(self) -> dict[str, int]:
        return {c: i + 2 for i, c in enumerate(self.chars)}

    def encode(self, text: str) -> np.ndarray:
        """Ids ``(len(text),)``; a character outside the vocabulary is :data:`UNKNOWN`."""
        ids = self._ids
        return np.fromiter((ids.get(c, UNKNOWN) for c in text), np.int32, len(text))

    def decode(self, ids: Iterable[int]) -> str:
        """The text of ``ids``: padding is dropped, an unknown character shows as U+FFFD."""
        out = []
        for i in ids:
            i = int(i)
            if i >= 2:
                out.append(self.chars[i - 2])
            elif i == UNKNOWN:
                out.append("\ufffd")
        return "".join(out)


def build_vocab(texts: Iterable[str], max_count: int, min_count: int = 5) -> CharVocab:
    """The (at most ``max_count``) most frequent characters of ``texts``, each seen at least
    ``min_count`` times, most frequent first."""
    counts: collections.Counter[str] = collections.Counter()
    for text in texts:
        counts.update(text)
    ranked = sorted(counts.items(), key=lambda cn: (-cn[1], cn[0]))
    return CharVocab("".join(c for c, n in ranked[:max_count] if n >= min_count))


@dataclasses.dataclass(frozen=True)
class Windows:
    """Windows of characters: ``ids``, ``mask``, next-character ``labels`` and their
    ``weights`` (1 where there is a next character, else 0), each ``(N, W)``."""

    ids: np.ndarray
    mask: np.ndarray
    labels: np.ndarray
    weights: np.ndarray

    def split(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self.ids, self.mask, self.labels, self.weights

    @property
    def targets(self) -> int:
        """How many positions have a character to predict."""
        return int(self.weights.sum())


def windows(texts: Sequence[str], vocab: CharVocab, width: int) -> Windows:
    """Each text cut into consecutive windows of ``width`` characters (the last one shorter,
    padded); a position's label is the text's next character, in the window or after it."""
    rows, labels = [], []
    for text in texts:
        ids = vocab.encode(text)
        for start in range(0, max(len(ids) - 1, 0), width):
            chunk = ids[start : start + width]
            nxt = ids[start + 1 : start + width + 1]
            row = np.zeros(width, np.int32)
            row[: len(chunk)] = chunk
            label = np.zeros(width, np.int32)
            label[: len(nxt)] = nxt
            rows.append(row)
            labels.append(label)
    ids = np.stack(rows) if rows else np.zeros((0, width), np.int32)
    labels = np.stack(labels) if labels else np.zeros((0, width), np.int32)
    # every next character is a real one (ids >= 1): padding marks where there is none
    return Windows(ids, (ids != PAD).astype(np.int32), labels, (labels != PAD).astype(np.int32))


def char_bits(train: Sequence[str], held_out: Sequence[str], vocab: CharVocab) -> dict[str, float]:
    """Bits per character on ``held_out`` of the unigram and the bigram character models of
    ``train`` (counts plus one): the numbers a language model has to beat. Every character
    of a text but its first is predicted, as the language model predicts them."""
    v = vocab.size
    unigram = np.ones(v)
    bigram = np.ones((v, v))
    for text in train:
        ids = vocab.encode(text)
        np.add.at(unigram, ids[1:], 1)
        np.add.at(bigram, (ids[:-1], ids[1:]), 1)
    log_uni = np.log2(unigram / unigram.sum())
    log_bi = np.log2(bigram / bigram.sum(axis=1, keepdims=True))
    total_uni = total_bi = 0.0
    count = 0
    for text in held_out:
        ids = vocab.encode(text)
        total_uni -= log_uni[ids[1:]].sum()
        total_bi -= log_bi[ids[:-1], ids[1:]].sum()
        count += max(len(ids) - 1, 0)
    count = max(count, 1)
    return {"unigram": float(total_uni / count), "bigram": float(total_bi / count)}


@dataclasses.dataclass(frozen=True)
class CharData:
    """The reviews as character windows: ``train`` (the training reviews but ``val_size``),
    ``val`` (those, read every epoch), ``test`` (test reviews, read once), with the
    vocabulary and the baselines' bits per character on the test reviews (``baselines``)
    and on the validation reviews (``val_baselines``, None without them)."""

    vocab: CharVocab
    train: Windows
    val: Windows | None
    test: Windows
    baselines: dict[str, float]
    reviews: dict[str, int]  # how many reviews each split holds
    val_baselines: dict[str, float] | None = None


def prepare_characters(
    source: str | os.PathLike | None,
    *,
    width: int,
    max_chars: int,
    val_size: int,
    test_size: int = 2000,
    train_reviews: int = 0,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> CharData:
    """IMDB (``source`` as :func:`~m2l_nlp.data.pipeline.load_imdb` reads it; ``"small"``:
    the bundled reviews) as windows of ``width`` characters. The vocabulary (at most
    ``max_chars`` ids) is built from the training reviews alone; ``val_size`` of them are
    held out, and the first ``test_size`` test reviews (shuffled with ``seed``) are the
    held-out text that the model and the baselines are scored on. ``train_reviews`` > 0
    keeps that many of the other training reviews (vocabulary and baselines included)."""
    from m2l_nlp.data.pipeline import SMALL_DATA, load_imdb

    source = SMALL_DATA if source == "small" else source
    train_df, test_df = load_imdb(source, seed=seed, cache_dir=cache_dir, progress=progress)
    texts = list(train_df["text"])
    val_size = min(val_size, len(texts) // 5)
    held, kept = texts[:val_size], texts[val_size:]
    kept = kept[:train_reviews] if train_reviews else kept
    test = list(test_df["text"][:test_size])
    vocab = build_vocab(kept, max_count=max_chars - 2)
    return CharData(
        vocab=vocab,
        train=windows(kept, vocab, width),
        val=windows(held, vocab, width) if held else None,
        test=windows(test, vocab, width),
        baselines=char_bits(kept, test, vocab),
        reviews={"train": len(kept), "val": len(held), "test": len(test)},
        val_baselines=char_bits(kept, held, vocab) if held else None,
    )
