"""Graded checks of practical 3, part 2, the translator: ``translation_block``,
``transformer``, ``shift_right``, ``sequence_loss`` and ``greedy_decode``."""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
import numpy as np

from m2l_nlp.config import TransformerConfig
from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import CheckFailure, slip
from m2l_nlp.grading.practicals.practical3 import common
from m2l_nlp.grading.practicals.practical3.common import FF, VOCAB, B, D, H

T, SRC = 5, 7  # target and source lengths differ, so (B, h, T, S) is not (B, h, T, T)
END = 2  # the end token's id in the decoding checks
CONFIG = TransformerConfig(
    vocab_size=VOCAB, num_layers=2, num_heads=H, d_model=D, d_ff=FF, p_dropout=0.1, max_len=8
)
BLOCK_RETURNS = (
    "TranslationBlock should return (output, self-attention weights, cross-attention weights)"
)

# --------------------------------------------------------------------------------------------
# 10. translation_block

block = common.EXERCISES["translation_block"]


@tools.builder
def _block(p: float, is_train: bool):
    def build(ns):
        def forward(x, target_mask, memory, source_mask):
            module = ns.TranslationBlock(D, H, FF, p, name="block")
            return module(x, target_mask, memory, source_mask, is_train)

        return forward

    return build


def _block_inputs(rng: np.random.Generator):
    """A target `(B, T, D)` and a source memory `(B, SRC, D)`, both padded."""
    return (
        tools.normal(rng, B, T, D),
        common.padded(rng, B, T),
        tools.normal(rng, B, SRC, D),
        common.padded(rng, B, SRC),
    )


def _call_block(ctx, params, *inputs, build=None):
    got = tools.run_haiku(build or _block(0.1, False), ctx.student, params, *inputs)
    if not isinstance(got, tuple) or len(got) != 3:
        tools.fail(BLOCK_RETURNS)
    return got


_PRE_NORM = slip(
    "translation_block/pre-layernorm",
    "Your self-attention weights are the reference's for norm_1(x): yours normalises before "
    "each sub-layer (pre-LayerNorm). This block normalises after each residual "
    "(post-LayerNorm): x = norm_1(x + dropout(self-attention(x))), then "
    "x = norm_2(x + dropout(cross-attention(x, memory))), then "
    "x = norm_3(x + dropout(feed_forward(x))).",
)


def _pre_norm_weights(ctx, params, inputs) -> np.ndarray | None:
    """The reference's self-attention weights for norm_1(x): those of a block that normalises
    before its sub-layers (None where they cannot be had)."""
    name = {key.rsplit("/", 1)[-1]: key for key in params}
    if "norm_1" not in name:
        return None
    x, *rest = inputs
    try:
        normed = common.layer_norm(x, params[name["norm_1"]])
        return np.asarray(tools.run_haiku(_block(0.1, False), ctx.ref, params, normed, *rest)[1])
    except Exception:  # noqa: BLE001 - answers recorded before this question was asked
        return None


def _cross_slip(weights: np.ndarray, source_mask: np.ndarray) -> str:
    """What wrong cross-attention weights show: keys from the decoder, or source padding read."""
    if weights.ndim == 4 and weights.shape[-1] == T and T != SRC:
        return slip(
            "translation_block/cross-attention-keys-from-the-decoder",
            f"Your cross-attention weights have {T} keys, the target's length: its keys and "
            f"values must come from the encoder's output (memory, {SRC} positions), the "
            "queries from the decoder.",
        )
    if (
        weights.shape[-1] == SRC
        and np.abs(weights * (source_mask[:, None, None, :] == 0)).max() > 1e-6
    ):
        return slip(
            "translation_block/source-padding-read",
            "Your cross-attention gives the source's padding weight: pass source_mask to the "
            "cross-attention (the target's mask belongs to the self-attention).",
        )
    return ""


