"""Graded checks of practical 3, writing fast: ``attention_cache`` (``attend_with_cache``,
the self-attention of new positions over a key/value cache)."""

from __future__ import annotations

from typing import Any, NamedTuple

import haiku as hk
import numpy as np

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import slip
from m2l_nlp.grading.practicals.practical3 import common
from m2l_nlp.grading.practicals.practical3.common import VOCAB, B, D, H, S
from m2l_nlp.grading.practicals.practical3.language_model import CONFIG as LM_CONFIG

RETURNS = "attend_with_cache should return (output, LayerCache(keys, values))"
LM_RETURNS = "given caches, CharLanguageModel should return the logits and the new caches"
LM_FIX = (
    "Given a cache, DecoderBlock runs attend_with_cache(self.attention, x, cache, at) in place "
    "of its masked self-attention and returns the new cache in place of the weights; "
    "TransformerDecoder hands block i caches[i] and returns the new caches; CharLanguageModel "
    "returns the logits and the new caches."
)
WINDOW = 8
AT, NEW = 3, 2  # the new positions are 3 and 4 of the window

cache = common.EXERCISES["attention_cache"]


class _Layers(hk.Module):
    """The layers of practical 2's ``MultiheadAttention`` (its given ``__init__``), all that
    ``attend_with_cache`` reads: the check does not depend on the student's practical 2."""

    def __init__(self, d_model: int, num_heads: int):
        super().__init__(name="attention")
        self.num_heads, self.d_head = num_heads, d_model // num_heads
        self.proj_q, self.proj_k, self.proj_v, self.proj_o = (
            hk.Linear(d_model, name=f"proj_{p}") for p in "qkvo"
        )


class _Cache(NamedTuple):
    keys: Any
    values: Any


@tools.builder
def _cached():
    def build(ns):
        def forward(x, keys, values, at):
            got = ns.attend_with_cache(_Layers(D, H), x, _Cache(keys, values), at)
            if not (isinstance(got, tuple) and len(got) == 2 and isinstance(got[1], tuple)):
                raise TypeError(RETURNS)
            return got[0], *got[1]

        return forward

    return build


@tools.builder
def _whole():
    """The reference's attention on the whole text with the causal mask: what the cache
    must reproduce."""

    def build(ns):
        def forward(x):
            causal = np.tril(np.ones((x.shape[1], x.shape[1]), np.int32))[None]
            return ns.MultiheadAttention(D, H, name="attention")(x, x, x, causal)[0]

        return forward

    return build


