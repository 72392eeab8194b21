"""Writing with practical 3's character language model, one character at a time.

:func:`generate` keeps a key/value cache: the prompt is read once (every position's keys and
values of every block are kept), then each new character costs one position of attention
over the cached ones. :func:`generate_recomputing` is the plain way, for comparison: every
new character runs the whole model over the window again. Both are one compiled program
(a ``lax.scan`` over the new characters) and give the same logits at every step.

The cached path reads the parameters of ``CharLanguageModel`` by their names and computes
what its modules compute (the post-LayerNorm decoder of practical 3). :func:`check_cache`
compares it with the model's own forward on the prompt: a model whose modules do
something else is refused in one line, never generated from with other numbers.

Generation never runs past the model's window (``max_len``): a prompt and a length that do
not fit are refused in one line (:class:`WindowError`).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp.config import LanguageModelConfig

PREFIX = "char_lm/~/"
Sample = Callable[[jax.Array, jax.Array, float, int | None], jax.Array]


class WindowError(ValueError):
    """A prompt and a length that do not fit in the model's window."""


class Cache(NamedTuple):
    """Keys and values of every block at every position so far: ``(L, B, h, W, d_head)``."""

    keys: jax.Array
    values: jax.Array


def check_window(prompt_len: int, new_chars: int, window: int) -> None:
    """Refuse (:class:`WindowError`) what would run past the window of ``window`` characters."""
    if prompt_len < 1:
        raise WindowError("the prompt is empty: give at least one character to continue")
    if prompt_len + new_chars > window:
        room = window - prompt_len
        raise WindowError(
            f"the model reads at most {window} characters, prompt included: with a prompt of "
            f"{prompt_len}, ask for at most {max(room, 0)} new ones (--max-chars)"
            + ("" if room > 0 else ", or shorten the prompt")
        )


def position_table(positional: Callable[..., hk.Module], config: LanguageModelConfig) -> jax.Array:
    """``(W, D)``: what the model's ``PositionalEncoding`` class adds at each position (read by
    running it on zeros, in evaluation mode)."""

    def forward(x):
        return positional(config.d_model, config.max_len, 0.0, name="positional")(x, False)

    transformed = hk.without_apply_rng(hk.transform(forward))
    zeros = jnp.zeros((1, config.max_len, config.d_model), jnp.float32)
    return transformed.apply(transformed.init(jax.random.PRNGKey(0), zeros), zeros)[0]


def _linear(p: dict, x: jax.Array) -> jax.Array:
    return x @ p["w"] + p["b"]


def _layer_norm(p: dict, x: jax.Array) -> jax.Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) * jax.lax.rsqrt(var + 1e-5) * p["scale"] + p["offset"]


