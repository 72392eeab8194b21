"""Graded checks of practical 3, the character language model: ``language_model``,
``next_token_loss`` and ``sample_next``."""

from __future__ import annotations

import dataclasses

import numpy as np

from m2l_nlp.config import TransformerConfig
from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import slip
from m2l_nlp.grading.practicals.practical3 import common
from m2l_nlp.grading.practicals.practical3.common import FF, VOCAB, D, H, S

CONFIG = TransformerConfig(
    vocab_size=VOCAB, num_layers=2, num_heads=H, d_model=D, d_ff=FF, p_dropout=0.1, max_len=16
)

# --------------------------------------------------------------------------------------------
# 4. language_model

lm = common.EXERCISES["language_model"]


@tools.builder
def _lm(p: float = CONFIG.p_dropout, is_train: bool = False):
    config = dataclasses.replace(CONFIG, p_dropout=p)

    def build(ns):
        return lambda ids, mask: ns.CharLanguageModel(config, name="char_lm")(ids, mask, is_train)

    return build


@lm.check(gate=True)
def check_language_model_matches_reference(ctx):
    """Logits `(B, S, V)` match the reference on padded characters (under jax.jit)."""
    ids, mask = common.char_batch(ctx.rng())
    tools.compare_module(
        ctx,
        _lm(),
        ids,
        mask,
        names=("the logits of CharLanguageModel",),
        hint="Embedding (with the mask), positions, the decoder with the mask, then `head`: "
        "a Linear(vocab_size) on every position.",
    )


@lm.check
def check_language_model_reads_no_future(ctx):
    """The logits at positions 0..t ignore the characters after t."""
    rng = ctx.rng()
    ids, _ = common.char_batch(rng)
    mask = np.ones_like(ids)
    ids = np.where(ids == 0, 1, ids)
    params = tools.perturb(tools.run_haiku(_lm(), ctx.ref, None, ids, mask), ctx.rng("params"))
    common.expect_no_future(
        lambda x: tools.run_haiku(_lm(), ctx.student, params, x, mask),
        ids,
        rng,
        "CharLanguageModel",
    )


@lm.check
def check_language_model_ignores_padding(ctx):
    """A text padded to 6 or to 9 characters gets the same logits at its real positions."""
    rng = ctx.rng()
    ids, mask = common.char_batch(rng)
    params = tools.perturb(tools.run_haiku(_lm(), ctx.ref, None, ids, mask), ctx.rng("params"))
    short = tools.expect_array(tools.run_haiku(_lm(), ctx.student, params, ids, mask), "the logits")
    longer_ids = np.pad(ids, ((0, 0), (0, 3)))
    longer_mask = np.pad(mask, ((0, 0), (0, 3)))
    longer = tools.expect_array(
        tools.run_haiku(_lm(), ctx.student, params, longer_ids, longer_mask), "the logits (padded)"
    )
    if longer.shape[:2] != longer_ids.shape:
        tools.fail(
            f"the logits should be (B, S, V); for ids {longer_ids.shape} yours are {longer.shape}"
        )
    real = mask.astype(bool)
    tools.expect_close(
        longer[:, :S][real],
        short[real],
        "the logits at real characters with 3 more padding positions",
        versus="the same text padded less",
        hint="Padding must not change what the real characters read: pass the mask on.",
    )


@lm.check
def check_language_model_training_matches_reference(ctx):
    """Training logits (p_dropout=0.5) are the reference's."""
    ids, mask = common.char_batch(ctx.rng())
    tools.expect_trains_like(
        ctx,
        tools.draws_of(_lm(tools.DRAW_P, True)),
        ids,
        mask,
        init=_lm(),
        draws=8 * tools.DRAWS,  # many dropout sites: one is a small part of the noise
        what="CharLanguageModel",
        hint="The positional encoding and the decoder get is_train, and they hold all the "
        "dropout: none on the embedding or the logits.",
    )


# --------------------------------------------------------------------------------------------
# 5. next_token_loss

loss = common.EXERCISES["next_token_loss"]