def _self_slip(weights: np.ndarray, target_mask: np.ndarray) -> str:
    if weights.shape[-2:] != (T, T):
        return ""
    if np.abs(weights[..., np.triu(np.ones((T, T), bool), 1)]).max() > 1e-6:
        return slip(
            "translation_block/self-attention-reads-ahead",
            "Your self-attention reads later target tokens: apply the causal mask there.",
        )
    if np.abs(weights * (target_mask[:, None, None, :] == 0)).max() > 1e-6:
        return slip(
            "translation_block/target-padding-read",
            "Your self-attention gives the target's padding weight: combine the causal mask "
            "with target_mask.",
        )
    return ""


@block.check(gate=True)
def check_translation_block_matches_reference(ctx):
    """Evaluation output and both attention maps match the reference, with padding on both
    sides and a source longer than the target (under jax.jit)."""
    rng = ctx.rng()
    inputs = _block_inputs(rng)
    params = tools.perturb(
        tools.run_haiku(_block(0.1, False), ctx.ref, None, *inputs), ctx.rng("params")
    )
    want = tools.run_haiku(_block(0.1, False), ctx.ref, params, *inputs)
    got = _call_block(ctx, params, *inputs)
    if ctx.recording:  # the hint's question, recorded for a handout
        _pre_norm_weights(ctx, params, inputs)
    own = tools.expect_array(got[1], "the self-attention weights", axes="(B, h, T, T)")
    try:
        tools.expect_close(
            own, want[1], "the self-attention weights", hint=_self_slip(own, inputs[1])
        )
    except CheckFailure as failure:  # the hint costs a run of the reference: only now
        pre = _pre_norm_weights(ctx, params, inputs)
        if pre is None or pre.shape != own.shape or not np.allclose(own, pre, 1e-4, 1e-4):
            raise
        raise CheckFailure(f"{failure} {_PRE_NORM}") from None
    cross = tools.expect_array(got[2], "the cross-attention weights", axes="(B, h, T, S)")
    tools.expect_close(
        cross,
        want[2],
        "the cross-attention weights",
        hint=_cross_slip(cross, inputs[3])
        or "Your self-attention is right: the cross-attention's queries are the output of "
        "the first sub-layer (after norm_1), its keys and values the encoder's memory.",
    )
    tools.expect_close(
        got[0],
        want[0],
        "the output of TranslationBlock",
        hint="Residual around each sub-layer, then LayerNorm: norm_1 after the self-attention, "
        "norm_2 after the cross-attention (which reads the output of norm_1), norm_3 after "
        "the feed-forward.",
    )


@block.check
def check_translation_block_ignores_source_padding(ctx):
    """Changing the encoder's output at the source's padding changes nothing, and every
    cross-attention row sums to 1 over the source."""
    rng = ctx.rng()
    x, target_mask, memory, source_mask = _block_inputs(rng)
    params = tools.perturb(
        tools.run_haiku(_block(0.1, False), ctx.ref, None, x, target_mask, memory, source_mask),
        ctx.rng("params"),
    )
    got = _call_block(ctx, params, x, target_mask, memory, source_mask)
    tools.expect_rows_sum_to_one(got[2], "the cross-attention weights")
    noisy = memory + 5 * tools.normal(rng, *memory.shape) * (source_mask == 0)[..., None]
    moved = _call_block(ctx, params, x, target_mask, noisy, source_mask)
    out = tools.expect_array(got[0], "the output")
    change = float(np.abs(tools.expect_array(moved[0], "the output") - out).max())
    if change > 1e-5:
        tools.fail(
            f"changing the encoder's output at the source's padding changed the block's "
            f"output by up to {change:.3g}: the cross-attention must hide the source's padding "
            "(source_mask)"
        )
    if (
        float(
            np.abs(out - _call_block(ctx, params, x, target_mask, 2 * memory, source_mask)[0]).max()
        )
        < 1e-6
    ):
        tools.fail(
            "the block's output does not depend on the encoder's output: the cross-attention "
            "reads its keys and values from memory"
        )


