"""The course's models as pure functions, every one built by ``funcs_from_stateful``.

- :func:`classifier`: practical 2's transformer classifier (``classifier_forward`` of the
  solutions, the student's exercises, or a notebook's own cells).
- :func:`baseline`: a practical-1 baseline (:mod:`m2l_nlp.baselines` writes its forward).
- :func:`for_preset`: whichever of the two a :class:`~m2l_nlp.config.Preset` names.

Each returns :class:`~m2l_nlp.transform.ModelFuncs`: ``model.apply(params, key, ids, mask,
is_train)`` for training, ``predict_fw(params, ids, mask)`` for evaluation, and so on.
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from m2l_nlp import baselines
from m2l_nlp.config import TRANSFORMER, BaselineConfig, ClassifierConfig, Preset
from m2l_nlp.impl import Impl, practical_namespace
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
) -> tuple[ModelFuncs, ClassifierConfig | BaselineConfig, np.ndarray | None]:
    """The model a preset names, its config and (TF-IDF baselines) the idf weights, which
    are fitted on ``train_ids``/``train_mask``."""
    config = preset.model_config(vocab_size)
    if preset.architecture == TRANSFORMER:
        return classifier(config, impl), config, None
    idf = None
    if getattr(config, "use_tfidf", False):
        idf = baselines.fit_baseline_idf(config, vocab_size, train_ids, train_mask, impl)
    return baseline(config, vocab_size, idf, impl), config, idf


def init_params(
    funcs: ModelFuncs, key: jax.Array | int, max_len: int = 8, embed_scale: float = 1.0
) -> dict:
    """Parameters of a model of token ids (they do not depend on the sequence length);
    ``key`` is a PRNG key or a seed.

    ``embed_scale`` multiplies the initial token embeddings (haiku draws them with standard
    deviation 1). A small scale (e.g. 0.1) lets the sinusoidal positions and the learned
    sentiment directions dominate early on; on IMDB it trains much faster.
    """
    return _init(funcs, key, min(8, max_len), embed_scale, isinstance(key, int))


@functools.partial(jax.jit, static_argnums=(0, 2, 3, 4))
def _init(funcs: ModelFuncs, key, width: int, embed_scale: float, seeded: bool) -> dict:
    # one program per model and settings, where eager operations would compile one each
    # and a closure jitted per call would compile again for every run in the process
    ids = np.ones((1, width), np.int32)
    params = funcs.init_params(jax.random.PRNGKey(key) if seeded else key, ids, ids, True)
    return {
        module: {
            name: value * embed_scale if name == "embeddings" else value
            for name, value in leaves.items()
        }
        for module, leaves in params.items()
    }