def _variants(reference, logits: np.ndarray, ids: np.ndarray, mask: np.ndarray) -> dict[str, float]:
    """The typical slips' values, to name the one a wrong loss made: each is the
    reference's loss of other inputs (no loss is computed here, where a student's code
    could import it). ``reference(logits, ids, mask)`` scores ``logits[:, :-1]`` against
    ``ids[:, 1:]`` over ``mask[:, 1:]``; a column put in front or behind moves what it pairs."""

    def front(a):  # a column in front: position i of `a` becomes i + 1
        return np.concatenate([np.zeros_like(a[:, :1]), a], axis=1)

    def behind(a):
        return np.concatenate([a, np.zeros_like(a[:, :1])], axis=1)

    def value(*arrays) -> float:
        return float(reference(*arrays))

    own = slip(
        "next_token_loss/targets-not-shifted",
        "the targets are not shifted: position i is scored against its own character, which "
        "it can see (score the logits at i against the id at i + 1)",
    )
    rows = [value(*(a[r : r + 1] for a in (logits, ids, mask))) for r in range(len(ids))]
    return {
        own: value(behind(logits), front(ids), front(mask)),
        own + " ": value(behind(logits[:, 1:]), front(ids[:, 1:]), front(mask[:, 1:])),
        slip(
            "next_token_loss/padding-counted",
            "padding is counted: a target whose mask is 0 is not a character (weigh each target "
            "by the mask of its own position, mask[:, 1:])",
        ): value(logits, ids, np.ones_like(mask)),
        slip(
            "next_token_loss/mean-of-row-means",
            "each row's mean is averaged over the rows: a long text and a short one then weigh "
            "the same; average over all the targets that count",
        ): float(np.mean(rows)),
        slip(
            "next_token_loss/mask-of-the-predicting-position",
            "the targets are weighed by the mask of the position that predicts them (mask[:, :-1])"
            ": use the mask of the target itself (mask[:, 1:])",
        ): value(logits, ids, front(mask[:, :-1])),
    }


def _loss_batch(rng: np.random.Generator):
    ids, mask = common.char_batch(rng, 3, S)
    mask[1, 3:] = 0  # rows of different lengths: a per-row mean then differs
    ids = ids * mask
    return tools.normal(rng, 3, S, VOCAB) * 2, ids, mask


@loss.check(gate=True)
def check_loss_matches_reference(ctx):
    """The mean next-character loss matches the reference on padded rows (under jax.jit)."""
    logits, ids, mask = _loss_batch(ctx.rng())
    common.expect_loss_of_reference(
        ctx,
        "next_token_loss",
        (logits, ids, mask),
        lambda reference, _: _variants(reference, logits, ids, mask),
        "the mean cross-entropy of logits[:, :-1] against ids[:, 1:], over the targets whose "
        "mask is 1",
    )


@loss.check
def check_loss_of_no_target_is_zero(ctx):
    """A batch with nothing to predict (one character per row) has loss 0, not NaN."""
    rng = ctx.rng()
    logits, ids, _ = _loss_batch(rng)
    mask = np.zeros_like(ids)
    mask[:, 0] = 1
    got = tools.expect_array(
        tools.jitted(ctx.student.next_token_loss)(logits, ids * mask, mask),
        "the loss",
        shape=(),
        finite=False,
    )
    if not np.isfinite(got) or abs(float(got)) > 1e-6:
        tools.fail(
            f"with one character per row there is no target, and the loss should be 0; yours "
            f"is {float(got)} (divide by the number of targets, at least 1)"
        )


@loss.check
def check_loss_of_a_sure_model_is_zero(ctx):
    """Logits that put everything on the right next character give a loss close to 0."""
    rng = ctx.rng()
    _, ids, mask = _loss_batch(rng)
    nxt = np.concatenate([ids[:, 1:], ids[:, :1]], axis=1)
    logits = np.where(np.arange(VOCAB) == nxt[..., None], 30.0, -30.0).astype(np.float32)
    got = float(
        tools.expect_array(
            tools.jitted(ctx.student.next_token_loss)(logits, ids, mask), "the loss", shape=()
        )
    )
    if got > 1e-3:
        tools.fail(
            f"logits that are sure of every next character should give a loss near 0; yours "
            f"give {got:.4g}: the logits at position i predict the character at i + 1"
        )


# --------------------------------------------------------------------------------------------
# 6. sample_next
#
# Graded as a sampler: the same key gives the same draws, different keys give different
# draws, and the draws over many keys follow softmax(logits / T) among the top k. One fixed
# key per check let a sampler that never reads its key pass (a fixed key inside, or a fixed
# inverse CDF: row i takes u = (i + 0.5) / B). The inputs and keys come from fixed seeds, so
# each check fails a correct sampler (categorical, Gumbel-max, an inverse CDF of its own
# uniforms...) with a chance below ALPHA, over the sampler's own randomness.

sample = common.EXERCISES["sample_next"]

ALPHA = 1e-6  # a check's chance of failing a correct sampler, at most
KEYS = 16  # calls per case of a frequency check, each with its own key
ROWS = 2048  # rows per call (one row of logits, tiled): KEYS * ROWS = 32,768 draws a case
LOGITS = np.array([2.0, 1.0, 0.5, 0.0, -1.0], np.float32)


