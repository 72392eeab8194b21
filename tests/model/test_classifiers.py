"""Tests of m2l_nlp.model: building the classifier and initialising its parameters."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from m2l_nlp.model import classifiers as models


def test_init_params_scales_only_the_embeddings(tiny_model, tiny_config):
    key, max_len = jax.random.PRNGKey(0), tiny_config.max_len
    base = models.init_params(tiny_model, key, max_len)
    small = models.init_params(tiny_model, key, max_len, embed_scale=0.1)
    for module, leaves in base.items():
        for name, value in leaves.items():
            factor = 0.1 if name == "embeddings" else 1.0
            np.testing.assert_allclose(small[module][name], value * factor, rtol=1e-6)


BASE, PAIRS = 40, 10  # the tiny vocabulary of 50: 40 tokenizer ids, then 10 pair tokens
FIRST = np.array([5, 5, 7, 9, 11, 13, 20, 21, 30, 39], np.int32)  # each pair's first token


def _stored(tiny_model, tiny_config, seed=0):
    """Stored rows of the tiny classifier with pair tokens: random (nonzero) residuals."""
    params = models.init_params(tiny_model, seed, tiny_config.max_len, zero_rows=PAIRS)
    table = params["classifier/~/embedding/~/embed"]["embeddings"]
    residuals = jax.random.normal(jax.random.PRNGKey(seed + 1), table[BASE:].shape)
    params["classifier/~/embedding/~/embed"]["embeddings"] = table.at[BASE:].set(residuals)
    return params


def test_init_params_zeroes_only_the_last_rows(tiny_model, tiny_config):
    key, max_len = jax.random.PRNGKey(0), tiny_config.max_len
    plain = models.init_params(tiny_model, key, max_len, embed_scale=0.1)
    zeroed = models.init_params(tiny_model, key, max_len, embed_scale=0.1, zero_rows=PAIRS)
    for module, leaves in plain.items():
        for name, value in leaves.items():
            want = np.asarray(value)
            if name == "embeddings":
                assert np.abs(want[BASE:]).max() > 0
                want = want.copy()
                want[BASE:] = 0.0
            np.testing.assert_array_equal(zeroed[module][name], want)


def test_pair_tie_reads_a_pair_as_its_residual_plus_its_first_token(tiny_model, tiny_config):
    stored = _stored(tiny_model, tiny_config)
    tie = models.pair_tie(FIRST, tiny_config.vocab_size)
    ids = np.array([[1, 41, 7, 49, 3, 40, 45, 0], [42, 2, 48, 39, 40, 4, 0, 0]], np.int32)
    mask = (np.arange(8)[None, :] < np.array([[7], [6]])).astype(np.int32)
    table = stored["classifier/~/embedding/~/embed"]["embeddings"]
    want = np.asarray(table).copy()
    want[BASE:] += want[FIRST]
    tied = tie(stored)
    np.testing.assert_allclose(tied["classifier/~/embedding/~/embed"]["embeddings"], want)
    on_host = tie(jax.device_get(stored))  # NumPy in, NumPy out: nothing compiled
    assert isinstance(on_host["classifier/~/embedding/~/embed"]["embeddings"], np.ndarray)
    np.testing.assert_allclose(on_host["classifier/~/embedding/~/embed"]["embeddings"], want)
    for module, leaves in stored.items():  # nothing else changes
        for name, value in leaves.items():
            if name != "embeddings":
                np.testing.assert_array_equal(tied[module][name], value)
    # without the tie the same parameters give another model
    assert not np.allclose(
        tiny_model.predict_fw(tied, ids, mask), tiny_model.predict_fw(stored, ids, mask)
    )
    # a pair whose residual is zero is read exactly as its first token
    zeroed = jax.tree_util.tree_map(lambda x: x, stored)
    zeroed["classifier/~/embedding/~/embed"]["embeddings"] = table.at[BASE:].set(0.0)
    as_first = np.where(ids >= BASE, FIRST[np.clip(ids - BASE, 0, PAIRS - 1)], ids)
    np.testing.assert_allclose(
        tiny_model.predict_fw(tie(zeroed), ids, mask),
        tiny_model.predict_fw(zeroed, as_first, mask),
        rtol=1e-5,
    )


@pytest.mark.slow  # over 3 s here
def test_through_the_tie_a_pair_trains_its_first_tokens_row(tiny_model, tiny_config):
    stored = _stored(tiny_model, tiny_config)
    tie = models.pair_tie(FIRST, tiny_config.vocab_size)
    ids = np.array([[1, 2, 42, 3]], np.int32)  # pair 2, first token 7; token 7 itself absent
    mask = np.ones_like(ids)

    def row_grad(read):
        def loss(p):
            return tiny_model.model_fw.apply(read(p), ids, mask).sum()

        grads = jax.grad(loss)(stored)["classifier/~/embedding/~/embed"]["embeddings"]
        return np.abs(np.asarray(grads)).sum(axis=1)

    with_tie, without = row_grad(tie), row_grad(lambda p: p)
    assert with_tie[7] > 0 and without[7] == 0
    assert with_tie[42] > 0 and without[42] > 0
    assert with_tie[8] == 0  # a token that is neither read nor backed off to


def test_backoff_must_name_tokenizer_ids(tiny_config):
    for bad in (np.array([48, 1]), np.array([-1]), np.zeros((2, 2), np.int32)):
        with pytest.raises(ValueError, match="backoff must list"):
            models.pair_tie(bad, tiny_config.vocab_size)


def test_a_model_output_of_a_wrong_shape_dtype_or_value_is_refused_in_words():
    from m2l_nlp.config import PRESETS
    from m2l_nlp.model.classifiers import ModelOutputError, check_output

    preset, lstm = PRESETS["demo"], PRESETS["lstm"]
    check_output(preset, np.zeros(4, np.float32), 4, "exercises")  # one logit per review
    with pytest.raises(ModelOutputError, match=r"shape \(4, 1\).*shape \(4,\).*-m classifier"):
        check_output(preset, np.zeros((4, 1), np.float32), 4, "exercises")
    with pytest.raises(ModelOutputError, match="int32"):
        check_output(preset, np.zeros(4, np.int32), 4, "exercises")
    with pytest.raises(ModelOutputError, match=r"NaN.*-m lstm_classifier"):
        check_output(lstm, np.array([0.0, np.nan, 1.0, 2.0], np.float32), 4, "exercises")


@pytest.mark.parametrize(
    ("model", "name", "exercise"),
    [
        ("bow-mlp", "MLPClassifier", "mlp_classifier"),
        ("bigram-mlp", "MLPClassifier", "mlp_classifier"),
        ("lstm", "LSTMClassifier", "lstm_classifier"),
    ],
)
def test_a_baseline_with_the_wrong_output_shape_is_refused_before_training(model, name, exercise):
    """What `m2l-nlp train --model ... --impl exercises` checks before the data load: a
    practical-1 classifier giving (B, 1) is named, with its exercise, in one line."""
    from m2l_nlp.config import PRESETS
    from m2l_nlp.impl import load_practical
    from m2l_nlp.model.classifiers import ModelOutputError, check_model_builds

    names = dict(vars(load_practical("practical1_baselines", "solutions")))

    class OneColumn(names[name]):
        def __call__(self, *args, **kwargs):
            return super().__call__(*args, **kwargs)[:, None]

    names[name] = OneColumn
    said = rf"\(your notebook's cells\) .* shape \(2, 1\) .* shape \(2,\).*-m {exercise}"
    with pytest.raises(ModelOutputError, match=said):
        check_model_builds(PRESETS[model], names)


def test_a_presets_first_parameters_and_with_pair_tokens_their_tie():
    """``init_for_preset``: the preset's model for the data's vocabulary, its embeddings
    scaled as the preset says; with pair tokens that back off, the pairs' rows start at zero
    and the tie reads each pair as its first token (no table: said in words)."""
    import dataclasses
    import types

    from m2l_nlp.config import PRESETS

    small = dict(num_layers=1, num_heads=2, d_model=8, d_ff=16, p_dropout=0.0, pooling="mean")
    preset = dataclasses.replace(PRESETS["demo"], seq_len=16, model=small, embed_scale=0.1)
    funcs, config, params, tie = models.init_for_preset(
        preset, types.SimpleNamespace(vocab_size=50), 0
    )
    table = np.asarray(params["classifier/~/embedding/~/embed"]["embeddings"])
    assert tie is None and config.vocab_size == 50 and table.shape == (50, 8)
    unscaled = models.init_params(funcs, 0, preset.seq_len)
    np.testing.assert_allclose(
        table, 0.1 * np.asarray(unscaled["classifier/~/embedding/~/embed"]["embeddings"]), rtol=1e-6
    )

    backoff = dataclasses.replace(preset, bigram_backoff=True, bigram_tokens=PAIRS)
    with pytest.raises(ValueError, match="needs the data's bigram table"):
        models.init_for_preset(backoff, types.SimpleNamespace(vocab_size=50), 0)
    pairs = np.stack([FIRST, FIRST + 1], axis=1)  # (PAIRS, 2): each pair's two tokens
    data = types.SimpleNamespace(vocab_size=50, bigram_table=pairs)
    _, _, stored, tie = models.init_for_preset(backoff, data, 0)
    rows = np.asarray(stored["classifier/~/embedding/~/embed"]["embeddings"])
    assert np.abs(rows[:BASE]).max() > 0 and not rows[BASE:].any()
    tied = np.asarray(tie(stored)["classifier/~/embedding/~/embed"]["embeddings"])
    np.testing.assert_array_equal(tied[BASE:], rows[FIRST])
