"""What the check modules of practical 3 share: the practical's name, the sizes of every
input, padded batches of characters, the test that no position reads the future, and the
reading of a module with key/value caches, one position at a time."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import exercises, slip

PRACTICAL = "practical3_translation"

# fmt: off
# The practical's exercises, one row each: name, points, targets (what the student writes),
# uses (earlier targets they call, replaced by the reference's while graded), title.
EXERCISES = exercises(PRACTICAL, (
    ("causal_mask", 5, ("causal_mask",), (),
     "1 where query i may see key j (j <= i), 0 for the future"),
    ("decoder_block", 15, ("DecoderBlock",),
     ("causal_mask", "MultiheadAttention", "PositionwiseFeedForward"),
     "masked self-attention (causal and padding), then feed-forward, post-LayerNorm"),
    ("transformer_decoder", 10, ("TransformerDecoder",), ("DecoderBlock",),
     "decoder blocks one after the other; the attention maps of each"),
    ("language_model", 15, ("CharLanguageModel",),
     ("TransformerDecoder", "MaskedEmbedding", "PositionalEncoding"),
     "embed, add positions, decode, a logit per character of the vocabulary"),
    ("next_token_loss", 10, ("next_token_loss",), (),
     "cross-entropy of each position's logits against the next character, real ones only"),
    ("sample_next", 10, ("sample_next",), (),
     "one id per row from softmax(logits / temperature), among the top k"),
    ("attention_cache", 10, ("attend_with_cache",), ("scaled_dot_product",),
     "self-attention of new positions only, their keys and values written into a cache; "
     "your language model read with caches"),
    ("translation_block", 15, ("TranslationBlock",),
     ("causal_mask", "MultiheadAttention", "PositionwiseFeedForward", "attend_with_cache"),
     "masked self-attention, cross-attention over the encoder's output, feed-forward"),
    ("transformer", 15, ("Transformer",),
     ("TranslationBlock", "TransformerEncoder", "attend_with_cache", "MaskedEmbedding",
      "PositionalEncoding"),
     "encode the source, decode the target over it, a logit per token of the vocabulary"),
    ("shift_right", 5, ("shift_right",), (),
     "the decoder's input: the start token, then the target without its last column"),
    ("sequence_loss", 10, ("sequence_loss",), (),
     "mean cross-entropy of every position's logits against its target, real ones only"),
    ("greedy_decode", 10, ("greedy_decode",), (),
     "the arg-max token at every position, fed back, until each sentence's end token"),
))
# fmt: on

B, S, D, H, FF = 2, 6, 12, 3, 20  # d_head = 4 != H, as in practical 2
VOCAB = 11  # a small character vocabulary (id 0 is padding)

# The axes of the main replies, named in the message when a student's reply does not fit the
# reference's (m2l_nlp.grading.checks.replies): a function's entry is its axes; a build's,
# keyed "module.build", the module it runs and its axes (a tuple: one per item of a tuple).
REPLY_AXES = {
    "causal_mask": "(S, S)",
    "sample_next": "(B,)",
    "shift_right": "(B, T)",
    "decoder._block": ("DecoderBlock", ("(B, S, D)", "(B, h, S, S)")),
    "decoder._decoder": ("TransformerDecoder", "(B, S, D)"),
    "language_model._lm": ("CharLanguageModel", "(B, S, V)"),
    "writing._cached": ("attend_with_cache", ("(B, S, D)", "(B, h, L, D/h)", "(B, h, L, D/h)")),
    "translation._block": ("TranslationBlock", ("(B, T, D)", "(B, h, T, T)", "(B, h, T, S)")),
    "translation._transformer": ("Transformer", None),
    "translation._decode": ("Transformer.decode", "(B, T, V)"),
    "translation._greedy": ("greedy_decode", "(B, L)"),
}


def padded(rng: np.random.Generator, batch: int = B, length: int = S) -> np.ndarray:
    """A padding mask `(batch, length)`: the first row full, the last one 2 shorter."""
    lengths = rng.integers(2, length + 1, size=batch)
    lengths[0] = length
    if batch > 1:
        lengths[-1] = length - 2
    return (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)


def char_batch(rng: np.random.Generator, batch: int = B, length: int = S):
    """Character ids `(batch, length)` (0 at padding) and their padding mask."""
    mask = padded(rng, batch, length)
    ids = rng.integers(1, VOCAB, size=(batch, length)).astype(np.int32) * mask
    return ids, mask


def expect_no_future(
    run: Callable[[np.ndarray], object], inputs: np.ndarray, rng: np.random.Generator, what: str
) -> None:
    """``run(inputs)`` at positions ``<= t`` does not change when the inputs after ``t`` do:
    each position reads itself and the past only. ``inputs`` is ``(B, S, ...)``."""
    t = inputs.shape[1] // 2
    changed = inputs.copy()
    if np.issubdtype(inputs.dtype, np.integer):  # other characters (ids 1 .. VOCAB - 1)
        changed[:, t + 1 :] = changed[:, t + 1 :] % (VOCAB - 1) + 1
    else:
        changed[:, t + 1 :] += rng.standard_normal(changed[:, t + 1 :].shape).astype(np.float32)
    before = tools.expect_array(run(inputs), f"the output of {what}")
    after = tools.expect_array(run(changed), f"the output of {what} (later inputs changed)")
    if before.shape != after.shape:
        tools.fail(f"the output of {what} changed shape when only the later inputs changed")
    moved = np.abs(before[:, : t + 1] - after[:, : t + 1]).max()
    if moved > 1e-5:
        tools.fail(
            f"changing only the inputs after position {t} changed the output of {what} at "
            f"positions 0..{t} (by up to {moved:.3g}): a position reads the future; the causal "
            "mask must hide every key after the query"
        )


def _agrees(got: float, want: float) -> bool:
    return abs(got - want) <= 1e-4 * max(1.0, abs(want))


def expect_loss_of_reference(
    ctx: Any,
    loss: str,
    batch: tuple,
    slips: Callable[[Callable, float], dict[str, float]],
    otherwise: str,
) -> None:
    """The student's loss function ``loss`` gives the reference's value on ``batch`` (both
    under jax.jit). Where it does not, the message names the slip whose value it gives:
    ``slips(reference, want)`` maps the words of each typical slip to its value, the
    reference's loss of inputs altered alike (no loss is computed here, where a student's
    code could import it); none matching, ``otherwise`` says what the loss should be."""
    reference = tools.jitted(getattr(ctx.ref, loss))
    want = float(reference(*batch))
    # asked of the reference before the student's answer is known: a handout's recorded
    # answers then hold them, and a wrong loss is named there as at the autograder
    values = slips(reference, want)
    got = tools.expect_array(tools.jitted(getattr(ctx.student, loss))(*batch), "the loss", shape=())
    if _agrees(float(got), want):
        return
    for words, value in values.items():
        if _agrees(float(got), value):
            tools.fail(f"the loss is {float(got):.6g}, the reference's {want:.6g}: {words.strip()}")
    tools.fail(f"the loss is {float(got):.6g}, the reference's {want:.6g}: {otherwise}")


def layer_norm(x: np.ndarray, norm: dict) -> np.ndarray:
    """hk.LayerNorm over the last axis (its epsilon, 1e-5) with the parameters ``norm``: what
    a block's sub-layer reads where the student normalises before it (pre-LayerNorm)."""
    x = np.asarray(x, np.float64)
    centred = x - x.mean(-1, keepdims=True)
    scaled = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + 1e-5)
    return (scaled * norm["scale"] + norm["offset"]).astype(np.float32)