def _inputs(ctx):
    """New positions' inputs `(B, NEW, D)`, a cache whose every position holds numbers
    (those after the new positions must never be read), and perturbed parameters."""
    rng = ctx.rng()
    x = tools.normal(rng, B, NEW, D)
    shape = (B, H, WINDOW, D // H)
    keys, values = tools.normal(rng, *shape), tools.normal(rng, *shape)
    at = np.int32(AT)
    params = tools.perturb(
        tools.run_haiku(_cached(), ctx.ref, None, x, keys, values, at), ctx.rng("params")
    )
    return rng, x, keys, values, at, params


def _where_written(got: np.ndarray, before: np.ndarray) -> list[int]:
    """The positions (axis 2) where the returned cache differs from the one passed in."""
    return [int(p) for p in np.flatnonzero(np.abs(got - before).max(axis=(0, 1, 3)) > 1e-6)]


def _call(ctx, params, x, keys, values, at):
    got = tools.run_haiku(_cached(), ctx.student, params, x, keys, values, at)
    if not isinstance(got, tuple) or len(got) != 3:
        tools.fail(RETURNS)
    shape = (B, H, WINDOW, D // H)
    out = tools.expect_array(got[0], "the output", shape=(B, x.shape[1], D), axes="(B, S, D)")
    new_keys = tools.expect_array(got[1], "the cache's keys", shape=shape, axes="(B, h, W, D / h)")
    new_values = tools.expect_array(
        got[2], "the cache's values", shape=shape, axes="(B, h, W, D / h)"
    )
    return out, new_keys, new_values


@cache.check(gate=True)
def check_cache_matches_reference(ctx):
    """Two new positions at 3 and 4 of a window of 8: the output and the returned keys and
    values match the reference (under jax.jit, `at` traced)."""
    _, x, keys, values, at, params = _inputs(ctx)
    want = tools.run_haiku(_cached(), ctx.ref, params, x, keys, values, at)
    out, new_keys, new_values = _call(ctx, params, x, keys, values, at)
    for name, got, before, right in (
        ("keys", new_keys, keys, want[1]),
        ("values", new_values, values, want[2]),
    ):
        written = _where_written(got, before)
        hint = ""
        if not written:
            hint = (
                f"The returned cache holds the {name} passed in: write the new positions' "
                f"{name} in and return the new arrays (JAX arrays do not change in place)."
            )
        elif written != list(range(AT, AT + NEW)):
            hint = (
                f"Your cache changed at positions {written}, the new positions are "
                f"{AT}..{AT + NEW - 1}: write at `at` along axis 2 "
                "(jax.lax.dynamic_update_slice_in_dim(cache, new, at, axis=2))."
            )
        tools.expect_close(got, right, f"the cache's {name}", hint=hint)
    close = np.allclose(out, want[0], atol=1e-5, rtol=1e-4)
    tools.expect_close(
        out,
        want[0],
        "the output of attend_with_cache",
        hint=""
        if close
        else _output_slip(ctx, params, x, keys, values, at, out)
        or "Each new query attends to the cached keys 0..its position, its own included; "
        "then merge the heads and apply proj_o.",
    )


def _reads_ahead(ctx, rng, params, x, keys, values, at, out) -> tuple[float, float]:
    """How much ``out`` moves when the cache after the new positions changes, and how much
    its first new position moves when the second one's input changes (both 0 if right)."""
    later = np.zeros((1, 1, WINDOW, 1), np.float32)
    later[:, :, AT + NEW :] = 1.0
    noise = later * tools.normal(rng, *keys.shape)
    by_cache = np.abs(_call(ctx, params, x, keys + noise, values + noise, at)[0] - out).max()
    changed = x.copy()
    changed[:, 1] += tools.normal(rng, B, D)
    by_next = np.abs(_call(ctx, params, changed, keys, values, at)[0][:, 0] - out[:, 0]).max()
    return float(by_cache), float(by_next)


def _output_slip(ctx, params, x, keys, values, at, out) -> str:
    """Which keys a wrong output reads that it should not ('' if it reads none of them)."""
    by_cache, by_next = _reads_ahead(ctx, ctx.rng("slip"), params, x, keys, values, at, out)
    if by_cache > 1e-5:
        return slip(
            "attention_cache/reads-the-empty-cache",
            f"Your output reads the cache after the new positions (from {AT + NEW} on), "
            "which holds no text yet: a query at position at + i sees keys 0..at + i only.",
        )
    if by_next > 1e-5:
        return slip(
            "attention_cache/reads-the-next-new-key",
            f"Your query at position {AT} reads the new key at {AT + 1}: among the new "
            "positions too, each sees itself and the past only.",
        )
    return ""


@cache.check
def check_cache_reads_no_later_key(ctx):
    """The query at position `at + i` ignores every key after it: the cache's later
    positions and the later new positions."""
    rng, x, keys, values, at, params = _inputs(ctx)
    out = _call(ctx, params, x, keys, values, at)[0]
    by_cache, by_next = _reads_ahead(ctx, rng, params, x, keys, values, at, out)
    if by_cache > 1e-5:
        tools.fail(
            f"changing the cache after the new positions (from {AT + NEW} on) changed the "
            f"output by up to {by_cache:.3g}: a query may read positions 0..its own only "
            f"(those after hold anything, never text)"
        )
    if by_next > 1e-5:
        tools.fail(
            f"the output at position {AT} changed (by up to {by_next:.3g}) when only the "
            f"input at {AT + 1} did: among the new positions too, a query sees itself and the "
            "past, never the next one"
        )


@cache.check
def check_cache_one_position_at_a_time(ctx):
    """From an empty cache, 5 positions read one at a time, and all at once, give what
    the reference's `MultiheadAttention` gives on the whole text with the causal mask."""
    rng = ctx.rng()
    n = 5
    x = tools.normal(rng, B, n, D)
    empty = np.zeros((B, H, WINDOW, D // H), np.float32)
    params = tools.perturb(tools.run_haiku(_whole(), ctx.ref, None, x), ctx.rng("params"))
    want = tools.run_haiku(_whole(), ctx.ref, params, x)
    keys, values, outs = empty, empty, []
    for at in range(n):
        out, keys, values = _call(ctx, params, x[:, at : at + 1], keys, values, np.int32(at))
        outs.append(out)
    tools.expect_close(
        np.concatenate(outs, axis=1),
        want,
        "the output, one new position at a time",
        hint="Each step must keep the keys and values of the earlier steps (the cache it "
        "returns) and attend to positions 0..at.",
        versus="MultiheadAttention on the whole text (causal mask)",
    )
    at_once = _call(ctx, params, x, empty, empty, np.int32(0))[0]
    tools.expect_close(
        at_once,
        want,
        "the output, five new positions at once",
        hint="The query at position at + i sees keys 0..at + i.",
        versus="MultiheadAttention on the whole text (causal mask)",
    )


@tools.builder
def _model_with_caches():
    """The student's `CharLanguageModel` on the whole text, then read with caches: all at
    once from position 0, and one character at a time."""

    def build(ns):
        def forward(ids, positions):
            model = ns.CharLanguageModel(LM_CONFIG, name="char_lm")
            ones = np.ones(ids.shape, np.int32)
            whole = model(ids, ones, False)
            caches = [common.empty_cache(len(ids), LM_CONFIG.max_len)] * LM_CONFIG.num_layers
            at_once = model(ids, ones, False, caches=caches, at=positions[0])
            if not (isinstance(at_once, tuple) and len(at_once) == 2):
                raise TypeError(LM_RETURNS)

            def read(piece, caches, at):
                return model(piece, ones[:, :1], False, caches=caches, at=at)

            return whole, at_once[0], common.one_by_one(read, ids, positions, caches)

        return forward

    return build


@cache.check
def check_your_language_model_writes_with_caches(ctx):
    """Your `CharLanguageModel` read with caches (your `DecoderBlock`, `TransformerDecoder`
    and `attend_with_cache`), the text at once and then one character at a time, gives its
    own logits on the whole text."""
    ids = ctx.rng().integers(1, VOCAB, size=(B, S)).astype(np.int32)
    positions = np.arange(S, dtype=np.int32)
    params = tools.perturb(
        tools.run_haiku(_model_with_caches(), ctx.ref, None, ids, positions), ctx.rng("params")
    )
    whole, at_once, by_position = (
        tools.expect_array(a, name, shape=(B, S, VOCAB), axes="(B, S, V)")
        for a, name in zip(
            tools.run_haiku(_model_with_caches(), ctx.student, params, ids, positions),
            ("the logits", "the logits read with caches", "the logits one at a time"),
            strict=True,
        )
    )
    versus = "your CharLanguageModel on the whole text"
    tools.expect_close(
        at_once, whole, "the logits read with caches from position 0", versus=versus, hint=LM_FIX
    )
    fix = (
        "add the positional rows of positions at, at + 1, ... "
        "(jax.lax.dynamic_slice_in_dim(self.positional.table, at, S)) and hand each block the "
        "cache it returned the time before."
    )
    tools.expect_close(
        by_position,
        whole,
        "the logits one character at a time",
        versus=versus,
        hint=common.cache_slip(whole, at_once, "model", fix),
    )
