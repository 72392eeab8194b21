"""Tests of m2l_nlp.model.generation: the key/value cache gives the model's own numbers."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from m2l_nlp.config import TransformerConfig
from m2l_nlp.data.tokenization import BOS_ID, EOS_ID
from m2l_nlp.impl import load_practical
from m2l_nlp.model import generation
from m2l_nlp.model.language_models import decoder, language_model

CONFIG = TransformerConfig(
    vocab_size=17, num_layers=2, num_heads=2, d_model=16, d_ff=32, p_dropout=0.1, max_len=24
)


@pytest.fixture(scope="module")
def lm():
    funcs, p3 = language_model(CONFIG)
    ids = np.ones((1, 4), np.int32)
    params = funcs.init_params(jax.random.PRNGKey(0), ids, ids, True)
    rng = np.random.default_rng(0)  # away from the initial LayerNorms and zero biases
    params = jax.tree_util.tree_map(lambda p: p + 0.3 * rng.standard_normal(p.shape), params)
    return p3, funcs, params, decoder(CONFIG, p3)


def test_the_cache_and_recomputing_give_the_same_logits_and_text(lm):
    """At every step both paths score the next character alike (float tolerance), and with
    one key they write the same characters."""
    p3, funcs, params, decode = lm
    prompt = np.array([[3, 5, 7, 2, 9], [4, 4, 1, 8, 6]], np.int32)
    key = jax.random.PRNGKey(3)
    knobs = dict(new_chars=12, sample=p3.sample_next, temperature=0.8, top_k=None)
    caches = generation.start(CONFIG, 2, (), p3.LayerCache)
    step = generation.cached(decode)
    cached = generation.generate(params, caches, prompt, key, step=step, **knobs)
    ids = generation.start(CONFIG, 2, (), None)
    step = generation.recomputing(decode)
    plain = generation.generate(params, ids, prompt, key, step=step, **knobs)
    np.testing.assert_allclose(cached.logits, plain.logits, rtol=1e-4, atol=1e-4)
    np.testing.assert_array_equal(cached.ids, plain.ids)
    assert cached.ids.shape == (2, 12) and len(set(np.asarray(cached.ids).ravel())) > 2


def test_a_cache_that_is_not_the_model_is_refused(lm):
    p3, funcs, params, decode = lm
    prompt = np.array([[3, 5, 7]], np.int32)
    want = np.asarray(funcs.model_fw.apply(params, prompt, np.ones_like(prompt)))
    caches = generation.start(CONFIG, 1, (), p3.LayerCache)
    step = generation.cached(decode)
    generation.check_cache(params, step, caches, prompt, want)  # the same

    def one_off(params, ids, at, caches):  # e.g. keys written one position late
        logits, caches = step(params, ids, at, caches)
        return logits + (at > 0), caches

    with pytest.raises(ValueError, match="attention_cache"):
        generation.check_cache(params, one_off, caches, prompt, want)
    with pytest.raises(ValueError, match="should return the logits and the new caches"):
        generation.check_cache(params, lambda *args: step(*args)[0], caches, prompt, want)


def test_generation_never_runs_past_the_window():
    generation.check_window(4, 20, 24)
    with pytest.raises(generation.WindowError, match="at most 20 new ones"):
        generation.check_window(4, 21, 24)
    for prompt in (24, 30):  # no room left: a number that works, never "at most 0"
        with pytest.raises(generation.WindowError, match="shorten the prompt") as err:
            generation.check_window(prompt, 1, 24)
        assert "to at most 23 characters" in str(err.value) and "at most 0" not in str(err.value)
    with pytest.raises(generation.WindowError, match="empty"):
        generation.check_window(0, 1, 24)


def test_text_stops_at_the_stop_character():
    assert generation.stop_at(np.array([5, 6, 2, 7, 2]), 2).tolist() == [5, 6]
    assert generation.stop_at(np.array([5, 6]), 2).tolist() == [5, 6]


def test_decoding_goes_on_without_a_cache_that_fails_its_check_and_says_why(capsys):
    def unfinished():
        raise NotImplementedError("attend_with_cache: not implemented yet")

    assert generation.use_cache(lambda: None, "generating") is True
    assert generation.use_cache(unfinished, "generating") is False
    said = capsys.readouterr().err
    assert said.strip() == (
        "note: attend_with_cache: not implemented yet; generating without it (slower)"
    )


def test_beam_search_of_one_beam_is_greedy_and_more_beams_find_likelier_text():
    """A stand-in model whose likeliest first token leads nowhere good: greedy takes it,
    two beams find the likelier whole sentence."""
    vocab, end = 5, EOS_ID
    table = np.full((vocab, vocab), -9.0, np.float32)  # log-probabilities of next | token
    table[BOS_ID, 3], table[BOS_ID, 4] = np.log(0.55), np.log(0.45)
    table[3, :] = np.log(0.2)  # after 3: anything, nothing likely
    table[4, end] = np.log(0.95)
    table[end, 0] = 0.0

    def step(tokens, at, state):
        return jnp.asarray(table)[tokens], state

    start = jnp.full((1,), BOS_ID, jnp.int32)
    greedy = load_practical("practical3_translation", "solutions").greedy_decode(
        step, (), start, 4, end
    )
    one = generation.beam_search(step, (), start, 4, end, width=1, length_penalty=0.0)
    two = generation.beam_search(step, (), start, 4, end, width=2, length_penalty=0.0)
    assert np.asarray(one).tolist() == np.asarray(greedy).tolist()
    assert np.asarray(greedy)[0, 0] == 3
    assert np.asarray(two)[0].tolist() == [4, end, 0, 0]
