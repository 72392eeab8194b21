"""Practical 1's baselines as classifiers of token ids: bag-of-words MLP, bag-of-bigrams MLP, LSTM.

Every baseline is a stateful forward ``forward(input_ids, mask, is_train=True) -> logits (B,)``,
the same signature as practical 2's ``classifier_forward``, so the one training loop
(:func:`m2l_nlp.runs.experiment.train_and_evaluate` with the presets ``bow-mlp``, ``bigram-mlp`` and
``lstm`` of :mod:`m2l_nlp.config`) serves all models; :func:`m2l_nlp.model.classifiers.for_preset`
makes it pure with ``funcs_from_stateful``. For the MLPs the features are computed *inside* the
forward, one batch at a time: the dense bag-of-bigrams matrix of all of IMDB (25,000 x
150,000 float32, 15 GB) never exists.

The components (``multi_hot``, ``bag_of_bigrams``, ``tfidf``, ``MLPClassifier``,
``LSTMClassifier``) come from ``<impl>/practical1_baselines.py``: the reference solutions by
default, or a student's exercises; ``impl`` may also be a notebook's ``globals()``
(:func:`m2l_nlp.impl.practical_namespace`).
"""

from __future__ import annotations

from collections.abc import Callable

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp.config import BaselineConfig
from m2l_nlp.impl import Impl, practical_namespace

PRACTICAL = "practical1_baselines"

Forward = Callable[..., jax.Array]


def num_features(config: BaselineConfig, vocab_size: int) -> int:
    """Width of the MLP's input: ``V`` (bow) or ``V + num_buckets`` (bigrams)."""
    if config.model == "bow-mlp":
        return vocab_size
    if config.model == "bigram-mlp":
        return vocab_size + config.num_buckets
    raise ValueError(f"{config.model!r} has no feature vector (it reads token ids)")


def featurizer(
    config: BaselineConfig, vocab_size: int, impl: Impl = "solutions"
) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``features(ids (B, S), mask (B, S)) -> (B, F)`` float32 0/1 for an MLP baseline."""
    p1 = practical_namespace(PRACTICAL, impl)
    if config.model == "bow-mlp":
        return lambda ids, mask: p1.multi_hot(ids, mask, vocab_size)
    if config.model == "bigram-mlp":
        return lambda ids, mask: p1.bag_of_bigrams(ids, mask, vocab_size, config.num_buckets)
    raise ValueError(f"{config.model!r} has no feature vector (it reads token ids)")


def document_frequencies(
    features: Callable[[jax.Array, jax.Array], jax.Array],
    ids: np.ndarray,
    mask: np.ndarray,
    batch_size: int = 256,
) -> np.ndarray:
    """Number of reviews in which each feature is present, ``(F,)`` int64, batch by batch."""
    count = jax.jit(lambda i, m: (features(i, m) != 0).sum(axis=0, dtype=jnp.int32))
    total = None
    for start in range(0, len(ids), batch_size):
        part = np.asarray(count(ids[start : start + batch_size], mask[start : start + batch_size]))
        total = part.astype(np.int64) if total is None else total + part
    if total is None:
        raise ValueError("no reviews to fit the TF-IDF weights on")
    return total


def idf_from_frequencies(doc_freq: np.ndarray, num_docs: int) -> np.ndarray:
    """``log((1 + N) / (1 + df)) + 1`` as float32: the formula of practical 1's ``fit_idf``."""
    return (np.log((1.0 + num_docs) / (1.0 + doc_freq)) + 1.0).astype(np.float32)


def fit_baseline_idf(
    config: BaselineConfig,
    vocab_size: int,
    ids: np.ndarray,
    mask: np.ndarray,
    impl: Impl = "solutions",
) -> np.ndarray:
    """IDF weights ``(F,)`` of the baseline's features, fitted on the given (training) reviews."""
    df = document_frequencies(featurizer(config, vocab_size, impl), ids, mask)
    return idf_from_frequencies(df, len(ids))


def make_forward(
    config: BaselineConfig,
    vocab_size: int,
    idf: np.ndarray | None = None,
    impl: Impl = "solutions",
) -> Forward:
    """The stateful forward ``(input_ids (B, S), mask (B, S), is_train=True) -> logits (B,)``.

    For ``use_tfidf`` pass the ``idf`` weights (fitted on training reviews only).
    """
    p1 = practical_namespace(PRACTICAL, impl)
    if config.model == "lstm":

        def lstm_forward(input_ids: jax.Array, mask: jax.Array, is_train: bool = True):
            ids, m = input_ids[:, : config.max_len], mask[:, : config.max_len]
            model = p1.LSTMClassifier(
                vocab_size, config.embed_size, config.hidden_size, config.p_dropout, name="lstm"
            )
            return model(ids, m, is_train)

        return lstm_forward

    features = featurizer(config, vocab_size, impl)
    if config.use_tfidf:
        if idf is None:
            raise ValueError("use_tfidf=True needs the idf weights: see fit_baseline_idf")
        expected = num_features(config, vocab_size)
        if np.shape(idf) != (expected,):
            raise ValueError(f"idf should have shape ({expected},), not {np.shape(idf)}")
        weights = jnp.asarray(idf, jnp.float32)

    def mlp_forward(input_ids: jax.Array, mask: jax.Array, is_train: bool = True):
        x = features(input_ids, mask)
        if config.use_tfidf:
            x = p1.tfidf(x, weights)
        if is_train and config.input_dropout > 0:
            x = hk.dropout(hk.next_rng_key(), config.input_dropout, x)
        return p1.MLPClassifier(config.hidden_sizes, config.p_dropout, name="mlp")(x, is_train)

    return mlp_forward
