"""The course's models as pure functions, every one built by ``funcs_from_stateful``.

- :func:`classifier`: practical 2's transformer classifier (``classifier_forward`` of the
  solutions, the student's exercises, or a notebook's own cells).
- :func:`for_preset`: whichever model a :class:`~m2l_nlp.config.Preset` names, the classifier
  or a practical-1 baseline (whose forward :mod:`m2l_nlp.model.baselines` writes).

Each returns :class:`~m2l_nlp.transform.ModelFuncs`: ``model.apply(params, key, ids, mask,
is_train)`` for training, ``predict_fw(params, ids, mask)`` for evaluation, and so on.
:func:`init_params` creates the parameters (:func:`init_for_preset`: a preset's model and
its parameters at once; :func:`check_model_builds`: whether it builds at all); :func:`pair_tie`
makes pair tokens back off to their first token (stored rows -> the classifier's parameters).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import haiku as hk
import jax
import numpy as np

from m2l_nlp.config import TRANSFORMER, BaselineConfig, ClassifierConfig, Preset
from m2l_nlp.impl import Impl, practical_namespace
from m2l_nlp.model import baselines
from m2l_nlp.transform import ModelFuncs, funcs_from_stateful

PRACTICAL = "practical2_transformers"


def classifier(config: ClassifierConfig, impl: Impl = "solutions", jit: bool = True) -> ModelFuncs:
    """Practical 2's classifier: ``(input_ids (B, S), mask (B, S), is_train) -> logits (B,)``.

    ``impl="exercises"`` (or a notebook's ``globals()``) uses the student's own modules.
    """
    practical = practical_namespace(PRACTICAL, impl)

    def forward(input_ids: jax.Array, mask: jax.Array, is_train: bool = True) -> jax.Array:
        return practical.classifier_forward(input_ids, mask, is_train, config=config)

    return funcs_from_stateful(forward, jit=jit)


def pair_tie(backoff: np.ndarray, vocab_size: int) -> Callable[[hk.Params], hk.Params]:
    """Pair tokens that back off to their first token: ``tie(stored) -> params`` of
    :func:`classifier`.

    ``backoff`` (int ``(K,)``) is the first token of each of the ``K`` pair tokens, which are
    the last ``K`` of the ``vocab_size`` ids. The stored embedding table holds one
    *residual* row per pair; the classifier reads pair ``k`` as its residual plus the row of
    its first token, so what is learnt about "great" also reaches "great acting". The
    students' modules are unchanged: :func:`m2l_nlp.train.loop.train` trains the stored rows
    through ``tie=`` (the gradient is pulled back through it once per step) and returns the
    classifier's parameters, which checkpoints store. It runs inside the step on traced
    arrays, and on NumPy arrays on the host, where it compiles nothing.
    """
    first = np.asarray(backoff)
    base = vocab_size - len(first)
    if first.ndim != 1 or base < 1 or (first.size and (first.min() < 0 or first.max() >= base)):
        raise ValueError(
            f"backoff must list, for each of the last K of the {vocab_size} ids, a token id "
            f"below vocab_size - K; got shape {first.shape}"
        )
    first = first.astype(np.int32)

    def tie(params: hk.Params) -> hk.Params:
        def tied(name: str, table: Any) -> Any:
            if name != "embeddings" or table.shape[0] != vocab_size:
                return table
            if isinstance(table, np.ndarray):  # on the host: no program is compiled
                out = table.copy()
                out[base:] += table[first]
                return out
            return table.at[base:].add(table[first])

        return {
            module: {name: tied(name, value) for name, value in leaves.items()}
            for module, leaves in params.items()
        }

    return tie


def for_preset(
    preset: Preset,
    vocab_size: int,
    impl: Impl = "solutions",
    train_ids: np.ndarray | None = None,
    train_mask: np.ndarray | None = None,
) -> tuple[ModelFuncs, ClassifierConfig | BaselineConfig, np.ndarray | None]:
    """The model a preset names, its config and (TF-IDF baselines) the idf weights, which
    are fitted on ``train_ids``/``train_mask``."""
    config = preset.model_config(vocab_size)
    if isinstance(config, ClassifierConfig):
        return classifier(config, impl), config, None
    idf = None
    if getattr(config, "use_tfidf", False):
        idf = baselines.fit_baseline_idf(config, vocab_size, train_ids, train_mask, impl)
    funcs = funcs_from_stateful(baselines.make_forward(config, vocab_size, idf, impl))
    return funcs, config, idf


def init_for_preset(
    preset: Preset,
    data: Any,
    seed: int,
    impl: Impl = "solutions",
    train_ids: np.ndarray | None = None,
    train_mask: np.ndarray | None = None,
) -> tuple[ModelFuncs, ClassifierConfig | BaselineConfig, dict, Callable | None]:
    """The model of ``preset`` for prepared ``data`` and its first parameters:
    ``(funcs, config, params, tie)``. ``train_ids``/``train_mask`` fit a TF-IDF baseline's
    weights. ``tie`` is None, or for a ``bigram_backoff`` preset the :func:`pair_tie` of the
    data's pairs (pass it to ``train``): then ``params`` are the stored rows, whose pair
    residuals start at zero, so that each pair starts out read as its first token."""
    funcs, config, _ = for_preset(preset, data.vocab_size, impl, train_ids, train_mask)
    if not preset.bigram_backoff:
        return funcs, config, init_params(funcs, seed, preset.seq_len, preset.embed_scale), None
    table = getattr(data, "bigram_table", None)
    if table is None:
        raise ValueError("bigram_backoff needs the data's bigram table (bigram_tokens > 0)")
    first = np.asarray(table)[:, 0]
    params = init_params(funcs, seed, preset.seq_len, preset.embed_scale, len(first))
    return funcs, config, params, pair_tie(first, data.vocab_size)


# The graded exercise that makes each model's output: where to look when it is wrong.
OUTPUT_EXERCISE = {
    TRANSFORMER: "classifier",
    "bow-mlp": "mlp_classifier",
    "bigram-mlp": "mlp_classifier",
    "lstm": "lstm_classifier",
}


class ModelOutputError(ValueError):
    """The model's output is not one finite logit per review; the message says which
    exercise to check."""


def check_output(preset: Preset, logits: Any, batch: int, impl: Impl) -> None:
    """Raise :class:`ModelOutputError` unless ``logits`` (a model's output for ``batch``
    reviews, or its shape and dtype) is ``(batch,)`` of floats, finite where computed: a
    wrong model would otherwise train to a meaningless accuracy."""
    exercise = OUTPUT_EXERCISE.get(preset.architecture, "classifier")
    where = f'`pytest -m {exercise}` (or check("{exercise}", ...) in a notebook) says what is wrong'
    impl = impl if isinstance(impl, str) else "your notebook's cells"  # not a whole globals()
    shape, dtype = tuple(logits.shape), np.dtype(logits.dtype)
    if shape != (batch,) or not np.issubdtype(dtype, np.floating):
        raise ModelOutputError(
            f"the model ({impl}) gives {dtype.name} of shape {shape} for a batch of {batch} "
            f"reviews; it should give float logits of shape ({batch},), one per review: {where}"
        )
    if isinstance(logits, (np.ndarray, jax.Array)) and not np.isfinite(np.asarray(logits)).all():
        raise ModelOutputError(
            f"the model ({impl}) gives NaN or infinite logits at initialisation: {where}"
        )


def check_model_builds(preset: Preset, impl: Impl) -> None:
    """Build and initialise ``preset``'s model on a tiny vocabulary, as a run would, and
    check the shape and dtype of its output: an exercise still to do raises its
    ``NotImplementedError`` here, and a wrong output :class:`ModelOutputError`, traced but
    not computed, before a run folder is opened or minutes of data preparation start."""
    ids = np.ones((2, 8), np.int32)
    funcs, _, _ = for_preset(preset, 16, impl, ids, ids)
    key = jax.random.PRNGKey(0)
    params = jax.eval_shape(lambda k: funcs.init_params(k, ids, ids, True), key)
    logits = jax.eval_shape(lambda p: funcs.model_fw.apply(p, ids, ids, False), params)
    check_output(preset, logits, len(ids), impl)


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
    ``zero_rows`` rows of the embedding table start at zero (the residuals of
    :func:`pair_tie`: each pair starts out read as its first token).
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
