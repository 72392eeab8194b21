"""Hidden checks of practical 3: graded by the autograder only, never shipped to students
(see the hidden checks of practical 2 for the rules they follow)."""

from __future__ import annotations

import numpy as np

from m2l_nlp.grading.checks.registry import exercise
from m2l_nlp.grading.checks.tools import (
    expect_array,
    expect_close,
    fail,
    jitted,
    normal,
    perturb,
    run_haiku,
)
from m2l_nlp.grading.practicals.practical3.common import D, H
from m2l_nlp.grading.practicals.practical3.decoder import _block
from m2l_nlp.grading.practicals.practical3.language_model import (
    _draws,
    _frequencies_off,
    _keys,
    _softmax,
)
from m2l_nlp.grading.practicals.practical3.translation import (
    BLOCK_RETURNS,
    END,
    _decode_greedy,
    _greedy_inputs,
)
from m2l_nlp.grading.practicals.practical3.translation import _block as _translation_block
from m2l_nlp.grading.practicals.practical3.writing import RETURNS, _cached

PRACTICAL = "practical3_translation"

longer = exercise(
    "decoder_beyond_the_examples",
    PRACTICAL,
    points=10,
    targets=("DecoderBlock", "next_token_loss", "sample_next", "attend_with_cache"),
    title="the decoder on longer texts, the loss on a larger vocabulary, sampling among 37 "
    "ids and top-1 sampling, a cache filled to the end of its window",
    hidden=True,
)


@longer.check(gate=True, covers=("DecoderBlock",))
def check_block_on_longer_texts(ctx):
    """`DecoderBlock` on 40 positions with rows of 40, 17 and 1 characters matches the reference."""
    rng = ctx.rng()
    x = normal(rng, 3, 40, D)
    mask = (np.arange(40)[None, :] < np.array([40, 17, 1])[:, None]).astype(np.int32)
    build = _block(0.1, False)
    params = perturb(run_haiku(build, ctx.ref, None, x, mask), ctx.rng("params"))
    want = run_haiku(build, ctx.ref, params, x, mask)
    got = run_haiku(build, ctx.student, params, x, mask)
    if not isinstance(got, tuple) or len(got) != 2:
        fail("DecoderBlock should return a tuple (output, attention weights)")
    expect_close(got[1], want[1], "the attention weights (40 positions)")
    expect_close(got[0], want[0], "the output (40 positions)")


@longer.check(gate=True, covers=("next_token_loss",))
def check_loss_on_a_larger_vocabulary(ctx):
    """The loss on 90 characters and rows of 30, 9 and 2 characters matches the reference."""
    rng = ctx.rng()
    mask = (np.arange(30)[None, :] < np.array([30, 9, 2])[:, None]).astype(np.int32)
    ids = rng.integers(1, 90, size=(3, 30)).astype(np.int32) * mask
    logits = 3 * normal(rng, 3, 30, 90)
    want = jitted(ctx.ref.next_token_loss)(logits, ids, mask)
    got = expect_array(jitted(ctx.student.next_token_loss)(logits, ids, mask), "the loss", shape=())
    expect_close(got, want, "the loss (90 characters, rows of 30, 9 and 2)")


@longer.check(gate=True, covers=("sample_next",))
def check_top_one_is_the_arg_max(ctx):
    """With top_k=1 every row draws its largest logit, at any temperature."""
    rng = ctx.rng()
    logits = normal(rng, 64, 37)
    for temperature in (0.3, 3.0):
        got = jitted(ctx.student.sample_next, 2, 3)(logits, ctx.key(11), temperature, 1)
        got = expect_array(got, "the sampled ids", shape=(64,))
        if not np.array_equal(got, logits.argmax(-1)):
            fail(
                f"with top_k=1 (temperature {temperature}) a row drew another id than its "
                "largest logit"
            )


@longer.check(gate=True, covers=("sample_next",))
def check_sampling_among_37_ids(ctx):
    """37 ids in 8 orders, temperature 0.7, top_k=10: the draws of 16 keys differ from key to
    key and follow softmax(the row's 10 largest logits / 0.7) (each row's own largest)."""
    rng = ctx.rng()
    # ranked values 0.1 to 0.3 apart: no tie at the 10th; the 10 kept are drawn 0.36 to 0.007
    values = np.sort(np.arange(37) * 0.2 + rng.uniform(0, 0.1, 37))[::-1].astype(np.float32)
    ranks = np.stack([rng.permutation(37) for _ in range(8)])  # ranks[o, j]: id j's rank
    rows = np.arange(2048) % 8  # row b holds the values in order rows[b]
    draws = _draws(ctx, values[ranks[rows]], 0.7, 10, _keys(ctx, 16))
    drawn = ranks[rows, draws]  # the rank of each drawn id in its own row
    if drawn.max() >= 10:
        fail(
            "with top_k=10 an id outside the 10 largest logits of its row was drawn: the top k "
            "are each row's own, along the last axis"
        )
    # for a correct sampler two keys' 2048 draws agree with a chance of (sum of p^2)^2048,
    # below 0.36^2048 (sum of p^2 <= max p); for some 2 of 16 keys, 120 times that
    if len(np.unique(draws, axis=0)) < len(draws):
        fail("two different keys gave the same draws: sample with the key you are given")
    freq = np.bincount(drawn.ravel(), minlength=10) / drawn.size
    want = _softmax(values[:10] / 0.7)
    off = _frequencies_off(freq, want, drawn.size, 10)  # a chance below 1e-6 for a correct one
    if off.any():
        at = int(np.argmax(np.where(off, np.abs(freq - want), 0)))
        fail(
            f"with top_k=10 and temperature 0.7 the logit ranked {at + 1} in its row was drawn "
            f"with frequency {freq[at]:.4f}; softmax(the 10 largest logits / 0.7) gives it "
            f"{want[at]:.4f}"
        )


