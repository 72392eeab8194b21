"""Tests of m2l_nlp.model.language_models: practical 3's character language model, its
parameters and its decoder (the reference's, a tiny model on the CPU)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from m2l_nlp.config import TransformerConfig
from m2l_nlp.model import generation
from m2l_nlp.model.language_models import decoder, init_params, language_model

# the sizes of tests/train/test_loop.py's language model: one program for both in a session
CONFIG = TransformerConfig(
    vocab_size=12, num_layers=1, num_heads=2, d_model=8, d_ff=16, p_dropout=0.0, max_len=8
)


@pytest.fixture(scope="module")
def lm(moved_params):
    funcs, practical = language_model(CONFIG, "solutions")
    params = moved_params(init_params(funcs, 0, CONFIG.max_len))
    return funcs, practical, params


def _batch():
    rng = np.random.default_rng(1)
    mask = (np.arange(CONFIG.max_len)[None, :] < np.array([[8], [5]])).astype(np.int32)
    return rng.integers(2, CONFIG.vocab_size, (2, CONFIG.max_len)).astype(np.int32) * mask, mask


def test_init_params_is_the_seeds(lm):
    funcs, _, _ = lm
    first, again, other = (init_params(funcs, seed, CONFIG.max_len) for seed in (0, 0, 1))
    jax.tree_util.tree_map(np.testing.assert_array_equal, first, again)
    leaves = zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(other), strict=True)
    assert any(not np.array_equal(a, b) for a, b in leaves)
    assert all(name.startswith("char_lm/") for name in first)


def test_the_model_scores_every_position_from_the_characters_before_it(lm):
    funcs, practical, params = lm
    ids, mask = _batch()
    logits = np.asarray(funcs.predict_fw(params, ids, mask))
    assert logits.shape == (2, CONFIG.max_len, CONFIG.vocab_size)
    assert np.isfinite(logits).all()
    np.testing.assert_array_equal(funcs.predict_fw(params, ids, mask), logits)  # eval: same
    assert callable(practical.sample_next) and hasattr(practical, "LayerCache")
    later = ids.copy()
    later[:, 5:] = (later[:, 5:] % (CONFIG.vocab_size - 2)) + 2  # other characters from 5 on
    changed = np.asarray(funcs.predict_fw(params, later, np.ones_like(mask)))
    full = np.asarray(funcs.predict_fw(params, ids, np.ones_like(mask)))
    np.testing.assert_allclose(changed[:, :5], full[:, :5], rtol=1e-5, atol=1e-5)
    assert not np.allclose(changed[:, 5:], full[:, 5:])


def test_the_decoder_gives_the_forwards_logits_with_a_cache_and_without(lm):
    funcs, practical, params = lm
    ids, mask = _batch()
    want = np.asarray(funcs.predict_fw(params, ids, mask))
    decode = jax.jit(decoder(CONFIG, practical))
    np.testing.assert_allclose(decode(params, ids, mask, ()), want, rtol=1e-5, atol=1e-5)
    caches = generation.empty_caches(CONFIG, 1, practical.LayerCache)
    row = ids[:1, :6]  # the first row, all real: read in two parts through the cache
    part = np.ones((1, 3), np.int32)
    head, caches = decode(params, row[:, :3], part, (), caches, 0)
    tail, _ = decode(params, row[:, 3:], part, (), caches, 3)
    got = np.concatenate([np.asarray(head), np.asarray(tail)], axis=1)
    np.testing.assert_allclose(got, want[:1, :6], rtol=1e-4, atol=1e-4)
