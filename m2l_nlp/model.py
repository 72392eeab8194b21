"""The course's models as pure functions, every one built by ``funcs_from_stateful``.

- :func:`classifier`: practical 2's transformer classifier (``classifier_forward`` of the
  solutions, the student's exercises, or a notebook's own cells).
- :func:`baseline`: a practical-1 baseline (:mod:`m2l_nlp.baselines` writes its forward).
- :func:`for_preset`: whichever of the two a :class:`~m2l_nlp.config.Preset` names.

Each returns :class:`~m2l_nlp.transform.ModelFuncs`: ``model.apply(params, key, ids, mask,
is_train)`` for training, ``predict_fw(params, ids, mask)`` for evaluation, and so on.
:func:`init_params` creates the parameters (:func:`init_for_preset`: a preset's model and
its parameters at once); :func:`tie_pairs` turns those of a classifier
trained with pair tokens that back off to their first token (``backoff=``) into the plain
classifier's.
"""

from __future__ import annotations

import functools
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp import baselines
from m2l_nlp.config import TRANSFORMER, BaselineConfig, ClassifierConfig, Preset
from m2l_nlp.impl import Impl, practical_namespace
from m2l_nlp.transform import ModelFuncs, funcs_from_stateful

PRACTICAL = "practical2_transformers"


def classifier(
    config: ClassifierConfig,
    impl: Impl = "solutions",
    jit: bool = True,
    backoff: np.ndarray | None = None,
) -> ModelFuncs:
    """Practical 2's classifier: ``(input_ids (B, S), mask (B, S), is_train) -> logits (B,)``.

    ``impl="exercises"`` (or a notebook's ``globals()``) uses the student's own modules.

    ``backoff`` (int ``(K,)``, the first token of each of the ``K`` pair tokens, which are the
    last ``K`` ids) makes the stored embedding table hold one *residual* row per pair: the
    model reads pair ``k`` as its residual plus the row of its first token, so what is
    learnt about "great" also reaches "great acting". The students' modules are unchanged;
    a haiku custom getter ties the table they fetch (:func:`tie_pairs` does it once, for the
    plain classifier).
    """
    practical = practical_namespace(PRACTICAL, impl)
    first = None if backoff is None else _first_tokens(backoff, config.vocab_size)

    def tie(next_getter, value, context):
        if context.name == "embeddings" and value.shape[0] == config.vocab_size:
            value = _tied_table(value, first)
        return next_getter(value)

    def forward(input_ids: jax.Array, mask: jax.Array, is_train: bool = True) -> jax.Array:
        if first is None:
            return practical.classifier_forward(input_ids, mask, is_train, config=config)
        with hk.custom_getter(tie):
            return practical.classifier_forward(input_ids, mask, is_train, config=config)

    return funcs_from_stateful(forward, jit=jit)


def _first_tokens(backoff: np.ndarray, vocab_size: int) -> np.ndarray:
    """``backoff`` checked: int32 ``(K,)`` ids of the tokenizer's ``vocab_size - K`` tokens."""
    first = np.asarray(backoff)
    base = vocab_size - len(first)
    if first.ndim != 1 or base < 1 or (first.size and (first.min() < 0 or first.max() >= base)):
        raise ValueError(
            f"backoff must list, for each of the last K of the {vocab_size} ids, a token id "
            f"below vocab_size - K; got shape {first.shape}"
        )
    return first.astype(np.int32)


def _tied_table(table: jax.Array, first: np.ndarray) -> jax.Array:
    """``(V, D)`` stored rows -> the rows the model reads: pair row ``+=`` first token's row."""
    return table.at[table.shape[0] - len(first) :].add(table[jnp.asarray(first)])


def tie_pairs(params: hk.Params, backoff: np.ndarray) -> hk.Params:
    """Parameters trained with ``classifier(..., backoff=backoff)`` -> the same model's
    parameters for ``classifier(...)`` without it, as NumPy arrays (what checkpoints
    store). Computed on the host: no program is compiled for it."""
    params = jax.device_get(params)

    def tied(table: np.ndarray) -> np.ndarray:
        first = _first_tokens(backoff, table.shape[0])
        out = np.array(table)
        out[len(out) - len(first) :] += table[first]
        return out

    return {
        module: {
            name: tied(value) if name == "embeddings" else np.asarray(value)
            for name, value in leaves.items()
        }
        for module, leaves in params.items()
    }


