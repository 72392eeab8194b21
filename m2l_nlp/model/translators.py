"""Practical 3's translator, from the practical's file (or a notebook), and how it decodes.

Training reads the practical's ``translation_forward`` (a source and its target packed in
one row). Translating reads one target position at a time through a :class:`Decoder`:

- :func:`cached_decoder`: the practical's ``start_translation`` (the encoder, once per
  sentence) and ``translation_step`` (the student's decoder, with every block's
  self-attention answered from a key/value cache by the student's ``attend_with_cache``);
- :func:`recomputing_decoder`: the same model without a cache, the whole target prefix read
  again at every position (where ``attend_with_cache`` is not written yet).

:func:`check_decoder` compares a decoder with the model's own forward before it is used.
The loops over positions are the student's ``greedy_decode`` and the course's
:func:`beam_search`; both see only ``step(tokens, at, state)``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp.config import Preset, TranslationConfig
from m2l_nlp.impl import Impl, practical_namespace
from m2l_nlp.model.classifiers import ModelOutputError
from m2l_nlp.transform import ModelFuncs, funcs_from_stateful

PRACTICAL = "practical3_translation"
# step(tokens (B,), at, state) -> logits (B, V) of the next token, and the state
Step = Callable[[jax.Array, jax.Array, Any], tuple[jax.Array, Any]]


def translator(config: TranslationConfig, impl: Impl = "solutions") -> tuple[ModelFuncs, Any]:
    """The model's functions (logits ``(B, W, V)`` of packed rows ``(B, W)``, the target's
    at the odd columns: :mod:`m2l_nlp.data.translation`) and the practical's namespace."""
    practical = practical_namespace(PRACTICAL, impl)

    def forward(ids, mask, is_train=True):
        return practical.translation_forward(ids, mask, is_train, config)

    return funcs_from_stateful(forward), practical


def init_params(funcs: ModelFuncs, seed: int, max_len: int) -> hk.Params:
    ids = np.ones((1, 2 * max_len), np.int32)
    return funcs.init_params(jax.random.PRNGKey(seed), ids, ids, True)