@block.check
def check_translation_block_reads_no_future(ctx):
    """Changing the target after position t leaves the output at positions 0..t unchanged."""
    rng = ctx.rng()
    x, _, memory, source_mask = _block_inputs(rng)
    target_mask = np.ones((B, T), np.int32)
    params = tools.perturb(
        tools.run_haiku(_block(0.1, False), ctx.ref, None, x, target_mask, memory, source_mask),
        ctx.rng("params"),
    )

    def run(inputs):
        return _call_block(ctx, params, inputs, target_mask, memory, source_mask)[0]

    common.expect_no_future(run, x, rng, "TranslationBlock")


@tools.builder
def _block_with_cache():
    """The student's block on the whole target, then one position at a time with a cache."""

    def build(ns):
        def forward(x, memory, source_mask, positions):
            module = ns.TranslationBlock(D, H, FF, 0.1, name="block")
            ones = np.ones(x.shape[:2], np.int32)
            whole = module(x, ones, memory, source_mask, False)[0]

            def read(piece, cache, at):
                out, cache, _ = module(piece, ones[:, :1], memory, source_mask, False, cache, at)
                return out, cache

            return whole, common.one_by_one(
                read, x, positions, common.empty_cache(len(x), CONFIG.max_len)
            )

        return forward

    return build


@block.check
def check_translation_block_reads_with_a_cache(ctx):
    """Given a cache, one target position at a time, your block gives its own output on the
    whole target."""
    x, _, memory, source_mask = _block_inputs(ctx.rng())
    common.expect_reading_with_caches(
        ctx,
        _block_with_cache(),
        (x, memory, source_mask, np.arange(T, dtype=np.int32)),
        "the output",
        "(B, T, D)",
        "your TranslationBlock on the whole target",
        "Given a cache, the self-attention is attend_with_cache(self.self_attention, x, "
        "cache, at) (no mask: the cache holds real tokens only), the rest as without it; "
        "return the new cache in place of the self-attention weights.",
    )


@block.check
def check_translation_block_dropout(ctx):
    """Dropout on in training, off in evaluation (no random key needed), p=0 is a no-op."""
    tools.expect_dropout_only_in_training(
        ctx, _block, *_block_inputs(ctx.rng()), what="TranslationBlock"
    )


@block.check
def check_translation_block_training_matches_reference(ctx):
    """Training output (p_dropout=0.5) is the reference's: dropout on each sub-layer's output."""
    tools.expect_module_trains_like(
        ctx,
        _block,
        *_block_inputs(ctx.rng()),
        what="TranslationBlock",
        hint="Dropout goes on each sub-layer's output (the self-attention's, the "
        "cross-attention's, the feed-forward's), once, before the residual is added; the "
        "feed-forward gets is_train.",
    )


# --------------------------------------------------------------------------------------------
# 11. transformer

model = common.EXERCISES["transformer"]


@tools.builder
def _transformer(part: str, p: float = CONFIG.p_dropout, is_train: bool = False):
    config = dataclasses.replace(CONFIG, p_dropout=p)

    def build(ns):
        def forward(source, source_mask, target, target_mask):
            module = ns.Transformer(config, name="transformer")
            if part == "encode":
                return module.encode(source, source_mask, is_train)
            return module(source, source_mask, target, target_mask, is_train)

        return forward

    return build


@tools.builder
def _decode():
    """`decode` alone, over a memory of numbers: it must read the memory it is given."""

    def build(ns):
        def forward(memory, source_mask, target, target_mask):
            module = ns.Transformer(CONFIG, name="transformer")
            return module.decode(target, target_mask, memory, source_mask, False)

        return forward

    return build


def _pair(rng: np.random.Generator):
    source, source_mask = common.char_batch(rng, B, SRC)
    target, target_mask = common.char_batch(rng, B, T)
    return source, source_mask, target, target_mask


