"""Decoding, one position at a time, for practical 3's language model and translator.

The model is the student's: ``decode(params, ids (B, S), mask (B, S), context, caches=None,
at=0)`` runs their modules in evaluation mode (:mod:`m2l_nlp.model.language_models`,
:mod:`m2l_nlp.model.translators`). Given every block's key/value cache it reads the new
positions ``at ..`` only, each block's self-attention answered by their ``attend_with_cache``,
and returns the logits and the new caches; without, it reads the whole text. Two ways to step
through a text come from it, with one signature (:data:`Step`):

- :func:`cached`: the new positions through the caches;
- :func:`recomputing`: the whole text so far read again at every step, for a model whose
  cache is not written yet (or not right: :func:`check_cache` says, and :func:`use_cache`
  chooses).

The loops: :func:`generate` (sampling with the student's ``sample_next``) and
:func:`beam_search`; greedy decoding is the student's ``greedy_decode``. Each is one compiled
program whichever step it is given.

Generation never runs past the model's window (``max_len``): a prompt and a length that do
not fit are refused in one line (:class:`WindowError`).
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

Sample = Callable[[jax.Array, jax.Array, float, int | None], jax.Array]
# step(params, ids (B, S), at, state) -> logits (B, S, V) of the tokens after positions
# at .. at + S - 1, and the state that has read them
Step = Callable[[Any, jax.Array, jax.Array, Any], tuple[jax.Array, Any]]
# decode(params, ids (B, S), mask (B, S), context, caches=None, at=0) -> logits (B, S, V),
# and the new caches when caches are given: the student's model in evaluation mode
Decode = Callable[..., Any]


class Reading(NamedTuple):
    """What stepping through a text carries from one position to the next (batch first)."""

    context: Any  # what the model reads besides the text: () or (memory, source_mask)
    kept: Any  # every block's cache (cached), or the ids so far (B, W) (recomputing)


def empty_caches(config: Any, batch: int, layer_cache: Callable) -> list:
    """A cache of zeros for every block (``layer_cache(keys, values)``: the practical's
    ``LayerCache``) over the model's whole window."""
    shape = (batch, config.num_heads, config.max_len, config.d_model // config.num_heads)
    zeros = jnp.zeros(shape, jnp.float32)
    return [layer_cache(zeros, zeros) for _ in range(config.num_layers)]


def start(config: Any, batch: int, context: Any, layer_cache: Callable | None) -> Reading:
    """The reading of an empty text: empty caches (a ``layer_cache`` given) or no ids."""
    if layer_cache is None:
        return Reading(context, jnp.zeros((batch, config.max_len), jnp.int32))
    return Reading(context, empty_caches(config, batch, layer_cache))


def cached(decode: Decode) -> Step:
    """The step that reads the new positions only, through every block's cache."""

    def step(params, ids, at, state):
        ones = jnp.ones_like(ids)
        logits, caches = decode(params, ids, ones, state.context, state.kept, at)
        return logits, state._replace(kept=caches)

    return step


def recomputing(decode: Decode) -> Step:
    """The step that writes the new ids after the earlier ones and reads the whole text so
    far again (the positions after it masked out): the way without a cache."""

    def step(params, ids, at, state):
        kept = jax.lax.dynamic_update_slice_in_dim(state.kept, ids.astype(jnp.int32), at, 1)
        read = jnp.arange(kept.shape[1]) < at + ids.shape[1]
        mask = jnp.broadcast_to(read, kept.shape).astype(jnp.int32)
        logits = decode(params, kept, mask, state.context)
        return jax.lax.dynamic_slice_in_dim(logits, at, ids.shape[1], 1), state._replace(kept=kept)

    return step


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
    state: Reading,
    prompt: jax.Array,
    key: jax.Array,
    *,
    step: Step,
    new_chars: int,
    sample: Sample,
    temperature: float = 1.0,
    top_k: int | None = None,
) -> Generated:
    """``new_chars`` characters after ``prompt (B, P)``: the prompt read at once from the
    empty ``state``, then one position per new character, each drawn with ``sample``."""
    logits, state = step(params, prompt, jnp.int32(0), state)
    keys = jax.random.split(key, new_chars)

    def body(carry, k):
        state, last, at = carry
        nxt = sample(last, k, temperature, top_k).astype(jnp.int32)
        logits, state = step(params, nxt[:, None], at, state)
        return (state, logits[:, 0], at + 1), (nxt, last)

    init = (state, logits[:, -1], jnp.int32(prompt.shape[1]))
    _, (ids, drawn_from) = jax.lax.scan(body, init, keys)
    return Generated(ids.T, jnp.swapaxes(drawn_from, 0, 1))


def check_cache(
    params: Any,
    step: Step,
    state: Reading,
    ids: np.ndarray,
    want: np.ndarray,
    real: np.ndarray | None = None,
) -> None:
    """Raise ``ValueError`` (one line) unless the cached ``step``, reading ``ids (B, L)`` from
    the empty ``state`` at once and then one position at a time, gives the model's own logits
    ``want (B, L, V)`` at every position where ``real (B, L)`` holds (default: all)."""
    real = np.ones(ids.shape, bool) if real is None else real
    jitted = jax.jit(step)
    try:
        at_once = np.asarray(jitted(params, jnp.asarray(ids), jnp.int32(0), state)[0])
        one_by_one = []
        for at in range(int(np.flatnonzero(real.any(axis=0)).max()) + 1):
            column = jnp.asarray(ids[:, at : at + 1])
            logits, state = jitted(params, column, jnp.int32(at), state)
            one_by_one.append(np.asarray(logits))
    except (TypeError, ValueError) as error:  # e.g. a model that returns no caches
        raise ValueError(
            f"the model read with caches fails ({type(error).__name__}: {error}); it should "
            "return the logits and the new caches (check with `pytest -m attention_cache`)"
        ) from None
    for got in (at_once, np.concatenate(one_by_one, axis=1)):
        n = got.shape[1]  # one by one: up to the last real position
        shaped = got.shape[0] == want.shape[0] and got.shape[2:] == want.shape[2:]
        counted = real[:, :n]
        if (
            not shaped
            or n > want.shape[1]
            or not np.allclose(got[counted], want[:, :n][counted], atol=1e-3, rtol=1e-3)
        ):
            raise ValueError(
                "the key/value cache does not give this model's own logits (check "
                "attend_with_cache with `pytest -m attention_cache`)"
            )


def use_cache(check: Callable[[], None], doing: str) -> bool:
    """Whether to decode through the cache: ``check()`` passes. Otherwise the reason, in one
    line, that ``doing`` goes on without it, so that an unfinished ``attend_with_cache``
    never stops a run."""
    try:
        check()
    except (ValueError, NotImplementedError) as error:
        print(f"note: {error}; {doing} without it (slower)", file=sys.stderr)
        return False
    return True


def beam_search(
    step: Callable[[jax.Array, jax.Array, Any], tuple[jax.Array, Any]],
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


def stop_at(ids: np.ndarray, stop: int | None) -> np.ndarray:
    """``ids (N,)`` up to (without) the first ``stop`` id, if there is one."""
    if stop is None:
        return ids
    hits = np.flatnonzero(ids == stop)
    return ids[: hits[0]] if hits.size else ids
