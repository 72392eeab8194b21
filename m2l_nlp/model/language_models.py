"""Practical 3's character language model, from the practical's file (or a notebook)."""

from __future__ import annotations

from typing import Any

import haiku as hk
import jax
import numpy as np

from m2l_nlp.config import TransformerConfig
from m2l_nlp.impl import Impl, practical_namespace
from m2l_nlp.model import generation
from m2l_nlp.transform import ModelFuncs, funcs_from_stateful, pure_apply

PRACTICAL = "practical3_translation"


def language_model(config: TransformerConfig, impl: Impl = "solutions") -> tuple[ModelFuncs, Any]:
    """The model's functions (logits ``(B, S, V)`` of ids and mask ``(B, S)``) and the
    practical's namespace it came from (its ``sample_next``, ``PositionalEncoding``)."""
    practical = practical_namespace(PRACTICAL, impl)

    def forward(input_ids, mask, is_train=True):
        return practical.CharLanguageModel(config, name="char_lm")(input_ids, mask, is_train)

    return funcs_from_stateful(forward), practical


def decoder(config: TransformerConfig, practical: Any) -> generation.Decode:
    """``decode(params, ids, mask, (), caches=None, at=0)``: the practical's
    ``CharLanguageModel`` in evaluation mode (:data:`generation.Decode`), with the forward's
    parameter names."""

    def decode(input_ids, mask, context, caches=None, at=0):
        model = practical.CharLanguageModel(config, name="char_lm")
        if caches is None:  # as the forward calls it: a model without a cache still reads
            return model(input_ids, mask, False)
        return model(input_ids, mask, False, caches=caches, at=at)

    return pure_apply(decode)


def init_params(funcs: ModelFuncs, seed: int, width: int) -> hk.Params:
    ids = np.ones((1, width), np.int32)
    return funcs.init_params(jax.random.PRNGKey(seed), ids, ids, True)