@model.check(gate=True)
def check_transformer_matches_reference(ctx):
    """Logits `(B, T, V)` of padded targets over padded sources match the reference."""
    inputs = _pair(ctx.rng())
    build = _transformer("whole")
    params = tools.perturb(tools.run_haiku(build, ctx.ref, None, *inputs), ctx.rng("params"))
    want = tools.run_haiku(build, ctx.ref, params, *inputs)
    got = tools.expect_array(
        tools.run_haiku(build, ctx.student, params, *inputs), "the logits", axes="(B, T, V)"
    )
    hint = (
        "encode the source (embedding with its mask, positions, the encoder), then decode: "
        "embed the target, add positions, every block with both masks and the memory, then "
        "`head`."
    )
    if got.shape == want.shape and not np.allclose(got, want, atol=1e-5, rtol=1e-4):
        source, source_mask, target, target_mask = inputs
        more = [np.pad(a, ((0, 0), (0, 1))) for a in (source, source_mask)]
        moved = tools.run_haiku(build, ctx.student, params, *more, target, target_mask)
        if not np.allclose(tools.expect_array(moved, "the logits"), got, atol=1e-5, rtol=1e-4):
            hint = (
                "Your logits change when the source gets more padding: the source's padding "
                "must stay hidden, in the encoder and in every block's cross-attention "
                "(source_mask)."
            )
    tools.expect_close(got, want, "the logits of Transformer", hint=hint)


@model.check
def check_transformer_encode_and_decode(ctx):
    """`encode` gives the reference's memory `(B, S, D)`, and `decode` the reference's
    logits over a given memory."""
    tools.compare_module(
        ctx,
        _transformer("encode"),
        *_pair(ctx.rng()),
        names=("the output of encode",),
        hint="Embed the source ids with the source mask, add the positions, then run the "
        "encoder with the source mask.",
    )
    rng = ctx.rng("decode")
    _, source_mask, target, target_mask = _pair(rng)
    tools.compare_module(
        ctx,
        _decode(),
        tools.normal(rng, B, SRC, D),
        source_mask,
        target,
        target_mask,
        names=("the logits of decode",),
        hint="Embed the target ids with the target mask, add the positions, then every block "
        "(target mask, memory, source mask) and `head`; decode reads the memory it is given.",
    )


@model.check
def check_transformer_reads_no_future_and_no_padding(ctx):
    """The logits at target positions 0..t ignore the target after t, and more padding of
    the source changes nothing."""
    rng = ctx.rng()
    source, source_mask, target, _ = _pair(rng)
    target = np.where(target == 0, 1, target)
    target_mask = np.ones_like(target)
    build = _transformer("whole")
    params = tools.perturb(
        tools.run_haiku(build, ctx.ref, None, source, source_mask, target, target_mask),
        ctx.rng("params"),
    )
    common.expect_no_future(
        lambda t: tools.run_haiku(build, ctx.student, params, source, source_mask, t, target_mask),
        target,
        rng,
        "Transformer",
    )
    base = tools.expect_array(
        tools.run_haiku(build, ctx.student, params, source, source_mask, target, target_mask),
        "the logits",
    )
    more = np.pad(source, ((0, 0), (0, 1)))
    more_mask = np.pad(source_mask, ((0, 0), (0, 1)))
    padded_more = tools.run_haiku(build, ctx.student, params, more, more_mask, target, target_mask)
    tools.expect_close(
        padded_more,
        base,
        "the logits with one more padding position in the source",
        versus="the same source padded less",
        hint="The source's padding must not change the translation: pass source_mask to the "
        "encoder and to every block's cross-attention.",
    )


@tools.builder
def _decode_with_caches():
    """The student's `decode` on the whole target, then one position at a time with caches."""

    def build(ns):
        def forward(memory, source_mask, target, positions):
            module = ns.Transformer(CONFIG, name="transformer")
            ones = np.ones(target.shape, np.int32)
            whole = module.decode(target, ones, memory, source_mask, False)

            def read(piece, caches, at):
                mask = ones[:, :1]
                return module.decode(piece, mask, memory, source_mask, False, caches=caches, at=at)

            caches = [common.empty_cache(len(target), CONFIG.max_len)] * CONFIG.num_layers
            return whole, common.one_by_one(read, target, positions, caches)

        return forward

    return build