def baseline(
    config: BaselineConfig,
    vocab_size: int,
    idf: np.ndarray | None = None,
    impl: Impl = "solutions",
) -> ModelFuncs:
    """A practical-1 baseline: ``(input_ids, mask, is_train) -> logits (B,)``; ``idf`` are
    the TF-IDF weights of a ``use_tfidf`` model (fitted on training reviews only)."""
    return funcs_from_stateful(baselines.make_forward(config, vocab_size, idf, impl))


def for_preset(
    preset: Preset,
    vocab_size: int,
    impl: Impl = "solutions",
    train_ids: np.ndarray | None = None,
    train_mask: np.ndarray | None = None,
    bigram_table: np.ndarray | None = None,
) -> tuple[ModelFuncs, ClassifierConfig | BaselineConfig, np.ndarray | None]:
    """The model a preset names, its config and (TF-IDF baselines) the idf weights, which
    are fitted on ``train_ids``/``train_mask``. A ``bigram_backoff`` preset's classifier
    backs its pair tokens off to their first tokens, read from the data's ``bigram_table``."""
    config = preset.model_config(vocab_size)
    if preset.architecture == TRANSFORMER:
        return classifier(config, impl, backoff=backoff_for(preset, bigram_table)), config, None
    idf = None
    if getattr(config, "use_tfidf", False):
        idf = baselines.fit_baseline_idf(config, vocab_size, train_ids, train_mask, impl)
    return baseline(config, vocab_size, idf, impl), config, idf


def init_for_preset(
    preset: Preset,
    data: Any,
    seed: int,
    impl: Impl = "solutions",
    train_ids: np.ndarray | None = None,
    train_mask: np.ndarray | None = None,
) -> tuple[ModelFuncs, ClassifierConfig | BaselineConfig, dict, np.ndarray | None]:
    """The model of ``preset`` for prepared ``data`` and its first parameters:
    ``(funcs, config, params, backoff)``. ``train_ids``/``train_mask`` fit a TF-IDF
    baseline's weights; ``backoff`` is :func:`backoff_for`'s (None without backoff), whose
    residual rows start at zero."""
    table = getattr(data, "bigram_table", None)
    backoff = backoff_for(preset, table)
    funcs, config, _ = for_preset(preset, data.vocab_size, impl, train_ids, train_mask, table)
    zero_rows = 0 if backoff is None else len(backoff)  # each pair starts as its first token
    params = init_params(funcs, seed, preset.seq_len, preset.embed_scale, zero_rows)
    return funcs, config, params, backoff


def backoff_for(preset: Preset, bigram_table: np.ndarray | None) -> np.ndarray | None:
    """The ``backoff`` of :func:`classifier` for a preset: the pairs' first tokens
    ``(K,)`` if it sets ``bigram_backoff``, else None."""
    if not preset.bigram_backoff:
        return None
    if bigram_table is None:
        raise ValueError("bigram_backoff needs the data's bigram table (bigram_tokens > 0)")
    return np.asarray(bigram_table)[:, 0]


def init_params(
    funcs: ModelFuncs,
    key: jax.Array | int,
    max_len: int = 8,
    embed_scale: float = 1.0,
    zero_rows: int = 0,
) -> dict:
    """Parameters of a model of token ids (they do not depend on the sequence length);
    ``key`` is a PRNG key or a seed.

    ``embed_scale`` multiplies the initial token embeddings (haiku draws them with standard
    deviation 1). A small scale (e.g. 0.1) lets the sinusoidal positions and the learned
    sentiment directions dominate early on; on IMDB it trains much faster. The last
    ``zero_rows`` rows of the embedding table start at zero: with ``backoff`` they are the
    pairs' residuals, so each pair starts out read as its first token.
    """
    return _init(funcs, key, min(8, max_len), embed_scale, zero_rows, isinstance(key, int))


@functools.partial(jax.jit, static_argnums=(0, 2, 3, 4, 5))
def _init(
    funcs: ModelFuncs, key, width: int, embed_scale: float, zero_rows: int, seeded: bool
) -> dict:
    # one program per model and settings, where eager operations would compile one each
    # and a closure jitted per call would compile again for every run in the process
    ids = np.ones((1, width), np.int32)
    params = funcs.init_params(jax.random.PRNGKey(key) if seeded else key, ids, ids, True)

    def scaled(value):
        value = value * embed_scale
        return value.at[value.shape[0] - zero_rows :].set(0.0) if zero_rows else value

    return {
        module: {
            name: scaled(value) if name == "embeddings" else value for name, value in leaves.items()
        }
        for module, leaves in params.items()
    }