class Cache(NamedTuple):
    """A block's keys and values, as the practical's ``LayerCache`` holds them."""

    keys: Any
    values: Any


def empty_cache(batch: int, width: int) -> Cache:
    """A cache of zeros over ``width`` positions, ``(batch, H, width, D / H)`` each."""
    zeros = jnp.zeros((batch, H, width, D // H), jnp.float32)
    return Cache(zeros, zeros)


def one_by_one(read: Callable, inputs: Any, positions: Any, caches: Any) -> Any:
    """``read(piece, caches, at) -> (output, caches)`` over every position of ``inputs
    (B, S, ...)``, one at a time from ``caches``, ``at`` read from ``positions`` (an array:
    traced under jit, as while writing); the outputs joined along the positions."""
    outs = []
    for at in range(inputs.shape[1]):
        got = read(inputs[:, at : at + 1], caches, positions[at])
        if not (isinstance(got, tuple) and len(got) == 2):
            raise TypeError("given caches, the module should return its output and the new caches")
        out, caches = got
        outs.append(out)
    return jnp.concatenate(outs, axis=1)


def cache_slip(whole: np.ndarray, at_once: np.ndarray | None, what: str, fix: str) -> str:
    """The hint for a reading with caches that is not the module's own on the whole text."""
    if at_once is not None and np.allclose(at_once, whole, atol=1e-5, rtol=1e-4):
        return slip(
            "any/wrong-only-one-position-at-a-time",
            f"Read all at once from position 0, your {what} is right; one position at a "
            f"time it is not: {fix}",
        )
    return fix


def expect_reading_with_caches(
    ctx: Any, build: Any, inputs: tuple, what: str, axes: str, versus: str, hint: str
) -> None:
    """``build``'s forward gives the student's module on the whole text and read one position
    at a time with caches: the two must agree (``what`` names the output, ``axes`` its
    shape, the last of ``inputs`` being the positions)."""
    params = tools.perturb(tools.run_haiku(build, ctx.ref, None, *inputs), ctx.rng("params"))
    whole, by_position = tools.run_haiku(build, ctx.student, params, *inputs)
    whole = tools.expect_array(whole, what)
    tools.expect_close(
        tools.expect_array(by_position, what, shape=whole.shape, axes=axes),
        whole,
        f"{what} one position at a time, with caches",
        versus=versus,
        hint=hint,
    )
