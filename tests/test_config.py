"""Tests of m2l_nlp.config: presets, model sizes and training settings."""

from __future__ import annotations

import pytest

from m2l_nlp import config
from m2l_nlp.config import (
    PRESETS,
    BaselineConfig,
    ClassifierConfig,
    TrainSettings,
)
from m2l_nlp.overrides import override
from m2l_nlp.runs.experiment import resolve_val_size


def test_presets_are_valid_configs():
    for preset in PRESETS.values():
        preset.check()
        assert isinstance(preset.settings(), TrainSettings)
        model = preset.model_config()
        kind = ClassifierConfig if preset.architecture == config.TRANSFORMER else BaselineConfig
        assert isinstance(model, kind)
    seed = PRESETS["seed"]
    assert (seed.model["d_model"], seed.model["num_layers"], seed.model["num_heads"]) == (32, 2, 8)
    assert seed.seq_len == 600


def test_unigram_preset_is_the_default_recipe_before_bigram_tokens():
    default, unigram = PRESETS["default"], PRESETS["unigram"]
    assert default.bigram_tokens > 0 and unigram.bigram_tokens == 0
    # the recipe before bigram tokens, batches of 128 and token dropout
    before = dict(epochs=4, batch_size=32, learning_rate=2e-3, crop_len=256, ema_decay=0.998)
    before["token_dropout"] = 0.0
    assert {**default.train, **before} == unigram.train
    assert (unigram.model, unigram.vocab_size, unigram.seq_len) == (
        default.model,
        default.vocab_size,
        default.seq_len,
    )


def test_final_fit_trains_on_the_validation_reviews_only_when_reporting_test_accuracy():
    default, unigram = PRESETS["default"], PRESETS["unigram"]
    assert default.final_fit and not unigram.final_fit
    assert resolve_val_size(default, None, no_test=False, n_train=25000) == 0
    assert resolve_val_size(default, None, no_test=True, n_train=25000) == 2500
    assert resolve_val_size(default, 1000, no_test=False, n_train=25000) == 1000
    assert resolve_val_size(unigram, None, no_test=False, n_train=25000) == 2500
    assert resolve_val_size(unigram, None, no_test=False, n_train=1000) == 200
    with pytest.raises(ValueError, match="leaves nothing to train on"):
        resolve_val_size(default, 25000, no_test=False, n_train=25000)
    with pytest.raises(ValueError, match="needs a validation split"):
        resolve_val_size(default, 0, no_test=True, n_train=25000)


def test_baselines_are_presets_with_their_own_model_settings():
    assert set(config.BASELINES) <= set(PRESETS)
    bigram = PRESETS["bigram-mlp"]
    assert bigram.architecture == "bigram-mlp" and bigram.model_config().use_tfidf
    settings = bigram.settings()
    # Adam at a constant rate, no clipping, whole reviews: the practical-1 recipe
    assert (settings.weight_decay, settings.clip_norm, settings.final_lr_fraction) == (0, 0, 1)
    assert settings.crop_len == bigram.seq_len and settings.keep_best
    wider = override(bigram, ["model.hidden_sizes=[128, 32]", "train.epochs=5"])
    assert wider.model_config().hidden_sizes == (128, 32) and wider.settings().epochs == 5
    with pytest.raises(ValueError, match="unknown key 'model.d_model'"):
        override(bigram, ["model.d_model=64"])  # a transformer size, not a baseline's


def test_a_setting_reaches_the_optimizer():
    """--set train.learning_rate=... -> TrainSettings -> make_optimizer's schedule."""
    import jax.numpy as jnp

    from m2l_nlp.train.optim import make_optimizer

    preset = override(PRESETS["demo"], ["train.learning_rate=0.5", "train.warmup_fraction=0"])
    settings = preset.settings()
    assert settings.learning_rate == 0.5
    params = {"w": jnp.zeros(3)}  # a vector: no weight decay on it
    optimizer = make_optimizer(settings, total_steps=100)
    updates, _ = optimizer.update({"w": jnp.ones(3)}, optimizer.init(params), params)
    assert float(updates["w"][0]) == pytest.approx(-0.5, rel=1e-3)  # Adam's first step: -lr
