"""Practical 3's character language model, from the practical's file (or a notebook)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import haiku as hk
import jax
import numpy as np

from m2l_nlp.config import LanguageModelConfig
from m2l_nlp.impl import Impl, practical_namespace
from m2l_nlp.transform import ModelFuncs, funcs_from_stateful

PRACTICAL = "practical3_translation"


def language_model(config: LanguageModelConfig, impl: Impl = "solutions") -> tuple[ModelFuncs, Any]:
    """The model's functions (logits ``(B, S, V)`` of ids and mask ``(B, S)``) and the
    practical's namespace it came from (its ``sample_next``, ``PositionalEncoding``)."""
    practical = practical_namespace(PRACTICAL, impl)

    def forward(input_ids, mask, is_train=True):
        return practical.language_model_forward(input_ids, mask, is_train, config)

    return funcs_from_stateful(forward), practical


def cached_step(config: LanguageModelConfig, practical: Any) -> Callable:
    """``step(params, ids (B, S), caches, at)``: the practical's ``language_model_step``
    (logits ``(B, S, V)`` and the caches), transformed with the forward's parameter names."""

    def step(input_ids, caches, at):
        return practical.language_model_step(input_ids, caches, at, config)

    return hk.without_apply_rng(hk.transform(step)).apply


def init_params(funcs: ModelFuncs, seed: int, width: int) -> hk.Params:
    ids = np.ones((1, width), np.int32)
    return funcs.init_params(jax.random.PRNGKey(seed), ids, ids, True)