@model.check
def check_transformer_decodes_with_caches(ctx):
    """`decode` with caches, one target position at a time, gives your own logits on the
    whole target."""
    rng = ctx.rng()
    _, source_mask, target, _ = _pair(rng)
    target = np.where(target == 0, 1, target)
    common.expect_reading_with_caches(
        ctx,
        _decode_with_caches(),
        (tools.normal(rng, B, SRC, D), source_mask, target, np.arange(T, dtype=np.int32)),
        "the logits of decode",
        "(B, T, V)",
        "your decode on the whole target",
        "Given caches, add the positional rows of positions at, at + 1, ... "
        "(jax.lax.dynamic_slice_in_dim(self.positional.table, at, T)), hand block i caches[i] "
        "with `at`, and return the logits and the blocks' new caches.",
    )


@model.check
def check_transformer_training_matches_reference(ctx):
    """Training logits (p_dropout=0.5) are the reference's."""
    tools.expect_trains_like(
        ctx,
        tools.draws_of(_transformer("whole", tools.DRAW_P, True)),
        *_pair(ctx.rng()),
        init=_transformer("whole"),
        draws=8 * tools.DRAWS,  # many dropout sites: one is a small part of the noise
        what="Transformer",
        hint="encode and decode get is_train and hand it on (the positional encoding, the "
        "encoder, every block); the dropout is theirs: none on the embedding or the logits.",
    )


# --------------------------------------------------------------------------------------------
# 12. shift_right

shift = common.EXERCISES["shift_right"]


EXAMPLE = "see the example in the exercise's text (the target, then the input)"


def _shift_slip(got: np.ndarray, ids: np.ndarray, first: int) -> str:
    if got.shape != ids.shape:
        return f"the shape should stay {ids.shape}: put `first` in front and drop the last column"
    if np.array_equal(got, ids):
        return slip(
            "shift_right/target-not-shifted",
            "the input is the target itself: position t would read the very token it must "
            "predict, and the model would learn to copy, not to translate",
        )
    if np.array_equal(got[:, :-1], ids[:, 1:]):
        return slip(
            "shift_right/shifted-left",
            "the ids moved left: shift them right, behind the start token",
        )
    if np.array_equal(got[:, 1:], ids[:, 1:]):
        return slip(
            "shift_right/only-column-0-changed",
            "only column 0 changed: every other column t should hold ids[:, t - 1]",
        )
    if np.array_equal(got[:, 1:], ids[:, :-1]):
        return f"column 0 should hold `first` ({first})"
    return ""


@shift.check(gate=True)
def check_shift_right(ctx):
    """Padded target ids `(B, T)` shifted behind a start token, and a mask behind a 1."""
    rng = ctx.rng()
    ids, mask = common.char_batch(rng, 3, T)
    for array, first, what in ((ids, 1, "the ids"), (mask, 1, "the mask"), (ids, 7, "the ids")):
        want = np.concatenate([np.full((len(array), 1), first), array[:, :-1]], axis=1)
        got = tools.expect_array(
            tools.jitted(ctx.student.shift_right, 1)(array, first), f"shift_right of {what}"
        )
        if got.shape != want.shape or not np.array_equal(got, want):
            tools.fail(
                f"shift_right({what}, first={first}) is not the start token followed by "
                f"columns 0..T-2: {_shift_slip(got, array, first) or EXAMPLE}"
            )


@shift.check
def check_shift_right_keeps_the_dtype(ctx):
    """Integer ids stay integers (they index an embedding table)."""
    ids, _ = common.char_batch(ctx.rng(), 2, T)
    got = tools.jitted(ctx.student.shift_right, 1)(ids.astype(np.int32), 1)
    if not np.issubdtype(np.asarray(got).dtype, np.integer):
        tools.fail(
            f"shift_right of int32 ids returned {np.asarray(got).dtype}: keep the ids' dtype "
            "(jnp.full(..., first, ids.dtype))"
        )


