"""Tests of m2l_nlp.data.characters: the characters of reviews, their windows and baselines."""

from __future__ import annotations

import numpy as np

from m2l_nlp.data import characters
from m2l_nlp.data.characters import PAD, UNKNOWN, CharVocab

TRAIN = ["the cat sat on the mat. " * 3, "a hat, the cat, that rat. " * 3]


def test_the_vocabulary_comes_from_the_training_text_only():
    vocab = characters.build_vocab(TRAIN, max_count=50, min_count=1)
    assert set(vocab.chars) == set("".join(TRAIN))
    assert vocab.chars[0] in " t"  # most frequent first
    ids = vocab.encode("the dog!")
    assert ids[4] == vocab.chars.index("d") + 2 if "d" in vocab.chars else ids[4] == UNKNOWN
    assert ids[-1] == UNKNOWN and PAD not in ids
    assert vocab.decode(vocab.encode("the mat")) == "the mat"
    assert vocab.decode([*vocab.encode("at"), UNKNOWN, PAD]) == "at\ufffd"
    rare = characters.build_vocab(TRAIN, max_count=3, min_count=1)
    assert len(rare.chars) == 3 and rare.size == 5


def test_windows_label_each_position_with_the_next_character():
    vocab = CharVocab("abcdefgh")
    win = characters.windows(["abcdefg", "ab"], vocab, width=4)
    assert win.ids.shape == (3, 4)  # "abcd" + "efg" (padded), "ab"
    assert vocab.decode(win.ids[0]) == "abcd" and vocab.decode(win.labels[0]) == "bcde"
    assert vocab.decode(win.ids[1]) == "efg" and vocab.decode(win.labels[1][:2]) == "fg"
    assert win.weights[1].tolist() == [1, 1, 0, 0]  # the review ends: no target after it
    assert win.mask[1].tolist() == [1, 1, 1, 0]
    assert win.labels[2].tolist()[0] == vocab.encode("b")[0]
    assert win.weights[2].tolist() == [1, 0, 0, 0]
    assert win.targets == 4 + 2 + 1  # every character but the first of each review
    ids, mask, labels, weights = win.split()  # in the order the loop's batches hold them
    assert ids is win.ids and mask is win.mask and labels is win.labels and weights is win.weights


def test_the_bigram_baseline_beats_the_unigram_on_text_with_structure():
    vocab = characters.build_vocab(TRAIN, max_count=50, min_count=1)
    bits = characters.char_bits(TRAIN, ["the cat sat on a mat, that hat."], vocab)
    assert 0 < bits["bigram"] < bits["unigram"] < np.log2(vocab.size) + 0.5


def test_the_small_data_make_train_validation_and_test_windows():
    data = characters.prepare_characters("small", width=64, max_chars=100, val_size=50)
    assert data.reviews["val"] == 50 and data.reviews["test"] > 0
    assert data.vocab.size <= 100 and data.train.ids.shape[1] == 64
    assert data.baselines["bigram"] < data.baselines["unigram"]
