"""Tests of m2l_nlp.overrides: the one ``KEY=VALUE`` syntax of ``m2l-nlp train --set``."""

from __future__ import annotations

import pytest

from m2l_nlp.config import PRESETS, ReverseConfig
from m2l_nlp.overrides import override


def test_override_preset_changes_only_what_is_named():
    default = PRESETS["default"]
    changed = override(default, ["bigram_tokens=100000", "train.crop_len=512", "model.pooling=max"])
    assert changed.bigram_tokens == 100000 and default.bigram_tokens == 50000
    assert changed.train == {**default.train, "crop_len": 512}
    assert changed.model == {**default.model, "pooling": "max"}
    assert override(default, []) == default
    for bad, message in [
        ("train.crop_lenn=512", "unknown key 'train.crop_lenn'"),
        ("model.vocab_size=5", "unknown key 'model.vocab_size'"),  # set by the data
        ("description=x", "unknown key 'description'"),
        ("crop_len", "expected KEY=VALUE"),
    ]:
        with pytest.raises(ValueError, match=message):
            override(default, [bad])


def test_the_same_override_syntax_sets_the_reverse_task():
    changed = override(ReverseConfig(), ["steps=200", "learning_rate=1e-2"])
    assert (changed.steps, changed.learning_rate) == (200, 1e-2)
    settings = changed.settings()
    assert settings.learning_rate == 1e-2 and settings.epochs == changed.epochs
    with pytest.raises(ValueError, match="unknown key 'model.d_model'"):
        override(ReverseConfig(), ["model.d_model=3"])
    with pytest.raises(ValueError, match="whole number"):
        override(ReverseConfig(), ["steps=ten"])