# --------------------------------------------------------------------------------------------
# 13. sequence_loss

seq_loss = common.EXERCISES["sequence_loss"]


def _seq_batch(rng: np.random.Generator):
    targets, mask = common.char_batch(rng, 3, T + 2)
    mask[1, 2:] = 0  # rows of different lengths: a per-row mean then differs
    return 2 * tools.normal(rng, 3, T + 2, VOCAB), targets * mask, mask


@seq_loss.check(gate=True)
def check_sequence_loss_matches_reference(ctx):
    """The mean loss over real target tokens matches the reference (under jax.jit)."""
    logits, targets, mask = _seq_batch(ctx.rng())
    common.expect_loss_of_reference(
        ctx,
        "sequence_loss",
        (logits, targets, mask),
        lambda reference, want: _sequence_slips(reference, want, logits, targets, mask),
        "the mean cross-entropy of the logits at t against target t, over the positions whose "
        "mask is 1",
    )


def _sequence_slips(reference, want: float, logits, targets, mask) -> dict[str, float]:
    """The typical slips' values, each the reference's loss of other inputs."""
    rows = [
        float(reference(logits[r : r + 1], targets[r : r + 1], mask[r : r + 1])) for r in range(3)
    ]
    return {
        slip(
            "sequence_loss/padding-counted",
            "padding is counted: a position whose mask is 0 is no target (weigh each position "
            "by its mask)",
        ): float(reference(logits, targets, np.ones_like(mask))),
        slip(
            "sequence_loss/targets-shifted-twice",
            "the targets are shifted a second time (logits[:, :-1] against targets[:, 1:]): "
            "shift_right already moved the decoder's input, so the logits at t score target t",
        ): float(reference(logits[:, :-1], targets[:, 1:], mask[:, 1:])),
        slip(
            "sequence_loss/mean-of-row-means",
            "each row's mean is averaged over the rows: a long sentence and a short one then "
            "weigh the same; average over all the real tokens",
        ): float(np.mean(rows)),
        slip(
            "sequence_loss/divided-by-every-position",
            "the sum is divided by every position, padding included: divide by the number of "
            "real tokens",
        ): want * mask.sum() / mask.size,
    }


@seq_loss.check
def check_sequence_loss_of_nothing_is_zero(ctx):
    """A batch with no real token has loss 0, not NaN; a sure, right model has loss 0."""
    logits, targets, mask = _seq_batch(ctx.rng())
    got = tools.expect_array(
        tools.jitted(ctx.student.sequence_loss)(logits, targets, np.zeros_like(mask)),
        "the loss",
        shape=(),
        finite=False,
    )
    if not np.isfinite(got) or abs(float(got)) > 1e-6:
        tools.fail(
            f"with no real token the loss should be 0; yours is {float(got)} (divide by the "
            "number of real tokens, at least 1)"
        )
    sure = 50.0 * np.eye(VOCAB, dtype=np.float32)[targets]
    got = tools.expect_array(
        tools.jitted(ctx.student.sequence_loss)(sure, targets, mask), "the loss", shape=()
    )
    if abs(float(got)) > 1e-4:
        tools.fail(
            f"logits that put everything on the right token at every position give the loss "
            f"{float(got):.4g}; it should be 0: score the logits at t against target t"
        )


# --------------------------------------------------------------------------------------------
# 14. greedy_decode

greedy = common.EXERCISES["greedy_decode"]


def _table_step(tokens, at, state):
    """A stand-in model: the logits of the next token depend on the token read, the
    position and the number of calls so far (carried in the state)."""
    table, by_position, drift, calls = state
    rows = jnp.arange(tokens.shape[0])
    logits = table[rows, tokens] + jnp.take(by_position, at, axis=1) + drift * calls
    return logits, (table, by_position, drift, calls + 1)


