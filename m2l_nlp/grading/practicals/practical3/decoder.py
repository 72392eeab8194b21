"""Graded checks of practical 3, the decoder: ``causal_mask``, ``decoder_block`` and
``transformer_decoder``."""

from __future__ import annotations

import numpy as np

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import CheckFailure, slip
from m2l_nlp.grading.practicals import stacks
from m2l_nlp.grading.practicals.practical3 import common
from m2l_nlp.grading.practicals.practical3.common import FF, B, D, H, S

# --------------------------------------------------------------------------------------------
# 1. causal_mask

causal = common.EXERCISES["causal_mask"]


def _additive(mask: np.ndarray) -> str:
    """What hides the future in an additive mask (0 where a key is visible, -inf or a very
    negative number where hidden, the kind PyTorch adds to the scores); '' if it is not one."""
    if mask.ndim != 2 or mask.shape[0] != mask.shape[1] or mask.shape[0] < 2:
        return ""
    hidden = mask < -1e3  # -inf, -1e9, finfo.min, ...
    if not (mask[~hidden] == 0).all() or not np.array_equal(~hidden, np.tril(np.ones_like(hidden))):
        return ""
    return "-inf" if np.isinf(mask[hidden]).all() else "a very negative number"


def _additive_slip(mask: np.ndarray) -> str:
    """The message for an additive causal mask ('' if ``mask`` is not one)."""
    hides = _additive(mask)
    if not hides:
        return ""
    return slip(
        "causal_mask/additive-mask",
        f"yours is an additive mask (0 where a key is visible, {hides} for the future), the "
        "kind that PyTorch adds to the scores. Here a mask says which keys are visible: 1 where "
        "query i may see key j (j <= i), 0 for the future, as int32; scaled_dot_product turns "
        "the 0s into very negative scores itself",
    )


def _slip(ctx, got: np.ndarray) -> str:
    """The slip behind the wrong mask ``got``, judged on causal_mask(S) where that works:
    causal_mask(1) is [[0]] for several slips, one row too few to tell them apart."""
    try:
        full = np.asarray(tools.jitted(ctx.student.causal_mask, 0)(S), np.float64)
    except Exception:  # noqa: BLE001 - the checks report that error themselves
        full = None
    if full is None or full.shape != (S, S):
        full = np.asarray(got, np.float64)
    return _additive_slip(full) or _mask_slip((full != 0).astype(np.float64))


def _mask_slip(got: np.ndarray) -> str:
    """The typical slip behind a wrong causal mask, in words ('' if none is recognised)."""
    n = got.shape[0]
    if n > 1 and np.array_equal(got, np.triu(np.ones((n, n)), 1)):
        return slip(
            "causal_mask/future-marked-with-1",
            "yours marks the future with 1, as PyTorch's boolean attn_mask does (True = "
            "hidden); here 1 means visible: 1 where query i may see key j (j <= i), 0 for "
            "the future",
        )
    if np.array_equal(got, np.triu(np.ones((n, n)))):
        return slip(
            "causal_mask/upper-triangle",
            "yours is the upper triangle: every query sees the future and not the past (jnp.tril)",
        )
    if np.array_equal(got, np.tril(np.ones((n, n)), -1)):
        return slip(
            "causal_mask/diagonal-hidden",
            "the diagonal is 0: a position cannot see itself, and the first position then "
            "sees nothing at all (keep the diagonal)",
        )
    if np.array_equal(got, np.tril(np.ones((n, n)), 1)):
        return slip(
            "causal_mask/one-step-into-the-future",
            "query i also sees key i + 1: the mask is off by one, one step into the future",
        )
    if np.array_equal(got, np.ones((n, n))):
        return slip(
            "causal_mask/nothing-hidden",
            "every entry is 1: nothing is hidden, so every position sees the future",
        )
    return ""


@causal.check(gate=True)
def check_causal_mask_matches_reference(ctx):
    """`causal_mask(S)` is the `(S, S)` lower triangle, diagonal included."""
    for n in (1, S):
        want = np.asarray(ctx.ref.causal_mask(n))
        got = tools.expect_array(
            tools.jitted(ctx.student.causal_mask, 0)(n),
            f"causal_mask({n})",
            shape=(n, n),
            axes="(S, S)",
            finite=False,
        )
        if not np.array_equal(got != 0, want != 0):
            named = _slip(ctx, got)
            i, j = (int(a[0]) for a in np.nonzero((got != 0) != (want != 0)))
            tools.fail(
                f"causal_mask({n})[{i}, {j}] is {got[i, j]}, should be {want[i, j]} (query {i} "
                f"{'may' if want[i, j] else 'may not'} see key {j}). {named}".rstrip()
            )


