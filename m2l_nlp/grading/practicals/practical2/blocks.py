"""Graded checks of practical 2, the encoder's building blocks: ``positionwise_feed_forward``,
``encoder_block`` and ``transformer_encoder``."""

from __future__ import annotations

import numpy as np

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.practicals import stacks
from m2l_nlp.grading.practicals.practical2 import common
from m2l_nlp.grading.practicals.practical2.common import FF, B, D, H, S

# --------------------------------------------------------------------------------------------
# 4. positionwise_feed_forward

ffn = common.EXERCISES["positionwise_feed_forward"]


@tools.builder
def _ffn(p: float, is_train: bool):
    def build(ns):
        return lambda x: ns.PositionwiseFeedForward(D, FF, p, name="ffn")(x, is_train)

    return build


FFN = tools.WithDropout(_ffn, lambda rng: (tools.normal(rng, B, S, D),), "PositionwiseFeedForward")


def _ffn_hint(ctx, x) -> str:
    """If the evaluation output is right once the dropout rate is 0, the slip is dropout in
    evaluation mode (a fixed key included); otherwise the layers themselves."""
    params = tools.perturb(tools.run_haiku(_ffn(0.1, False), ctx.ref, None, x), ctx.rng("params"))
    try:
        rate_0 = tools.run_haiku(_ffn(0.0, False), ctx.student, params, x)
        want = tools.run_haiku(_ffn(0.0, False), ctx.ref, params, x)
        rate_0, want = np.asarray(rate_0), np.asarray(want)
        # same shapes first: a reply broadcast against the reference could take gigabytes
        dropout_only = rate_0.shape == want.shape and np.allclose(rate_0, want, atol=1e-4)
    except Exception:  # noqa: BLE001 - the comparison itself will say what is wrong
        dropout_only = False
    if dropout_only:
        return (
            "With p_dropout=0 yours matches, so dropout acts in evaluation mode: apply it only "
            "when is_train is True (and with hk.next_rng_key(), never a fixed key)."
        )
    return "Check the layers in order: Linear(d_ff), ReLU, Linear(d_model). Is the ReLU there?"


@ffn.check(gate=True)
def check_ffn_matches_reference(ctx):
    """Evaluation output `(B, S, D)` matches the reference (under jax.jit)."""
    x = tools.normal(ctx.rng(), B, S, D)
    hint = _ffn_hint(ctx, x)
    tools.compare_module(
        ctx, _ffn(0.1, False), x, names=("the output (evaluation mode)",), hint=hint
    )


@ffn.check
def check_ffn_eval_no_dropout(ctx):
    """Evaluation (`is_train=False`) needs no random key and is deterministic."""
    x = tools.normal(ctx.rng(), B, S, D)
    params = tools.run_haiku(_ffn(0.5, True), ctx.ref, None, x)
    first = tools.run_haiku(_ffn(0.5, False), ctx.student, params, x)
    second = tools.run_haiku(_ffn(0.5, False), ctx.student, params, x)
    tools.expect_array(first, "the output", shape=(B, S, D))
    tools.expect_close(second, first, "a second evaluation of the same input", versus="the first")


@ffn.check
def check_ffn_dropout(ctx):
    """Dropout is on in training (p=0.5 changes the output) and p=0 changes nothing."""
    FFN.expect_only_in_training(ctx)


@ffn.check
def check_ffn_training_matches_reference(ctx):
    """Training output (p_dropout=0.5) is the reference's: dropout on the hidden layer only."""
    FFN.expect_trains_like(
        ctx, hint="Dropout goes on the hidden layer (after the ReLU), once, and nowhere else."
    )


# --------------------------------------------------------------------------------------------
# 5. encoder_block

block = common.EXERCISES["encoder_block"]


@tools.builder
def _block(p: float, is_train: bool, return_attention: bool = False):
    def build(ns):
        def forward(x, mask):
            module = ns.EncoderBlock(D, H, FF, p, name="block")
            return module(x, mask, is_train=is_train, return_attention=return_attention)

        return forward

    return build


BLOCK = tools.WithDropout(_block, common.vectors_and_mask, "EncoderBlock")


@block.check(gate=True)
def check_block_matches_reference(ctx):
    """Evaluation output matches the reference, with a padding mask (under jax.jit)."""
    BLOCK.expect_evaluation_matches(
        ctx,
        hint="Residual around each sub-layer, then LayerNorm: norm_1 after attention, "
        "norm_2 after the feed-forward; pass the mask to the attention.",
    )