@longer.check(gate=True, covers=("attend_with_cache",))
def check_cache_to_the_end_of_the_window(ctx):
    """A window of 40 whose last 7 positions are new (3 rows): output and cache match the
    reference."""
    rng = ctx.rng()
    x = normal(rng, 3, 7, D)
    keys, values = normal(rng, 3, H, 40, D // H), normal(rng, 3, H, 40, D // H)
    at = np.int32(33)
    params = perturb(run_haiku(_cached(), ctx.ref, None, x, keys, values, at), ctx.rng("params"))
    want = run_haiku(_cached(), ctx.ref, params, x, keys, values, at)
    got = run_haiku(_cached(), ctx.student, params, x, keys, values, at)
    if not isinstance(got, tuple) or len(got) != 3:
        fail(RETURNS)
    expect_close(got[1], want[1], "the cache's keys (positions 33..39 of 40)")
    expect_close(got[2], want[2], "the cache's values (positions 33..39 of 40)")
    expect_close(got[0], want[0], "the output (positions 33..39 of 40)")


translating = exercise(
    "translation_beyond_the_examples",
    PRACTICAL,
    points=10,
    targets=("TranslationBlock", "sequence_loss", "greedy_decode"),
    title="the translation block on long sentences, the loss on a larger vocabulary, "
    "greedy decoding of many rows",
    hidden=True,
)


@translating.check(gate=True, covers=("TranslationBlock",))
def check_translation_block_on_long_sentences(ctx):
    """`TranslationBlock` on targets of 30 and sources of 41 positions (rows of 30/41, 12/5
    and 1/1 real tokens) matches the reference."""
    rng = ctx.rng()
    x, memory = normal(rng, 3, 30, D), normal(rng, 3, 41, D)
    target_mask = (np.arange(30)[None, :] < np.array([30, 12, 1])[:, None]).astype(np.int32)
    source_mask = (np.arange(41)[None, :] < np.array([41, 5, 1])[:, None]).astype(np.int32)
    inputs = (x, target_mask, memory, source_mask)
    build = _translation_block(0.1, False)
    params = perturb(run_haiku(build, ctx.ref, None, *inputs), ctx.rng("params"))
    want = run_haiku(build, ctx.ref, params, *inputs)
    got = run_haiku(build, ctx.student, params, *inputs)
    if not isinstance(got, tuple) or len(got) != 3:
        fail(BLOCK_RETURNS)
    for name, g, w in zip(
        ("the output", "the self-attention", "the cross-attention"), got, want, strict=True
    ):
        expect_close(g, w, f"{name} (30 target and 41 source positions)")


@translating.check(gate=True, covers=("sequence_loss",))
def check_sequence_loss_on_a_larger_vocabulary(ctx):
    """The loss on 300 tokens and rows of 25, 4 and 0 real tokens matches the reference."""
    rng = ctx.rng()
    mask = (np.arange(25)[None, :] < np.array([25, 4, 0])[:, None]).astype(np.int32)
    targets = rng.integers(1, 300, size=(3, 25)).astype(np.int32) * mask
    logits = 3 * normal(rng, 3, 25, 300)
    want = jitted(ctx.ref.sequence_loss)(logits, targets, mask)
    got = expect_array(
        jitted(ctx.student.sequence_loss)(logits, targets, mask), "the loss", shape=()
    )
    expect_close(got, want, "the loss (300 tokens, rows of 25, 4 and 0)")


@translating.check(gate=True, covers=("greedy_decode",))
def check_greedy_decode_of_many_rows(ctx):
    """Greedy decoding of 12 rows for 20 positions, most ending at different positions, some
    at the first one."""
    inputs = _greedy_inputs(ctx.rng(), 12, 20)
    inputs[1][[2, 5], 0, END] = 90.0  # two rows end at once
    want = _decode_greedy(ctx, 20, *inputs, namespace=ctx.ref)
    got = _decode_greedy(ctx, 20, *inputs)
    if not np.array_equal(got, want):
        row = int(np.flatnonzero((got != want).any(1))[0])
        fail(f"row {row} of 12 decodes to {got[row].tolist()}, greedy gives {want[row].tolist()}")
