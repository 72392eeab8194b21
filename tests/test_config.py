"""Tests of m2l_nlp.config: presets, model sizes and training settings."""

from __future__ import annotations

import pytest

from m2l_nlp import config
from m2l_nlp.config import (
    PRESETS,
    BaselineConfig,
    ClassifierConfig,
    TrainSettings,
    TransformerConfig,
)
from m2l_nlp.overrides import override


def test_presets_are_valid_configs():
    for preset in PRESETS.values():
        preset.check()
        assert isinstance(preset.settings(), TrainSettings)
        model = preset.model_config()
        kind = {
            config.TRANSFORMER: ClassifierConfig,
            config.LANGUAGE_MODEL: TransformerConfig,
            config.TRANSLATION: config.TransformerConfig,
        }
        assert isinstance(model, kind.get(preset.architecture, BaselineConfig))


def test_unigram_preset_is_the_default_recipe_before_bigram_tokens():
    default, unigram = PRESETS["default"], PRESETS["unigram"]
    assert default.bigram_tokens > 0 and unigram.bigram_tokens == 0
    assert unigram.settings().token_dropout == 0  # nothing of the bigram recipe's regularising
    assert (unigram.model, unigram.vocab_size, unigram.seq_len) == (
        default.model,
        default.vocab_size,
        default.seq_len,
    )


def test_baselines_are_presets_with_their_own_model_settings():
    assert set(config.BASELINES) <= set(PRESETS)
    bigram = PRESETS["bigram-mlp"]
    assert bigram.architecture == "bigram-mlp" and bigram.model_config().use_tfidf
    settings = bigram.settings()
    assert settings.crop_len == bigram.seq_len and settings.keep_best  # whole reviews
    _assert_plain_adam(settings)
    wider = override(bigram, ["model.hidden_sizes=[128, 32]", "train.epochs=5"])
    assert wider.model_config().hidden_sizes == (128, 32) and wider.settings().epochs == 5
    with pytest.raises(ValueError, match="unknown key 'model.d_model'"):
        override(bigram, ["model.d_model=64"])  # a transformer size, not a baseline's


def _assert_plain_adam(settings: TrainSettings) -> None:
    """Practical 1's optimizer: Adam at a constant rate and no weight decay."""
    import jax.numpy as jnp

    from m2l_nlp.train.optim import make_optimizer

    optimizer = make_optimizer(settings, total_steps=10)
    params = {"w": jnp.ones((2, 2))}  # a matrix: AdamW would decay it
    state = optimizer.init(params)
    huge = {"w": jnp.full((2, 2), 1e6)}
    steps = []
    for _ in range(10):
        updates, state = optimizer.update(huge, state, params)
        steps.append(float(updates["w"][0, 0]))
    # Adam moves by the rate per step on a constant gradient; a schedule or decay changes it
    assert steps == pytest.approx([-settings.learning_rate] * 10, rel=1e-4)
    zero, _ = optimizer.update({"w": jnp.zeros((2, 2))}, optimizer.init(params), params)
    assert float(abs(zero["w"]).max()) == 0.0  # no weight decay


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


@pytest.mark.parametrize(
    "model_config",
    [ClassifierConfig(d_model=16, num_heads=2), BaselineConfig(model="lstm", hidden_sizes=(8,))],
)
def test_a_model_config_survives_its_trip_through_a_checkpoints_json(model_config):
    import json

    saved = json.loads(json.dumps(model_config.to_dict()))
    assert type(model_config).from_dict(saved) == model_config


def test_a_classifier_config_refuses_settings_it_does_not_know():
    with pytest.raises(ValueError, match="unknown model settings \\['d_modle'\\]"):
        ClassifierConfig.from_dict({"d_modle": 16})


def test_the_validation_split_is_at_most_a_fifth_of_the_training_split():
    preset = PRESETS["default"]
    assert preset.val_size_for(1_000) == 200
    assert preset.val_size_for(10 * preset.val_size) == preset.val_size


def test_the_reverse_task_trains_with_its_own_sizes_and_no_decay():
    settings = config.ReverseConfig(batch_size=64, steps=100, learning_rate=1e-3).settings()
    assert (settings.batch_size, settings.learning_rate, settings.weight_decay) == (64, 1e-3, 0.0)
    assert settings.warmup_fraction == 21 / 100  # a fifth of the steps and one, at most 50