@block.check
def check_block_return_attention(ctx):
    """`return_attention=True` gives `(out, weights)`; `False` gives one array."""
    x, pad = common.vectors_and_mask(ctx.rng())
    tools.compare_module(
        ctx,
        _block(0.1, False, True),
        x,
        pad,
        names=("the output", "the attention weights"),
    )
    params = tools.run_haiku(_block(0.1, False), ctx.ref, None, x, pad)
    out = tools.run_haiku(_block(0.1, False), ctx.student, params, x, pad)
    tools.expect_array(out, "the output with return_attention=False", shape=(B, S, D))


@block.check
def check_block_post_layer_norm(ctx):
    """Output is layer-normalised: every token has mean 0 and variance 1 at initialisation."""
    rng = ctx.rng()
    x = 3.0 * tools.normal(rng, B, S, D) + 1.0
    params = tools.run_haiku(_block(0.1, False), ctx.ref, None, x, None)  # scale 1, offset 0
    out = tools.expect_array(
        tools.run_haiku(_block(0.1, False), ctx.student, params, x, None), "the output"
    )
    mean, var = out.mean(-1), out.var(-1)
    if np.abs(mean).max() > 1e-3 or np.abs(var - 1).max() > 1e-2:
        at = np.unravel_index(np.argmax(np.abs(var - 1) + np.abs(mean)), mean.shape)
        at = tuple(int(i) for i in at)
        tools.fail(
            f"the block's output should come out of a LayerNorm (post-LN: "
            f"LayerNorm(x + SubLayer(x))), so with fresh parameters each token has mean 0 and "
            f"variance 1; token {at} has mean {mean[at]:.3g} and variance {var[at]:.3g}"
        )


@block.check
def check_block_dropout(ctx):
    """Dropout on in training, off in evaluation (no random key needed), p=0 is a no-op."""
    BLOCK.expect_only_in_training(ctx)


@block.check
def check_block_permutation_equivariance(ctx):
    """Shuffling the tokens (and the mask) shuffles the output the same way."""
    rng = ctx.rng()
    x, pad = common.vectors_and_mask(rng)
    perm = rng.permutation(S)
    build = _block(0.1, False)
    params = tools.perturb(tools.run_haiku(build, ctx.ref, None, x, pad), rng)
    out = tools.expect_array(tools.run_haiku(build, ctx.student, params, x, pad), "the output")
    outp = tools.run_haiku(build, ctx.student, params, x[:, perm], pad[:, perm])
    tools.expect_close(
        outp,
        out[:, perm],
        "the output for shuffled tokens",
        versus="your output for the tokens in order, shuffled alike",
    )


SUBLAYER_DROPOUT = (
    "Dropout goes on each sub-layer's output (the attention's, the feed-forward's), once, "
    "before the residual is added; the feed-forward gets is_train."
)


@block.check
def check_block_training_matches_reference(ctx):
    """Training output (p_dropout=0.5) is the reference's: dropout on each sub-layer's output."""
    BLOCK.expect_trains_like(ctx, hint=SUBLAYER_DROPOUT)


# --------------------------------------------------------------------------------------------
# 6. transformer_encoder

encoder = common.EXERCISES["transformer_encoder"]
LAYERS = 3


@tools.builder
def _encoder(p: float, is_train: bool, maps: bool = False):
    def build(ns):
        def forward(x, mask):
            module = ns.TransformerEncoder(LAYERS, H, D, FF, p, name="encoder")
            if maps:
                return module.get_attention_maps(x, mask, is_train=is_train)
            return module(x, mask, is_train=is_train)

        return forward

    return build


ENCODER = tools.WithDropout(_encoder, common.vectors_and_mask, "TransformerEncoder")


@encoder.check(gate=True)
def check_encoder_matches_reference(ctx):
    """Evaluation output of 3 blocks matches the reference, with a mask (under jax.jit)."""
    ENCODER.expect_evaluation_matches(ctx, hint=stacks.IN_ORDER)


@encoder.check
def check_attention_maps(ctx):
    """`get_attention_maps` returns one `(B, h, S, S)` map per block, as the reference."""
    x, pad = common.vectors_and_mask(ctx.rng())
    stacks.expect_attention_maps(
        ctx, _encoder(0.1, False), _encoder(0.1, False, True), LAYERS, x, pad
    )


@encoder.check
def check_encoder_dropout(ctx):
    """`is_train` reaches the blocks: dropout in training, none in evaluation."""
    ENCODER.expect_only_in_training(ctx)


@encoder.check
def check_encoder_training_matches_reference(ctx):
    """Training output (p_dropout=0.5) of 3 blocks is the reference's."""
    ENCODER.expect_trains_like(ctx, hint=stacks.NO_DROPOUT_OF_ITS_OWN)
