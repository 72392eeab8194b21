"""Graded checks of practical 2, the classifier: ``masked_pool`` and ``TransformerClassifier``
(embedding, positions, encoder, pooling over real tokens, one logit per review)."""

from __future__ import annotations

import numpy as np

from m2l_nlp.config import ClassifierConfig
from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.practicals.practical2 import common
from m2l_nlp.grading.practicals.practical2.common import FF, VOCAB, B, D, H, S

# --------------------------------------------------------------------------------------------
# 8. classifier

clf = common.EXERCISES["classifier"]
POOLINGS = ("mean", "max", "mean_max")


def _pool_inputs(rng):
    x = tools.normal(rng, 3, 6, 4)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], np.int32)
    return x, mask


@clf.check(gate=True, covers=("masked_pool",))
def check_pool_matches_reference(ctx):
    """`masked_pool` matches the reference for mean, max and mean_max (incl. an empty row)."""
    x, mask = _pool_inputs(ctx.rng())
    for pooling in POOLINGS:
        want = tools.jitted(ctx.ref.masked_pool, 2)(x, mask, pooling)
        got = tools.jitted(ctx.student.masked_pool, 2)(x, mask, pooling)
        name = f"masked_pool(..., {pooling!r}) of 3 reviews, the last one empty (all padding)"
        tools.expect_array(got, name, shape=want.shape, axes="(B, D or 2D)")
        tools.expect_close(got, want, name, hint="The last review (all padding) pools to zeros.")


@clf.check
def check_pool_ignores_padding(ctx):
    """Padding never changes the pooled vector, an empty review pools to zeros."""
    rng = ctx.rng()
    x, mask = _pool_inputs(rng)
    noisy = np.where(mask[..., None] == 0, 100.0 + 50 * tools.normal(rng, *x.shape), x).astype(
        np.float32
    )
    for pooling in POOLINGS:
        got = tools.expect_array(
            tools.jitted(ctx.student.masked_pool, 2)(noisy, mask, pooling),
            f"masked_pool(..., {pooling!r})",
        )
        tools.expect_close(
            got,
            tools.jitted(ctx.ref.masked_pool, 2)(x, mask, pooling),
            f"masked_pool(..., {pooling!r}) with large values at padding",
            hint="Pool over the real tokens only: a mean divides by their number (at least 1), "
            "a max ignores padding, and an empty review gives zeros.",
        )


@clf.check
def check_pool_bad_name(ctx):
    """An unknown pooling name raises `ValueError`."""
    x, mask = _pool_inputs(ctx.rng())
    try:
        ctx.student.masked_pool(x, mask, "sum")
    except ValueError:
        return
    tools.fail("masked_pool(x, mask, 'sum') should raise ValueError naming the allowed poolings")


def _clf_config(pooling: str, p: float = 0.1) -> ClassifierConfig:
    return ClassifierConfig(
        vocab_size=VOCAB,
        num_layers=2,
        num_heads=H,
        d_model=D,
        d_ff=FF,
        p_dropout=p,
        max_len=12,
        pooling=pooling,
    )


@tools.builder
def _clf(p: float, is_train: bool, pooling: str = "mean"):
    config = _clf_config(pooling, p)

    def build(ns):
        return lambda ids, mask: ns.TransformerClassifier(config, name="classifier")(
            ids, mask, is_train
        )

    return build


CLASSIFIER = tools.WithDropout(
    _clf, lambda rng: common.ids_and_mask(rng, 4), "TransformerClassifier"
)


@clf.check(gate=True, covers=("TransformerClassifier",))
def check_classifier_matches_reference(ctx):
    """Logits `(B,)` match the reference for every pooling (evaluation, under jax.jit)."""
    ids, mask = common.ids_and_mask(ctx.rng())
    for pooling in POOLINGS:
        tools.compare_module(
            ctx,
            _clf(0.1, False, pooling),
            ids,
            mask,
            names=(f"the logits (pooling {pooling!r})",),
            hint="Embed, add positions, encode with the mask, pool with config.pooling over "
            "real tokens, then the head; return one logit per review `(B,)` (drop the last "
            "axis).",
        )


@clf.check
def check_classifier_padding_invariance(ctx):
    """The same review padded to different lengths, with junk ids at padding, gets one logit."""
    rng = ctx.rng()
    ids, mask = common.ids_and_mask(rng)
    long_ids = np.concatenate([ids, rng.integers(1, VOCAB, size=(B, 4))], 1).astype(np.int32)
    long_mask = np.concatenate([mask, np.zeros((B, 4), np.int32)], 1)
    long_ids[:, :S] = np.where(mask == 0, rng.integers(1, VOCAB, size=(B, S)), ids)
    for pooling in ("mean", "mean_max"):
        build = _clf(0.1, False, pooling)
        params = tools.perturb(tools.run_haiku(build, ctx.ref, None, ids, mask), rng)
        short = tools.expect_array(
            tools.run_haiku(build, ctx.student, params, ids, mask), "the logits"
        )
        longer = tools.run_haiku(build, ctx.student, params, long_ids, long_mask)
        tools.expect_close(
            longer,
            short,
            f"the logits of the same reviews padded further (pooling {pooling!r})",
            versus="your logits with less padding",
            hint="Padding must not change the prediction: pass the mask to the embedding and "
            "the encoder, and pool over real tokens only.",
        )


@clf.check
def check_classifier_dropout(ctx):
    """Dropout in training only; evaluation needs no random key."""
    CLASSIFIER.expect_only_in_training(ctx)


@clf.check
def check_classifier_training_matches_reference(ctx):
    """Training logits (p_dropout=0.5) of 4 reviews are the reference's."""
    CLASSIFIER.expect_trains_like(
        ctx,
        hint="The positional encoding and the encoder get is_train, and they hold all the "
        "dropout: none on the embedding, the pooled vector or the logits.",
    )