def _keys(ctx, n: int) -> list[np.ndarray]:
    """``n`` keys from the check's generator (so from the grading seed too): random bits of
    a key's shape, any of which is a key; two of them alike with a chance below n^2 / 2^65."""
    shape = np.shape(ctx.key(0))  # (2,): threefry's two 32-bit words
    return list(ctx.rng("keys").integers(0, 2**32, size=(n, *shape), dtype=np.uint32))


def _draws(ctx, logits: np.ndarray, temperature: float, top_k, keys) -> np.ndarray:
    """The ids `(len(keys), B)` drawn from ``logits`` `(B, V)` by one call per key."""
    rows, vocab = logits.shape
    draw = tools.jitted(ctx.student.sample_next, 2, 3)  # one compilation for all the keys
    got = []
    for key in keys:
        ids = tools.expect_array(
            draw(logits, key, temperature, top_k), "the sampled ids", shape=(rows,), axes="(B,)"
        )
        if not np.issubdtype(ids.dtype, np.integer):
            tools.fail(f"sample_next should return integer ids; yours have dtype {ids.dtype}")
        if ids.min() < 0 or ids.max() >= vocab:
            tools.fail(f"sample_next returned ids outside 0..{vocab - 1} (e.g. {ids.max()})")
        got.append(ids)
    return np.stack(got)


def _tiled(logits_row: np.ndarray, rows: int = ROWS) -> np.ndarray:
    return np.broadcast_to(logits_row, (rows, logits_row.size)).astype(np.float32)


def _frequencies(ctx, logits_row: np.ndarray, temperature: float, top_k, keys) -> np.ndarray:
    draws = _draws(ctx, _tiled(logits_row), temperature, top_k, keys)
    return np.bincount(draws.ravel(), minlength=logits_row.size) / draws.size


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max())
    return e / e.sum()


def _kl(q: np.ndarray, p: np.ndarray) -> np.ndarray:
    """KL(Bernoulli(q) || Bernoulli(p)), elementwise, for 0 < p < 1."""
    with np.errstate(divide="ignore", invalid="ignore"):
        above = np.where(q > 0, q * np.log(q / p), 0.0)
        below = np.where(q < 1, (1 - q) * np.log((1 - q) / (1 - p)), 0.0)
    return above + below


def _frequencies_off(freq: np.ndarray, want: np.ndarray, draws: int, tests: int) -> np.ndarray:
    """Which frequencies ``freq`` of ``draws`` draws are too far from probabilities ``want``
    (0 < want < 1): one of ``tests`` tests that together fail a correct sampler with a chance
    below ALPHA. By Chernoff's bound a frequency of draws that far, on either side, has a
    chance of at most 2 exp(-draws KL(freq || want)) each; this is ALPHA / tests at the edge."""
    return draws * _kl(freq, want) > np.log(2 * tests / ALPHA)


def _close(freq: np.ndarray, want: np.ndarray, tests: int) -> bool:
    return not _frequencies_off(freq, want, KEYS * ROWS, tests).any()


@sample.check(gate=True)
def check_sample_follows_the_temperature(ctx):
    """At temperatures 0.5 and 2, the draws' frequencies over 16 keys are softmax(logits / T)."""
    keys = _keys(ctx, KEYS)
    for temperature in (0.5, 2.0):
        freq = _frequencies(ctx, LOGITS, temperature, None, keys)
        want = _softmax(LOGITS / temperature)
        if _close(freq, want, 2 * LOGITS.size):  # 2 temperatures, 5 ids each
            continue
        if _close(freq, _softmax(LOGITS), 2 * LOGITS.size):
            tools.fail(
                f"at temperature {temperature} your draws follow softmax(logits) (frequency of id "
                f"0: {freq[0]:.3f}, should be about {want[0]:.3f}): the temperature has no "
                "effect; divide the logits by it before the softmax (dividing the softmax's "
                "output is undone when the probabilities are normalised)"
            )
        if _close(freq, np.full_like(want, 1 / want.size), 2 * LOGITS.size):
            tools.fail(
                f"at temperature {temperature} every id was drawn about as often as the others "
                f"(id 0: {freq[0]:.3f}, should be about {want[0]:.3f}): draw along the last axis "
                "(the vocabulary) from the row's own logits"
            )
        at = int(np.argmax(np.abs(freq - want)))
        tools.fail(
            f"at temperature {temperature} id {at} was drawn with frequency {freq[at]:.3f}; "
            f"softmax(logits / T) gives it {want[at]:.3f}"
        )