def check_output(logits: Any, rows: int, width: int, vocab: int, impl: Impl) -> None:
    """Raise :class:`ModelOutputError` unless ``logits`` (the output for ``rows`` packed rows
    of ``width`` columns, or its shape and dtype) is ``(rows, width, vocab)`` of finite floats."""
    where = '`pytest -m transformer` (or check("transformer", ...) in a notebook) says what'
    where += " is wrong"
    impl = impl if isinstance(impl, str) else "your notebook's cells"
    shape, dtype = tuple(logits.shape), np.dtype(logits.dtype)
    if shape != (rows, width, vocab) or not np.issubdtype(dtype, np.floating):
        raise ModelOutputError(
            f"the translator ({impl}) gives {dtype.name} of shape {shape} for {rows} rows of "
            f"{width} columns; it should give float logits of shape ({rows}, {width}, {vocab}), "
            f"one per token of the vocabulary at every column: {where}"
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
    funcs, _ = translator(config, impl)
    rows = np.ones((2, 8), np.int32)
    params = jax.eval_shape(lambda k: funcs.init_params(k, rows, rows, True), jax.random.PRNGKey(0))
    logits = jax.eval_shape(lambda p: funcs.model_fw.apply(p, rows, rows, False), params)
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


class Decoder(NamedTuple):
    """``start(params, source_ids, source_mask) -> state`` and ``step(params, tokens (B,),
    at, state) -> (logits (B, V), state)``: translating one position at a time."""

    start: Callable
    step: Callable
    cached: bool


def cached_decoder(config: TranslationConfig, practical: Any) -> Decoder:
    """The practical's own step, through the key/value cache."""

    def start(source_ids, source_mask):
        return practical.start_translation(source_ids, source_mask, config)

    def step(tokens, at, state):
        return practical.translation_step(tokens, at, state, config)

    pure = hk.without_apply_rng
    return Decoder(pure(hk.transform(start)).apply, pure(hk.transform(step)).apply, True)


class _Prefix(NamedTuple):
    memory: jax.Array  # (B, S, D)
    source_mask: jax.Array  # (B, S)
    ids: jax.Array  # (B, L): the target read so far


def recomputing_decoder(config: TranslationConfig, practical: Any) -> Decoder:
    """The same model without a cache: every step reads the whole prefix again."""

    def model():
        return practical.Transformer(config, name="transformer")

    def start(source_ids, source_mask):
        memory = model().encode(source_ids, source_mask, False)
        ids = jnp.zeros((source_ids.shape[0], config.max_len), jnp.int32)
        return _Prefix(memory, source_mask, ids)

    def step(tokens, at, state):
        ids = jax.lax.dynamic_update_index_in_dim(state.ids, tokens.astype(jnp.int32), at, 1)
        mask = jnp.broadcast_to(jnp.arange(config.max_len) <= at, ids.shape).astype(jnp.int32)
        logits = model().decode(ids, mask, state.memory, state.source_mask, False)
        return jax.lax.dynamic_index_in_dim(logits, at, 1, keepdims=False), state._replace(ids=ids)

    pure = hk.without_apply_rng
    return Decoder(pure(hk.transform(start)).apply, pure(hk.transform(step)).apply, False)


def check_decoder(
    params: Any, decoder: Decoder, funcs: ModelFuncs, rows: np.ndarray, bos: int
) -> None:
    """Raise ``ValueError`` (one line) unless ``decoder``, reading the targets of packed
    ``rows (B, 2L)`` one position at a time, gives the forward's logits at every real one."""
    want = np.asarray(funcs.predict_fw(params, rows, np.ones_like(rows)))[:, 1::2]
    source, target = rows[:, 0::2], rows[:, 1::2]
    inputs = np.concatenate([np.full((len(rows), 1), bos), target[:, :-1]], axis=1)
    state = decoder.start(params, jnp.asarray(source), jnp.asarray((source != 0).astype(np.int32)))
    step = jax.jit(decoder.step)
    real = np.concatenate([np.ones((len(rows), 1), bool), target[:, :-1] != 0], axis=1)
    for at in range(int(real.sum(1).max())):
        logits, state = step(params, jnp.asarray(inputs[:, at].astype(np.int32)), at, state)
        got, ok = np.asarray(logits), real[:, at]
        if got.shape != want[:, at].shape or not np.allclose(
            got[ok], want[ok, at], atol=1e-3, rtol=1e-3
        ):
            raise ValueError(
                "the key/value cache does not give this model's own logits (check "
                "attend_with_cache with `pytest -m attention_cache`)"
            )


def beam_search(
    step: Step,
    state: Any,
    start: jax.Array,
    max_len: int,
    end_id: int,
    width: int,
    length_penalty: float = 0.6,
) -> jax.Array:
    """The most likely translation of each row that ``width`` beams find: ids ``(B,
    max_len)``, padding after the end token. Beams grow by total log-probability; the
    finished ones are ranked at the end by it divided by ``((5 + length) / 6) **
    length_penalty`` (0: no penalty), so that short translations do not win for being short.

    ``state`` leaves have the batch first; each row's state is copied to its ``width`` beams
    (rows ``b * width + k``) and follows its beam when beams are reordered."""
    batch = start.shape[0]
    state = jax.tree_util.tree_map(lambda x: jnp.repeat(x, width, axis=0), state)
    tokens = jnp.repeat(start, width)
    first = jnp.where(jnp.arange(width) == 0, 0.0, -jnp.inf)
    scores = jnp.broadcast_to(first, (batch, width))
    seqs = jnp.zeros((batch, width, max_len), jnp.int32)
    done = jnp.zeros((batch, width), bool)
    lengths = jnp.zeros((batch, width), jnp.int32)

    def body(at, carry):
        tokens, state, scores, seqs, done, lengths = carry
        logits, state = step(tokens, at, state)
        vocab = logits.shape[-1]
        log_probs = jax.nn.log_softmax(logits.astype(jnp.float32)).reshape(batch, width, vocab)
        padding_only = jnp.where(jnp.arange(vocab) == 0, 0.0, -jnp.inf)
        log_probs = jnp.where(done[..., None], padding_only, log_probs)  # a finished beam stays
        best, flat = jax.lax.top_k((scores[..., None] + log_probs).reshape(batch, -1), width)
        parent, token = flat // vocab, (flat % vocab).astype(jnp.int32)

        def follow(x):  # (batch, width, ...) reordered by parent
            return jnp.take_along_axis(x, parent.reshape(*parent.shape, *[1] * (x.ndim - 2)), 1)

        finished = follow(done)
        seqs = follow(seqs).at[:, :, at].set(token)
        lengths = follow(lengths) + (~finished).astype(jnp.int32)
        rows = (jnp.arange(batch)[:, None] * width + parent).reshape(-1)
        state = jax.tree_util.tree_map(lambda x: x[rows], state)
        return token.reshape(-1), state, best, seqs, finished | (token == end_id), lengths

    carry = (tokens, state, scores, seqs, done, lengths)
    _, _, scores, seqs, _, lengths = jax.lax.fori_loop(0, max_len, body, carry)
    ranked = scores / ((5.0 + lengths) / 6.0) ** length_penalty
    return seqs[jnp.arange(batch), jnp.argmax(ranked, axis=1)]
