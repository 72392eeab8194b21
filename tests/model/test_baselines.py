"""Tests of m2l_nlp.model.baselines: practical 1's baselines as classifiers of token ids,
their features and their TF-IDF weights fitted batch by batch."""

from __future__ import annotations

import numpy as np
import pytest

from m2l_nlp.impl import load_practical

PRACTICAL = "practical1_baselines"


@pytest.mark.parametrize("model", ["bow-mlp", "bigram-mlp", "lstm"])
def test_baseline_forward_shapes_and_padding(model):
    import jax

    from m2l_nlp.config import BaselineConfig
    from m2l_nlp.model.baselines import make_forward
    from m2l_nlp.transform import funcs_from_stateful

    config = BaselineConfig(model=model, num_buckets=64, hidden_sizes=(8,), hidden_size=8)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, 50, size=(3, 12)).astype(np.int32)
    mask = (np.arange(12)[None, :] < np.array([[12], [7], [3]])).astype(np.int32)
    ids = ids * mask
    funcs = funcs_from_stateful(make_forward(config, vocab_size=50))
    params = funcs.init_params(jax.random.PRNGKey(0), ids, mask, True)
    logits = funcs.predict_fw(params, ids, mask)
    assert logits.shape == (3,)
    # More padding (with junk ids) does not change the logits.
    longer_ids = np.concatenate([ids, rng.integers(1, 50, size=(3, 5))], 1).astype(np.int32)
    longer_mask = np.concatenate([mask, np.zeros((3, 5), np.int32)], 1)
    np.testing.assert_allclose(funcs.predict_fw(params, longer_ids, longer_mask), logits, atol=1e-5)


def test_tfidf_forward_needs_idf_of_the_right_size():
    from m2l_nlp.config import BaselineConfig
    from m2l_nlp.model.baselines import make_forward

    config = BaselineConfig(model="bigram-mlp", num_buckets=64, use_tfidf=True)
    with pytest.raises(ValueError, match="idf"):
        make_forward(config, vocab_size=50)
    with pytest.raises(ValueError, match=r"\(114,\)"):
        make_forward(config, vocab_size=50, idf=np.ones(50, np.float32))


def test_batched_idf_equals_fit_idf():
    """The chunked document frequencies give the exercise's fit_idf on the dense matrix."""
    from m2l_nlp.config import BaselineConfig
    from m2l_nlp.model import baselines
    from m2l_nlp.model.baselines import featurizer, fit_baseline_idf

    config = BaselineConfig(model="bigram-mlp", num_buckets=32, use_tfidf=True)
    rng = np.random.default_rng(1)
    ids = rng.integers(1, 40, size=(37, 10)).astype(np.int32)
    mask = (np.arange(10)[None, :] < rng.integers(1, 11, size=(37, 1))).astype(np.int32)
    ref = load_practical(PRACTICAL, "solutions")
    dense = np.asarray(featurizer(config, 40)(ids, mask))
    # A batch of 8 (not the default 256 > 37 reviews) so that the chunking is exercised.
    df = baselines.document_frequencies(featurizer(config, 40), ids, mask, batch_size=8)
    np.testing.assert_array_equal(df, (dense != 0).sum(0))
    np.testing.assert_allclose(
        baselines.idf_from_frequencies(df, len(ids)), ref.fit_idf(dense), rtol=1e-6
    )
    np.testing.assert_allclose(fit_baseline_idf(config, 40, ids, mask), ref.fit_idf(dense))


def test_baselines_read_a_notebooks_own_definitions():
    """``impl=globals()`` (a mapping) trains what the notebook's cells defined, not a file."""
    from m2l_nlp.config import BaselineConfig
    from m2l_nlp.model.baselines import featurizer

    ref = load_practical(PRACTICAL, "solutions")
    calls = []

    def multi_hot(ids, mask, vocab_size):
        calls.append(vocab_size)
        return ref.multi_hot(ids, mask, vocab_size)

    ids, mask = np.array([[3, 1, 0]], np.int32), np.array([[1, 1, 0]], np.int32)
    features = featurizer(BaselineConfig(model="bow-mlp"), 8, impl={"multi_hot": multi_hot})
    np.testing.assert_array_equal(features(ids, mask), ref.multi_hot(ids, mask, 8))
    assert calls == [8]
    bigrams = featurizer(BaselineConfig(model="bigram-mlp"), 8, impl={"multi_hot": multi_hot})
    with pytest.raises(AttributeError, match="`bag_of_bigrams` is not defined in the notebook"):
        bigrams(ids, mask)