@tools.builder
def _greedy(max_len: int):
    def build(ns):
        def forward(table, by_position, drift, start):
            state = (table, by_position, drift, np.float32(0))
            return ns.greedy_decode(_table_step, state, start, max_len, END)

        return forward

    return build


def _greedy_inputs(rng: np.random.Generator, rows: int, max_len: int):
    """A stand-in model whose rows end at different positions (one never ends)."""
    vocab = 9
    table = 3 * tools.normal(rng, rows, vocab, vocab)
    table[..., END] -= 20  # the end token only where the position says so
    by_position = tools.normal(rng, rows, max_len, vocab)
    for row in range(rows - 1):
        by_position[row, 1 + (2 * row) % (max_len - 1), END] = 60.0
    drift = tools.normal(rng, vocab)
    start = np.full(rows, 1, np.int32)
    return table, by_position, drift, start


def _decode_greedy(ctx, max_len, table, by_position, drift, start, namespace=None):
    """The ids the student's ``greedy_decode`` (or ``namespace``'s) writes for the stand-in."""
    ns = ctx.student if namespace is None else namespace
    got = tools.run_haiku(_greedy(max_len), ns, {}, table, by_position, drift, start)
    return tools.expect_array(
        got, "the decoded ids", shape=(len(start), max_len), axes="(B, max_len)"
    )


def _greedy_slip(got: np.ndarray, want: np.ndarray) -> str:
    """What wrong ids show ('' if nothing recognised): a row going on after its end token,
    or rows stopping at another row's end."""
    for row in got:
        ends = np.flatnonzero(row == END)
        if len(ends) and (row[ends[0] + 1 :] != 0).any():
            return slip(
                "greedy_decode/goes-on-after-its-end",
                "a sentence goes on after its end token: once a row has written end_id, write "
                "padding (0) in it, whatever the step says",
            )
    for row, right in zip(got, want, strict=True):
        if END not in row and (row == 0).any() and (right != 0).all():
            return slip(
                "greedy_decode/stops-at-another-rows-end",
                "a row stops without writing its end token (when another row ended?): each "
                "row is done on its own, once it has written end_id",
            )
    return ""


@greedy.check(gate=True)
def check_greedy_decode_matches_the_loop(ctx):
    """On a stand-in model whose rows end at different positions, the ids are the arg-max
    at every step, fed back, with padding after each row's end token (under jax.jit)."""
    max_len = 7
    inputs = _greedy_inputs(ctx.rng(), 4, max_len)
    want = _decode_greedy(ctx, max_len, *inputs, namespace=ctx.ref)
    got = _decode_greedy(ctx, max_len, *inputs)
    if np.array_equal(got, want):
        return
    named = _greedy_slip(got, want)
    if named:
        tools.fail(f"the decoded ids differ from greedy decoding's: {named}")
    row = int(np.flatnonzero((got != want).any(1))[0])
    tools.fail(
        f"row {row} decodes to {got[row].tolist()}, greedy decoding gives {want[row].tolist()}: "
        "at every position take the arg-max of step's logits, write it in column `at`, feed "
        "it to the next call with the state it returned, and pad after the end token"
    )


@greedy.check
def check_greedy_decode_ends_every_row(ctx):
    """Every row holds padding only after its first end token, and the end token itself."""
    max_len = 9
    inputs = _greedy_inputs(ctx.rng(), 3, max_len)
    got = _decode_greedy(ctx, max_len, *inputs)
    for row in got:
        ends = np.flatnonzero(row == END)
        if len(ends) and (row[ends[0] + 1 :] != 0).any():
            tools.fail(
                f"a row reads {row.tolist()}: after its end token ({END}) it should hold "
                "padding (0) only"
            )
    if not (got == END).any(axis=1)[:-1].all():
        tools.fail(
            "a row whose model says the end token has none in your output: write the end "
            "token itself, then padding"
        )