# Draws of 64 rows with several likely ids (softmax(LOGITS): 0.56, 0.21, 0.13, 0.08, 0.03).
# Two calls of a correct sampler with different keys agree on all 64 rows with a chance of
# (sum of p^2)^64 = 0.3823^64 < 2e-27; some two of the 64 calls (2016 pairs), below 4e-24.
KEY_CALLS = 64
KEY_ROWS = 64


@sample.check(gate=True)
def check_sample_reads_its_key(ctx):
    """The same key gives the same draws twice; 64 different keys give 64 different draws."""
    keys = _keys(ctx, KEY_CALLS)
    logits = _tiled(LOGITS, KEY_ROWS)
    first, again = _draws(ctx, logits, 1.0, None, keys[:1] * 2)
    if not np.array_equal(first, again):
        tools.fail(
            "the same key gave different draws on two calls: draw with the key you are given "
            "(jax.random.categorical(key, ...)), and nothing else random (no NumPy random, no "
            "clock)"
        )
    draws = np.concatenate([first[None], _draws(ctx, logits, 1.0, None, keys[1:])])
    distinct = len(np.unique(draws, axis=0))
    if distinct == 1:
        tools.fail(
            f"your draws are the same for {KEY_CALLS} different keys: the key decides the "
            "draws; sample with the key you are given (jax.random.categorical(key, ...)), not "
            "a key of your own (PRNGKey(0)) or fixed numbers"
        )
    if distinct < KEY_CALLS:
        tools.fail(
            f"{KEY_CALLS} different keys gave only {distinct} different draws of {KEY_ROWS} "
            "rows: every bit of the key should count; sample with the key you are given "
            "(jax.random.categorical(key, ...))"
        )


@sample.check
def check_sample_keeps_the_top_k(ctx):
    """With top_k=2 only the two largest logits are drawn, in their softmax's proportion."""
    freq = _frequencies(ctx, LOGITS, 1.0, 2, _keys(ctx, KEYS))
    outside = freq[2:].sum()
    if outside > 0:  # never, for a correct sampler: their probability is 0
        tools.fail(
            f"with top_k=2 ids outside the 2 largest logits were drawn ({outside:.1%} of the "
            "draws): give every logit below the k-th largest -inf"
        )
    want = _softmax(LOGITS[:2])
    if not _close(freq[:2], want, 2) or freq[1] == 0:
        tools.fail(
            f"with top_k=2 ids 0 and 1 should be drawn {want[0]:.3f} and {want[1]:.3f} of the "
            f"time; yours: {freq[0]:.3f} and {freq[1]:.3f} (keep the k-th largest logit itself)"
        )


@sample.check
def check_sample_temperature_with_top_k(ctx):
    """With top_k=3 and temperature 0.5 together, the draws follow softmax(top 3 logits / 0.5)."""
    freq = _frequencies(ctx, LOGITS, 0.5, 3, _keys(ctx, KEYS))
    if freq[3:].sum() > 0:
        tools.fail(
            f"with top_k=3 and temperature 0.5, ids outside the 3 largest logits were drawn "
            f"({freq[3:].sum():.1%} of the draws): the top k must hold with a temperature too"
        )
    want = _softmax(LOGITS[:3] / 0.5)
    if _close(freq[:3], want, 3):
        return
    if _close(freq[:3], _softmax(LOGITS[:3]), 3):
        tools.fail(
            f"with top_k=3 and temperature 0.5 your draws follow softmax of the 3 largest "
            f"logits at temperature 1 (id 0: {freq[0]:.3f}, should be about {want[0]:.3f}): "
            "the temperature is lost when top_k is set; keep dividing the logits by it"
        )
    at = int(np.argmax(np.abs(freq[:3] - want)))
    tools.fail(
        f"with top_k=3 and temperature 0.5 id {at} was drawn with frequency {freq[at]:.3f}; "
        f"softmax(top 3 logits / 0.5) gives it {want[at]:.3f}"
    )


@sample.check
def check_sample_rows_are_independent(ctx):
    """Each row is drawn from its own logits: rows that favour different ids get them."""
    rng = ctx.rng()
    favourite = rng.integers(0, VOCAB, size=8)
    logits = np.where(np.arange(VOCAB) == favourite[:, None], 50.0, 0.0).astype(np.float32)
    got = tools.expect_array(
        tools.jitted(ctx.student.sample_next, 2, 3)(logits, ctx.key(7), 1.0, None),
        "the sampled ids",
        shape=(8,),
        axes="(B,)",
    )
    if not np.array_equal(got, favourite):
        tools.fail(
            f"rows whose logits put everything on ids {favourite.tolist()} drew "
            f"{np.asarray(got).tolist()}: sample along the last axis (the vocabulary), one id "
            "per row"
        )
