"""What the check modules of practical 1 share: the practical's name and random padded batches."""

from __future__ import annotations

import numpy as np

from m2l_nlp.data.masks import padding_mask
from m2l_nlp.grading.checks.registry import exercises

PRACTICAL = "practical1_baselines"

# fmt: off
# The practical's exercises, one row each: name, points, targets (what the student writes),
# uses (earlier targets they call, replaced by the reference's while graded), title.
EXERCISES = exercises(PRACTICAL, (
    ("multi_hot", 10, ("multi_hot",), (),
     "bag-of-words vectors: 1 where a token occurs, padding ignored"),
    ("bag_of_bigrams", 15, ("bigram_ids", "bag_of_bigrams"), ("multi_hot",),
     "hashed bigrams of neighbouring real tokens, next to the unigrams"),
    ("tfidf", 10, ("fit_idf", "tfidf"), (),
     "inverse document frequencies, and rows weighted and scaled to unit length"),
    ("mlp_classifier", 15, ("MLPClassifier",), (),
     "hidden layers with ReLU and dropout, then one logit per review"),
    ("lstm_classifier", 20, ("LSTMClassifier",), (),
     "embedding and LSTM over the real tokens, final hidden state to one logit"),
))
# fmt: on

# The axes of the main replies, named in the message when a student's reply does not fit the
# reference's (m2l_nlp.grading.checks.replies): a function's entry is its axes; a build's,
# keyed "module.build", the module it runs and its axes.
REPLY_AXES = {
    "multi_hot": "(B, V)",
    "bag_of_bigrams": "(B, V)",
    "tfidf": "(B, V)",
    "fit_idf": "(V,)",
    "models._mlp": ("MLPClassifier", "(B,)"),
    "models._lstm": ("LSTMClassifier", "(B,)"),
}


def random_batch(rng: np.random.Generator, batch: int, length: int, vocab: int):
    """Ids `(batch, length)` with repeats, right padding holding junk ids, and the mask."""
    ids = rng.integers(1, vocab, size=(batch, length)).astype(np.int32)
    lengths = rng.integers(1, length + 1, size=batch)
    lengths[0] = length
    if batch > 1:
        lengths[1] = max(1, length // 2)
    return ids, padding_mask(lengths, length)
