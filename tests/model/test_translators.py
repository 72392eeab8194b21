"""Tests of m2l_nlp.model.translators: practical 3's translator (the reference's, a tiny model
on the CPU), its encoder and decoder, the check of its output and the memory beam search
plans with."""

from __future__ import annotations

import types

import jax
import numpy as np
import pytest

from m2l_nlp.config import PRESETS, TransformerConfig
from m2l_nlp.model import generation, translators
from m2l_nlp.model.classifiers import ModelOutputError

START = 1
# the sizes of tests/runs/test_translation.py's translator: one program for both in a session
CONFIG = TransformerConfig(
    vocab_size=1000, num_layers=1, num_heads=2, d_model=16, d_ff=32, p_dropout=0.0, max_len=12
)


@pytest.fixture(scope="module")
def model(moved_params):
    funcs, practical = translators.translator(CONFIG, "solutions", start_id=START)
    params = moved_params(translators.init_params(funcs, 0, CONFIG.max_len))
    return funcs, practical, params


def _pairs():
    """Two pairs: sources of 12 and 5 tokens, targets of 12 and 4 (ids 2 .. 12, 0 padding)."""
    rng = np.random.default_rng(1)
    width = np.arange(CONFIG.max_len)[None, :]
    source_mask = (width < np.array([[12], [5]])).astype(np.int32)
    target_mask = (width < np.array([[12], [4]])).astype(np.int32)
    source = rng.integers(2, 13, (2, CONFIG.max_len)).astype(np.int32) * source_mask
    target = rng.integers(2, 13, (2, CONFIG.max_len)).astype(np.int32) * target_mask
    return source, source_mask, target, target_mask


def _logits(funcs, params, *pairs):
    return np.asarray(funcs.predict_fw(params, *pairs))


def test_init_params_is_the_seeds(model):
    funcs, _, _ = model
    first, again, other = (translators.init_params(funcs, s, CONFIG.max_len) for s in (0, 0, 1))
    jax.tree_util.tree_map(np.testing.assert_array_equal, first, again)
    leaves = zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(other), strict=True)
    assert any(not np.array_equal(a, b) for a, b in leaves)
    assert all(name.startswith("transformer/") for name in first)


def test_the_translator_scores_each_target_token_from_the_ones_before_it(model):
    """Teacher forcing: position t reads the start token and targets 0 .. t-1, never target
    t itself; the source's padding is not read."""
    funcs, _, params = model
    source, source_mask, target, target_mask = _pairs()
    logits = _logits(funcs, params, source, source_mask, target, target_mask)
    assert logits.shape == (2, CONFIG.max_len, CONFIG.vocab_size) and np.isfinite(logits).all()
    np.testing.assert_array_equal(
        _logits(funcs, params, source, source_mask, target, target_mask), logits
    )
    later = target.copy()
    later[0, 3:] = later[0, 3:] % 11 + 2  # other tokens from position 3 on, in the full row
    changed = _logits(funcs, params, source, source_mask, later, target_mask)
    np.testing.assert_allclose(changed[0, :4], logits[0, :4], rtol=1e-5, atol=1e-5)
    assert not np.allclose(changed[0, 4:], logits[0, 4:])
    junk = source.copy()
    junk[1, 5:] = 7  # in the second source's padding
    padded = _logits(funcs, params, junk, source_mask, target, target_mask)
    np.testing.assert_allclose(padded[1], logits[1], rtol=1e-5, atol=1e-5)
    other_source = source.copy()
    other_source[0, 0] = other_source[0, 0] % 11 + 2
    assert not np.allclose(
        _logits(funcs, params, other_source, source_mask, target, target_mask)[0], logits[0]
    )


def test_the_encoder_and_decoder_give_the_forwards_logits(model):
    funcs, practical, params = model
    source, source_mask, target, target_mask = _pairs()
    want = _logits(funcs, params, source, source_mask, target, target_mask)
    memory = jax.jit(translators.encoder(CONFIG, practical))(params, source, source_mask)
    assert memory.shape == (2, CONFIG.max_len, CONFIG.d_model)
    inputs = np.asarray(practical.shift_right(target, START))
    input_mask = np.asarray(practical.shift_right(target_mask, 1))
    decode = jax.jit(translators.decoder(CONFIG, practical))
    context = (memory, source_mask)
    got = decode(params, inputs, input_mask, context)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    # with caches: the first pair's target read in two halves
    caches = generation.empty_caches(CONFIG, 1, practical.LayerCache)
    first, half = (memory[:1], source_mask[:1]), np.ones((1, 6), np.int32)
    head, caches = decode(params, inputs[:1, :6], half, first, caches, 0)
    tail, _ = decode(params, inputs[:1, 6:], half, first, caches, 6)
    got = np.concatenate([np.asarray(head), np.asarray(tail)], axis=1)
    np.testing.assert_allclose(got, want[:1], rtol=1e-4, atol=1e-4)


def test_check_output_wants_a_float_logit_per_token_of_the_vocabulary():
    translators.check_output(np.zeros((2, 8, 16), np.float32), 2, 8, 16, "solutions")
    traced = jax.ShapeDtypeStruct((2, 8, 16), np.float32)
    translators.check_output(traced, 2, 8, 16, "solutions")  # a shape is enough
    with pytest.raises(ModelOutputError, match=r"float32 of shape \(2, 8\) .* \(2, 8, 16\)"):
        translators.check_output(np.zeros((2, 8), np.float32), 2, 8, 16, "exercises")
    with pytest.raises(ModelOutputError, match="int32 of shape"):
        translators.check_output(np.zeros((2, 8, 16), np.int32), 2, 8, 16, "exercises")
    with pytest.raises(ModelOutputError, match="your notebook's cells.*NaN or infinite"):
        translators.check_output(np.full((2, 8, 16), np.nan, np.float32), 2, 8, 16, {})


def test_check_builds_traces_the_preset_and_names_an_unfinished_exercise():
    translators.check_builds(PRESETS["translate"], "solutions")
    with pytest.raises(NotImplementedError, match="not implemented yet"):
        translators.check_builds(PRESETS["translate"], "exercises")


def test_free_memory_and_program_bytes_are_numbers_or_unknown():
    free = translators.free_memory()
    assert free is None or free > 0
    compiled = jax.jit(lambda x: x * 2.0).lower(np.ones((256,), np.float32)).compile()
    used = translators.program_bytes(compiled)
    assert used is None or used >= 2 * 256 * 4  # its argument and its output at least
    assert translators.program_bytes(object()) is None  # no memory_analysis: unknown
    plan = types.SimpleNamespace(
        argument_size_in_bytes=100,
        output_size_in_bytes=50,
        temp_size_in_bytes=30,
        alias_size_in_bytes=20,
    )
    planned = types.SimpleNamespace(memory_analysis=lambda: plan)
    assert translators.program_bytes(planned) == 160
    assert translators.program_bytes(types.SimpleNamespace(memory_analysis=lambda: None)) is None


def test_a_batch_is_split_until_its_beams_fit_and_refused_when_one_sentence_does_not():
    assert translators.fit_beams(need=800, rows=8, beam=4, free=1000, share=1) == 8
    assert translators.fit_beams(need=800, rows=8, beam=4, free=350, share=1) == 2  # 2**k
    with pytest.raises(translators.BeamTooWide, match="use --beam 3 or fewer"):
        translators.fit_beams(need=800, rows=8, beam=4, free=75, share=1)
    with pytest.raises(translators.BeamTooWide, match=r"translate greedily \(no --beam\)"):
        translators.fit_beams(need=800, rows=8, beam=4, free=10, share=1)
