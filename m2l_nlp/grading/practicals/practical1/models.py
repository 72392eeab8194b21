"""Graded checks of practical 1, the models: ``mlp_classifier`` and ``lstm_classifier``.

The models are compared with the reference on the same (perturbed) haiku parameters, plus
properties that need no reference: padding never changes a result, dropout only in training.
"""

from __future__ import annotations

import numpy as np

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.practicals.practical1 import common


def _expect_one_logit_per_review(out, batch: int, what: str) -> None:
    """Both models give one float32 logit per review, `(B,)`."""
    tools.expect_array(
        out,
        f"the logits of {what}",
        shape=(batch,),
        dtype=np.float32,
        axes="(B,): drop the last axis of the head's (B, 1) output",
    )


# --------------------------------------------------------------------------------------------
# 4. mlp_classifier

mlp = common.EXERCISES["mlp_classifier"]
F_IN = 10


@tools.builder
def _mlp(hidden, p: float, is_train: bool):
    def build(ns):
        return lambda x: ns.MLPClassifier(hidden, p, name="mlp")(x, is_train)

    return build


@mlp.check
def check_mlp_shapes(ctx):
    """One float32 logit per review, `(B,)`, for 0, 1 and 2 hidden layers."""
    x = tools.normal(ctx.rng(), 5, F_IN)
    for hidden in ((), (8,), (8, 6)):
        build = _mlp(hidden, 0.5, False)
        params = tools.run_haiku(build, ctx.ref, None, x)
        out = tools.run_haiku(build, ctx.student, params, x)
        _expect_one_logit_per_review(out, 5, f"MLPClassifier(hidden_sizes={hidden})")


@mlp.check(gate=True)
def check_mlp_matches_reference(ctx):
    """Evaluation logits match the reference with the same params (under jax.jit)."""
    x = tools.normal(ctx.rng(), 5, F_IN)
    for hidden in ((8,), (8, 6)):
        tools.compare_module(
            ctx,
            _mlp(hidden, 0.5, False),
            x,
            names=(f"the logits of MLPClassifier(hidden_sizes={hidden})",),
            hint="Each hidden layer is linear then ReLU; the head is linear with no activation.",
        )


@mlp.check
def check_mlp_dropout(ctx):
    """Dropout in training only; evaluation needs no random key."""
    x = tools.normal(ctx.rng(), 5, F_IN)
    tools.expect_dropout_only_in_training(
        ctx, lambda p, t: _mlp((16, 8), p, t), x, what="MLPClassifier"
    )


# --------------------------------------------------------------------------------------------
# 5. lstm_classifier

lstm = common.EXERCISES["lstm_classifier"]
L_VOCAB, L_E, L_H = 17, 6, 5


@tools.builder
def _lstm(p: float, is_train: bool):
    def build(ns):
        return lambda ids, mask: ns.LSTMClassifier(L_VOCAB, L_E, L_H, p, name="lstm_classifier")(
            ids, mask, is_train
        )

    return build


@lstm.check
def check_lstm_shape(ctx):
    """One float32 logit per review, `(B,)` (with B != S, so the time axis is unambiguous)."""
    ids, mask = common.random_batch(ctx.rng(), 3, 7, L_VOCAB)
    build = _lstm(0.2, False)
    params = tools.run_haiku(build, ctx.ref, None, ids, mask)
    out = tools.run_haiku(build, ctx.student, params, ids, mask)
    _expect_one_logit_per_review(out, 3, "LSTMClassifier")


@lstm.check(gate=True)
def check_lstm_matches_reference_unpadded(ctx):
    """Without padding, the logits match the reference (same params, under jax.jit)."""
    ids = ctx.rng().integers(1, L_VOCAB, size=(3, 7)).astype(np.int32)
    tools.compare_module(
        ctx,
        _lstm(0.2, False),
        ids,
        np.ones_like(ids),
        names=("the logits of LSTMClassifier on reviews without padding",),
        hint="Run the LSTM over the time axis (axis 1 of ids) from position 0 to S - 1, "
        "starting from lstm.initial_state(B), and feed the `hidden` part of the final state "
        "(not `cell`) to the head.",
    )


@lstm.check(gate=True)
def check_lstm_matches_reference_padded(ctx):
    """With padding, the logits match the reference (same params, under jax.jit)."""
    ids, mask = common.random_batch(ctx.rng(), 4, 8, L_VOCAB)
    tools.compare_module(
        ctx,
        _lstm(0.2, False),
        ids,
        mask,
        names=("the logits of LSTMClassifier on padded reviews",),
        hint="Use the state after the last real token: keep the old state at padded steps.",
    )


@lstm.check
def check_lstm_padding_invariance(ctx):
    """The same reviews padded to different lengths, with junk ids at padding, get one logit."""
    rng = ctx.rng()
    ids, mask = common.random_batch(rng, 3, 6, L_VOCAB)
    build = _lstm(0.2, False)
    params = tools.perturb(tools.run_haiku(build, ctx.ref, None, ids, mask), rng)
    short = tools.expect_array(tools.run_haiku(build, ctx.student, params, ids, mask), "the logits")
    junk = rng.integers(1, L_VOCAB, size=(3, 9)).astype(np.int32)
    long_ids = np.concatenate([ids, junk[:, :5]], axis=1)
    long_ids[:, :6] = np.where(mask == 1, ids, junk[:, 5:8].repeat(2, axis=1))
    long_mask = np.concatenate([mask, np.zeros((3, 5), np.int32)], axis=1)
    longer = tools.run_haiku(build, ctx.student, params, long_ids, long_mask)
    tools.expect_close(
        longer,
        short,
        "the logits of the same reviews padded to 11 instead of 6 tokens",
        versus="your logits with 6 tokens",
        hint="Padding must not change the prediction: at a padded step keep the previous "
        "state (jnp.where with the mask), or read the state at the last real token.",
    )


@lstm.check
def check_lstm_dropout(ctx):
    """Dropout in training only; evaluation needs no random key."""
    ids, mask = common.random_batch(ctx.rng(), 3, 7, L_VOCAB)
    tools.expect_dropout_only_in_training(ctx, _lstm, ids, mask, what="LSTMClassifier")