def _heads(x: jax.Array, h: int) -> jax.Array:
    """``(B, S, D) -> (B, h, S, D / h)``."""
    b, s, d = x.shape
    return x.reshape(b, s, h, d // h).transpose(0, 2, 1, 3)


def _blocks(params: hk.Params, config: LanguageModelConfig, x, cache: Cache, at, visible):
    """Every block on positions ``at .. at + S`` of ``x (B, S, D)``, reading and filling the
    cache; ``visible (B, 1, S, W)`` says which cached keys each query sees."""
    h = config.num_heads
    keys, values = [], []
    for i in range(config.num_layers):
        p = lambda name, i=i: params[f"{PREFIX}decoder/~/block_{i}/~/{name}"]  # noqa: E731
        q = _heads(_linear(p("attention/~/proj_q"), x), h)
        k = jax.lax.dynamic_update_slice_in_dim(
            cache.keys[i], _heads(_linear(p("attention/~/proj_k"), x), h), at, axis=2
        )
        v = jax.lax.dynamic_update_slice_in_dim(
            cache.values[i], _heads(_linear(p("attention/~/proj_v"), x), h), at, axis=2
        )
        keys.append(k)
        values.append(v)
        scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
        weights = jax.nn.softmax(jnp.where(visible, scores, jnp.finfo(scores.dtype).min), -1)
        out = (weights @ v).transpose(0, 2, 1, 3).reshape(x.shape)
        x = _layer_norm(p("norm_1"), x + _linear(p("attention/~/proj_o"), out))
        hidden = jax.nn.relu(_linear(p("feed_forward/~/linear_1"), x))
        x = _layer_norm(p("norm_2"), x + _linear(p("feed_forward/~/linear_2"), hidden))
    return x, Cache(jnp.stack(keys), jnp.stack(values))


def _embed(params: hk.Params, table: jax.Array, ids: jax.Array, at) -> jax.Array:
    """Character vectors plus their positions' rows of ``table`` (``(W, D)``)."""
    vectors = params[f"{PREFIX}embedding/~/embed"]["embeddings"][ids]
    rows = jax.lax.dynamic_slice_in_dim(table, at, ids.shape[1], axis=0)
    return vectors + rows[None]


def empty_cache(config: LanguageModelConfig, batch: int) -> Cache:
    shape = (
        config.num_layers,
        batch,
        config.num_heads,
        config.max_len,
        config.d_model // config.num_heads,
    )
    return Cache(jnp.zeros(shape, jnp.float32), jnp.zeros(shape, jnp.float32))


def prefill(params: hk.Params, config: LanguageModelConfig, table: jax.Array, ids: jax.Array):
    """Read a prompt ``ids (B, P)`` at once: the logits of every position ``(B, P, V)`` and
    the cache of its keys and values."""
    w, p = config.max_len, ids.shape[1]
    causal = jnp.arange(w)[None, :] <= jnp.arange(p)[:, None]
    x, cache = _blocks(
        params,
        config,
        _embed(params, table, ids, 0),
        empty_cache(config, ids.shape[0]),
        0,
        causal[None, None],
    )
    return _linear(params[f"{PREFIX}head"], x), cache


def step(
    params: hk.Params,
    config: LanguageModelConfig,
    table: jax.Array,
    cache: Cache,
    ids: jax.Array,
    at,
):
    """One new character per row ``ids (B,)`` at position ``at``: its logits ``(B, V)`` and the
    cache with its keys and values; it attends to positions ``0 .. at`` only."""
    visible = (jnp.arange(config.max_len) <= at)[None, None, None, :]
    x, cache = _blocks(params, config, _embed(params, table, ids[:, None], at), cache, at, visible)
    return _linear(params[f"{PREFIX}head"], x)[:, 0], cache


class Generated(NamedTuple):
    """The new ids ``(B, N)`` and the logits each was drawn from ``(B, N, V)``."""

    ids: jax.Array
    logits: jax.Array


@functools.partial(
    jax.jit, static_argnames=("config", "new_chars", "sample", "temperature", "top_k")
)
def generate(
    params: hk.Params,
    table: jax.Array,
    prompt: jax.Array,
    key: jax.Array,
    *,
    config: LanguageModelConfig,
    new_chars: int,
    sample: Sample,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> Generated:
    """``new_chars`` characters after ``prompt (B, P)``, with the key/value cache."""
    logits, cache = prefill(params, config, table, prompt)
    keys = jax.random.split(key, new_chars)

    def body(carry, k):
        cache, last, at = carry
        nxt = sample(last, k, temperature, top_k).astype(jnp.int32)
        logits, cache = step(params, config, table, cache, nxt, at)
        return (cache, logits, at + 1), (nxt, last)

    init = (cache, logits[:, -1], jnp.int32(prompt.shape[1]))
    _, (ids, drawn_from) = jax.lax.scan(body, init, keys)
    return Generated(ids.T, jnp.swapaxes(drawn_from, 0, 1))


@functools.partial(
    jax.jit, static_argnames=("apply", "window", "new_chars", "sample", "temperature", "top_k")
)
def generate_recomputing(
    params: hk.Params,
    prompt: jax.Array,
    key: jax.Array,
    *,
    apply: Callable,
    window: int,
    new_chars: int,
    sample: Sample,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> Generated:
    """The same, the whole model run over the window (``apply(params, ids, mask)``, logits
    ``(B, W, V)``) for every new character: the way without a cache."""
    b, p = prompt.shape
    ids = jnp.zeros((b, window), jnp.int32).at[:, :p].set(prompt)
    keys = jax.random.split(key, new_chars)

    def body(carry, k):
        ids, at = carry
        mask = (jnp.arange(window) < at)[None, :].astype(jnp.int32) * jnp.ones((b, 1), jnp.int32)
        last = jax.lax.dynamic_index_in_dim(
            apply(params, ids, mask), at - 1, axis=1, keepdims=False
        )
        nxt = sample(last, k, temperature, top_k).astype(jnp.int32)
        return (jax.lax.dynamic_update_index_in_dim(ids, nxt, at, axis=1), at + 1), (nxt, last)

    _, (new, drawn_from) = jax.lax.scan(body, (ids, jnp.int32(p)), keys)
    return Generated(new.T, jnp.swapaxes(drawn_from, 0, 1))


def check_cache(params, config, table, apply, prompt: np.ndarray) -> None:
    """Raise ``ValueError`` (one line) if the cached path's logits on ``prompt`` are not the
    model's own: its modules compute something other than practical 3's decoder."""
    want = np.asarray(apply(params, prompt, np.ones_like(prompt)))
    got = np.asarray(jax.jit(prefill, static_argnums=1)(params, config, table, prompt)[0])
    if want.shape != got.shape or not np.allclose(want, got, atol=1e-3, rtol=1e-3):
        raise ValueError(
            "this model's layers do not compute practical 3's decoder (post-LayerNorm blocks "
            "named as in the stubs), so it cannot use the key/value cache: check the model "
            "with `pytest -m language_model` first"
        )


def stop_at(ids: np.ndarray, stop: int | None) -> np.ndarray:
    """``ids (N,)`` up to (without) the first ``stop`` id, if there is one."""
    if stop is None:
        return ids
    hits = np.flatnonzero(ids == stop)
    return ids[: hits[0]] if hits.size else ids
