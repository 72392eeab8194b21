"""The loop that writes with practical 3's character language model, one character at a time.

What the model computes lives in the practical's file: its ``language_model_step`` reads new
positions through the student's own modules, each block's self-attention answered from a
key/value cache by the student's ``attend_with_cache``. This module only drives it.
:func:`generate` reads the prompt once, then draws each new character and feeds that one
position back; :func:`generate_recomputing` is the plain way, for comparison: every new
character runs the whole model over the window again. Both are one compiled program (a
``lax.scan`` over the new characters) and give the same logits at every step.

:func:`check_cache` compares the cached path with the model's own forward on the prompt:
a cache that computes something else is refused in one line, never generated from.

Generation never runs past the model's window (``max_len``): a prompt and a length that do
not fit are refused in one line (:class:`WindowError`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Sample = Callable[[jax.Array, jax.Array, float, int | None], jax.Array]
# step(params, ids (B, S), caches, at) -> logits (B, S, V) and the caches, filled at at ..
Step = Callable[[Any, jax.Array, Any, jax.Array], tuple[jax.Array, Any]]


class WindowError(ValueError):
    """A prompt and a length that do not fit in the model's window."""


def check_window(prompt_len: int, new_chars: int, window: int) -> None:
    """Refuse (:class:`WindowError`) what would run past the window of ``window`` characters."""
    if prompt_len < 1:
        raise WindowError("the prompt is empty: give at least one character to continue")
    room = window - prompt_len
    if room < 1:  # no count of new characters would do: the prompt itself must shrink
        raise WindowError(
            f"the model reads at most {window} characters, prompt included, and the prompt "
            f"has {prompt_len}: shorten the prompt to at most {window - 1} characters (a "
            f"prompt of P characters leaves room for {window} - P new ones)"
        )
    if prompt_len + new_chars > window:
        raise WindowError(
            f"the model reads at most {window} characters, prompt included: with a prompt of "
            f"{prompt_len}, ask for at most {room} new ones (--max-chars), or shorten the prompt"
        )


class Generated(NamedTuple):
    """The new ids ``(B, N)`` and the logits each was drawn from ``(B, N, V)``."""

    ids: jax.Array
    logits: jax.Array


@functools.partial(jax.jit, static_argnames=("step", "new_chars", "sample", "temperature", "top_k"))
def generate(
    params: Any,
    caches: Any,
    prompt: jax.Array,
    key: jax.Array,
    *,
    step: Step,
    new_chars: int,
    sample: Sample,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> Generated:
    """``new_chars`` characters after ``prompt (B, P)``: the prompt read at once into the
    (empty) ``caches``, then one position per new character."""
    logits, caches = step(params, prompt, caches, jnp.int32(0))
    keys = jax.random.split(key, new_chars)

    def body(carry, k):
        caches, last, at = carry
        nxt = sample(last, k, temperature, top_k).astype(jnp.int32)
        logits, caches = step(params, nxt[:, None], caches, at)
        return (caches, logits[:, 0], at + 1), (nxt, last)

    init = (caches, logits[:, -1], jnp.int32(prompt.shape[1]))
    _, (ids, drawn_from) = jax.lax.scan(body, init, keys)
    return Generated(ids.T, jnp.swapaxes(drawn_from, 0, 1))


@functools.partial(
    jax.jit, static_argnames=("apply", "window", "new_chars", "sample", "temperature", "top_k")
)
def generate_recomputing(
    params: Any,
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


def check_cache(params: Any, caches: Any, step: Step, apply: Callable, prompt: np.ndarray) -> None:
    """Raise ``ValueError`` (one line) if the cached path's logits on ``prompt (B, P)`` are
    not the model's own (``apply(params, ids, mask)``), read at once and then one position
    at a time."""
    want = np.asarray(apply(params, prompt, np.ones_like(prompt)))
    jitted = jax.jit(step)
    at_once = np.asarray(jitted(params, jnp.asarray(prompt), caches, jnp.int32(0))[0])
    one_by_one = []
    for at in range(prompt.shape[1]):
        logits, caches = jitted(params, jnp.asarray(prompt[:, at : at + 1]), caches, jnp.int32(at))
        one_by_one.append(np.asarray(logits))
    for got in (at_once, np.concatenate(one_by_one, axis=1)):
        if want.shape != got.shape or not np.allclose(want, got, atol=1e-3, rtol=1e-3):
            raise ValueError(
                "the key/value cache does not give this model's own logits (check "
                "attend_with_cache with `pytest -m attention_cache`)"
            )


def stop_at(ids: np.ndarray, stop: int | None) -> np.ndarray:
    """``ids (N,)`` up to (without) the first ``stop`` id, if there is one."""
    if stop is None:
        return ids
    hits = np.flatnonzero(ids == stop)
    return ids[: hits[0]] if hits.size else ids
