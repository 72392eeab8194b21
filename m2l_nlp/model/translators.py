"""Practical 3's translator, from the practical's file (or a notebook), and how it decodes.

Training reads the student's ``Transformer`` on a source and its target
(:func:`translator`). Translating reads the source once through :func:`encoder` (the
student's ``Transformer.encode``), then the target one position at a time through
:func:`decoder` (the student's ``Transformer.decode``, with caches or without): the steps,
the check of the cache and the loops over positions (the student's ``greedy_decode``, the
course's beam search) are :mod:`m2l_nlp.model.generation`'s, shared with the language model.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import haiku as hk
import jax
import numpy as np

from m2l_nlp.config import Preset, TransformerConfig
from m2l_nlp.impl import Impl, practical_namespace
from m2l_nlp.model import generation
from m2l_nlp.model.classifiers import ModelOutputError
from m2l_nlp.transform import ModelFuncs, funcs_from_stateful, pure_apply

PRACTICAL = "practical3_translation"


def translator(
    config: TransformerConfig, impl: Impl = "solutions", *, start_id: int
) -> tuple[ModelFuncs, Any]:
    """The model's functions (logits ``(B, T, V)`` of the target tokens, given
    ``(source, source_mask, target, target_mask)``, each ``(B, T)``: the pairs of
    :mod:`m2l_nlp.data.translation`) and the practical's namespace.

    The student's ``Transformer`` reads the target shifted right behind the start token
    (their ``shift_right``: teacher forcing), so position ``t`` scores target token ``t``;
    ``start_id`` is the tokenizer's start token."""
    practical = practical_namespace(PRACTICAL, impl)

    def forward(source, source_mask, target, target_mask, is_train=True):
        model = practical.Transformer(config, name="transformer")
        inputs = practical.shift_right(target, start_id)
        input_mask = practical.shift_right(target_mask, 1)  # the start token is real
        return model(source, source_mask, inputs, input_mask, is_train)

    return funcs_from_stateful(forward), practical


def init_params(funcs: ModelFuncs, seed: int, max_len: int) -> hk.Params:
    ids = np.ones((1, max_len), np.int32)
    return funcs.init_params(jax.random.PRNGKey(seed), ids, ids, ids, ids, True)


def check_output(logits: Any, rows: int, width: int, vocab: int, impl: Impl) -> None:
    """Raise :class:`ModelOutputError` unless ``logits`` (the output for ``rows`` pairs of
    ``width`` target tokens, or its shape and dtype) is ``(rows, width, vocab)`` of finite
    floats."""
    where = '`pytest -m transformer` (or check("transformer", ...) in a notebook) says what'
    where += " is wrong"
    impl = impl if isinstance(impl, str) else "your notebook's cells"
    shape, dtype = tuple(logits.shape), np.dtype(logits.dtype)
    if shape != (rows, width, vocab) or not np.issubdtype(dtype, np.floating):
        raise ModelOutputError(
            f"the translator ({impl}) gives {dtype.name} of shape {shape} for {rows} targets "
            f"of {width} tokens; it should give float logits of shape ({rows}, {width}, "
            f"{vocab}), one per token of the vocabulary at every target position: {where}"
        )
    if isinstance(logits, np.ndarray | jax.Array) and not np.isfinite(np.asarray(logits)).all():
        raise ModelOutputError(
            f"the translator ({impl}) gives NaN or infinite logits at initialisation: {where}"
        )


def check_builds(preset: Preset, impl: Impl) -> None:
    """Build ``preset``'s translator on a tiny vocabulary and check its output's shape,
    traced only: an exercise still to do raises its ``NotImplementedError`` here, before a
    run folder is opened."""
    config = preset.model_config(16)
    funcs, _ = translator(config, impl, start_id=1)  # shapes only: any start token
    ids = np.ones((2, 8), np.int32)
    params = jax.eval_shape(
        lambda k: funcs.init_params(k, ids, ids, ids, ids, True), jax.random.PRNGKey(0)
    )
    logits = jax.eval_shape(lambda p: funcs.model_fw.apply(p, ids, ids, ids, ids, False), params)
    check_output(logits, 2, 8, 16, impl)


class BeamTooWide(ValueError):
    """More beams than the memory holds for one sentence; the message gives the most that fit."""


def free_memory() -> int | None:
    """Bytes the first device can still allocate: its allocator's limit less what is in use
    (GPU, TPU), or the host's available memory (CPU); None where neither is known."""
    stats = jax.local_devices()[0].memory_stats()
    if stats and "bytes_limit" in stats:
        return int(stats["bytes_limit"]) - int(stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):  # not on every system
        return None


def program_bytes(compiled: Any) -> int | None:
    """The memory a compiled program allocates when it runs (its arguments, outputs and
    temporaries, as XLA planned them), or None where the backend does not say."""
    try:
        plan = compiled.memory_analysis()
    except (AttributeError, NotImplementedError, jax.errors.JaxRuntimeError):
        return None
    if plan is None:
        return None
    used = plan.argument_size_in_bytes + plan.output_size_in_bytes + plan.temp_size_in_bytes
    return int(used - plan.alias_size_in_bytes)


def _gb(size: float) -> str:
    return f"{size / 1e9:.1f} GB" if size >= 1e8 else f"{size / 1e6:.0f} MB"


def fit_beams(need: int, rows: int, beam: int, free: int, share: float = 0.9) -> int:
    """How many sentences a batch of beam search holds in ``share`` of ``free`` bytes, given
    that ``rows`` sentences of ``beam`` beams each take ``need`` bytes (memory grows with the
    beams: every beam carries its own cache and logits over the vocabulary). Raises
    :class:`BeamTooWide` when not even one sentence fits, with the most beams that would."""
    usable = share * free  # the rest for what the estimate leaves out
    if need <= usable:
        return rows
    per_sentence = need / rows
    if per_sentence <= usable:
        return max(1, 1 << (int(usable // per_sentence).bit_length() - 1))  # a power of two
    widest = int(usable // (per_sentence / beam))
    fix = f"use --beam {widest} or fewer" if widest >= 1 else "translate greedily (no --beam)"
    raise BeamTooWide(
        f"--beam {beam} needs about {_gb(per_sentence)} for one sentence, and this machine "
        f"has {_gb(free)} free: {fix}"
    )


def encoder(config: TransformerConfig, practical: Any) -> Callable:
    """``encode(params, source_ids, source_mask) -> memory (B, S, D)``: the practical's
    ``Transformer.encode`` in evaluation mode."""

    def encode(source_ids, source_mask):
        return practical.Transformer(config, name="transformer").encode(
            source_ids, source_mask, False
        )

    return pure_apply(encode)


def decoder(config: TransformerConfig, practical: Any) -> generation.Decode:
    """``decode(params, ids, mask, (memory, source_mask), caches=None, at=0)``: the
    practical's ``Transformer.decode`` in evaluation mode (:data:`generation.Decode`)."""

    def decode(target_ids, target_mask, context, caches=None, at=0):
        memory, source_mask = context
        model = practical.Transformer(config, name="transformer")
        if caches is None:  # as the forward calls it: a model without a cache still reads
            return model.decode(target_ids, target_mask, memory, source_mask, False)
        return model.decode(
            target_ids, target_mask, memory, source_mask, False, caches=caches, at=at
        )

    return pure_apply(decode)