@causal.check
def check_causal_mask_values(ctx):
    """The mask holds 0 and 1 only, and its first row lets the first position see itself."""
    got = tools.expect_array(
        tools.jitted(ctx.student.causal_mask, 0)(S), "causal_mask(S)", shape=(S, S), finite=False
    )
    additive = _additive_slip(np.asarray(got, np.float64))
    if additive:
        tools.fail(f"causal_mask(S) holds {sorted(set(got.ravel().tolist()))}: {additive}")
    tools.expect_array(got, "causal_mask(S)")
    if not np.isin(got, (0, 1)).all():
        tools.fail(
            f"causal_mask should hold 0 and 1 only; yours holds {sorted(set(got.ravel()))[:5]}"
        )
    if got[0, 0] == 0:
        tools.fail("causal_mask(S)[0, 0] is 0: the first position would attend to nothing at all")


# --------------------------------------------------------------------------------------------
# 2. decoder_block

block = common.EXERCISES["decoder_block"]


@tools.builder
def _block(p: float, is_train: bool):
    def build(ns):
        return lambda x, mask: ns.DecoderBlock(D, H, FF, p, name="block")(x, mask, is_train)

    return build


def _vectors_mask(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A block's inputs: token vectors `(B, S, D)` and a padding mask `(B, S)`."""
    return tools.normal(rng, B, S, D), common.padded(rng)


BLOCK = tools.WithDropout(_block, _vectors_mask, "DecoderBlock")


def _weights_slip(weights: np.ndarray, mask: np.ndarray) -> str:
    """What a block's attention weights `(B, h, S, S)` show: keys in the future or padding."""
    n = weights.shape[-1]
    future = np.triu(np.ones((n, n), bool), 1)
    if weights.shape[-2:] != (n, n) or weights.ndim != 4:
        return ""
    if np.abs(weights[..., future]).max() > 1e-6:
        return slip(
            "decoder_block/no-causal-mask",
            "Your attention weights give queries weight on later keys: apply the causal mask "
            "(causal_mask) in the self-attention.",
        )
    if np.abs(weights * (mask[:, None, None, :] == 0)).max() > 1e-6:
        return slip(
            "decoder_block/padding-mask-dropped",
            "Your attention weights give padding keys weight: a key must be allowed by both "
            "the causal mask and the padding mask (multiply them into one (B, S, S) mask).",
        )
    return ""


_POST_NORM = (
    "This block normalises after each residual (post-LayerNorm): "
    "x = norm_1(x + dropout(attention(x))), then x = norm_2(x + dropout(feed_forward(x)))."
)


def _norm_slip(ctx, build, params, x, mask, got) -> str:
    """Name a LayerNorm in the wrong place: the reference's weights for norm_1(x) (the norm
    before the sub-layers), or its output with norm_1 and norm_2 swapped; '' if neither."""
    name = {key.rsplit("/", 1)[-1]: key for key in params}
    if "norm_1" not in name or "norm_2" not in name:
        return ""
    swapped = {
        **params,
        name["norm_1"]: params[name["norm_2"]],
        name["norm_2"]: params[name["norm_1"]],
    }
    try:
        pre = tools.run_haiku(
            build, ctx.ref, params, common.layer_norm(x, params[name["norm_1"]]), mask
        )
        swap = tools.run_haiku(build, ctx.ref, swapped, x, mask)
    except Exception:  # noqa: BLE001 - answers recorded before these questions were asked
        return ""
    if _same(got[1], pre[1]):
        return slip(
            "decoder_block/pre-layernorm",
            "Your attention weights are the reference's for norm_1(x): yours normalises before "
            f"each sub-layer (pre-LayerNorm). {_POST_NORM}",
        )
    if _same(got[0], swap[0]):
        return slip(
            "decoder_block/norms-swapped",
            f"Yours swaps norm_1 and norm_2: norm_1 follows the attention. {_POST_NORM}",
        )
    return ""


def _same(got, want) -> bool:
    try:
        got = np.asarray(got, np.float64)
    except (TypeError, ValueError):
        return False
    return got.shape == np.shape(want) and np.allclose(got, want, atol=1e-4, rtol=1e-4)


@block.check(gate=True)
def check_block_matches_reference(ctx):
    """Evaluation output and weights match the reference, with padding (under jax.jit)."""
    rng = ctx.rng()
    x, mask = tools.normal(rng, B, S, D), common.padded(rng)
    build = _block(0.1, False)
    params = tools.perturb(tools.run_haiku(build, ctx.ref, None, x, mask), ctx.rng("params"))
    want = tools.run_haiku(build, ctx.ref, params, x, mask)
    got = tools.run_haiku(build, ctx.student, params, x, mask)
    if not isinstance(got, tuple) or len(got) != 2:
        tools.fail("DecoderBlock should return a tuple (output, attention weights)")
    weights = tools.expect_array(
        got[1], "the attention weights", shape=(B, H, S, S), axes="(B, h, S, S)"
    )
    if ctx.recording:  # the hint's questions, recorded for a handout
        _norm_slip(ctx, build, params, x, mask, want)
    try:
        tools.expect_close(
            weights, want[1], "the attention weights", hint=_weights_slip(weights, mask)
        )
        tools.expect_close(got[0], want[0], "the output of DecoderBlock")
    except CheckFailure as failure:  # the hint costs two runs of the reference: only now
        hint = _norm_slip(ctx, build, params, x, mask, got) or (
            "" if str(failure).startswith("the attention weights") else _POST_NORM
        )
        raise CheckFailure(f"{failure} {hint}".rstrip()) from None


@block.check
def check_block_reads_no_future(ctx):
    """Changing the inputs after position t leaves the output at positions 0..t unchanged."""
    _expect_reads_no_future(ctx, _block(0.1, False), "DecoderBlock", with_weights=True)


def _expect_reads_no_future(ctx, build, what: str, with_weights: bool) -> None:
    """``build``'s output at positions 0..t, on unpadded vectors and perturbed parameters,
    does not change with the inputs after t (``with_weights``: the output is the first of
    the module's ``(output, weights)``)."""
    rng = ctx.rng()
    x = tools.normal(rng, B, S, D)
    mask = np.ones((B, S), np.int32)
    params = tools.perturb(tools.run_haiku(build, ctx.ref, None, x, mask), ctx.rng("params"))

    def run(inputs):
        out = tools.run_haiku(build, ctx.student, params, inputs, mask)
        return out[0] if with_weights and isinstance(out, tuple) else out

    common.expect_no_future(run, x, rng, what)


@block.check
def check_block_dropout(ctx):
    """Dropout on in training, off in evaluation (no random key needed), p=0 is a no-op."""
    BLOCK.expect_only_in_training(ctx)


@block.check
def check_block_training_matches_reference(ctx):
    """Training output (p_dropout=0.5) is the reference's: dropout on each sub-layer's output."""
    BLOCK.expect_trains_like(
        ctx,
        hint="Dropout goes on each sub-layer's output (the attention's, the feed-forward's), "
        "once, before the residual is added; the feed-forward gets is_train.",
    )


# --------------------------------------------------------------------------------------------
# 3. transformer_decoder

stack = common.EXERCISES["transformer_decoder"]


@tools.builder
def _decoder(layers: int, maps: bool):
    def build(ns):
        def forward(x, mask):
            module = ns.TransformerDecoder(layers, H, D, FF, 0.1, name="decoder")
            return module.get_attention_maps(x, mask) if maps else module(x, mask, False)

        return forward

    return build


@tools.builder
def _decoder_of_3(p: float, is_train: bool):
    def build(ns):
        return lambda x, mask: ns.TransformerDecoder(3, H, D, FF, p, name="decoder")(
            x, mask, is_train
        )

    return build


DECODER = tools.WithDropout(_decoder_of_3, _vectors_mask, "TransformerDecoder")


@stack.check(gate=True)
def check_decoder_matches_reference(ctx):
    """A 3-block decoder's evaluation output matches the reference (under jax.jit)."""
    DECODER.expect_evaluation_matches(
        ctx, hint="Apply every block, in order, each to the previous block's output, with the mask."
    )


@stack.check
def check_decoder_attention_maps(ctx):
    """`get_attention_maps` returns one `(B, h, S, S)` map per block, as the reference."""
    x, mask = _vectors_mask(ctx.rng())
    params = tools.perturb(
        tools.run_haiku(_decoder(3, False), ctx.ref, None, x, mask), ctx.rng("params")
    )
    want = tools.run_haiku(_decoder(3, True), ctx.ref, params, x, mask)
    got = tools.run_haiku(_decoder(3, True), ctx.student, params, x, mask)
    if not isinstance(got, list | tuple) or len(got) != 3:
        count = len(got) if isinstance(got, list | tuple) else "not a list"
        tools.fail(f"get_attention_maps of 3 blocks should return 3 maps; yours gave {count}")
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        tools.expect_close(
            g, w, f"the attention map of block {i}", hint="Each block reads the last one's output."
        )


@stack.check
def check_decoder_reads_no_future(ctx):
    """Through 3 blocks, the output at positions 0..t ignores the inputs after t."""
    _expect_reads_no_future(ctx, _decoder(3, False), "TransformerDecoder", with_weights=False)


@stack.check
def check_decoder_training_matches_reference(ctx):
    """Training output (p_dropout=0.5) of 3 blocks is the reference's."""
    DECODER.expect_trains_like(ctx, hint=stacks.NO_DROPOUT_OF_ITS_OWN)
