"""Graded checks of practical 2, attention: ``scaled_dot_product``, ``masked_embedding``
(the token vectors that attention reads, zero at padding) and ``multihead_attention``."""

from __future__ import annotations

import numpy as np

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import CheckFailure, slip
from m2l_nlp.grading.practicals.practical2 import common
from m2l_nlp.grading.practicals.practical2.common import VOCAB, B, D, E, H, S

# --------------------------------------------------------------------------------------------
# 1. scaled_dot_product

sdp = common.EXERCISES["scaled_dot_product"]


@sdp.check
def check_shapes(ctx):
    """Output shapes for no and for two leading axes."""
    rng = ctx.rng()
    for lead in ((), (2, 3)):
        q, k, v = (
            tools.normal(rng, *lead, 4, 8),
            tools.normal(rng, *lead, 6, 8),
            tools.normal(rng, *lead, 6, 5),
        )
        out = tools.expect_tuple(
            tools.jitted(ctx.student.scaled_dot_product)(q, k, v), 2, "scaled_dot_product"
        )
        axes = "(..., S_q, d_v)" if lead else "(S_q, d_v)"
        tools.expect_array(out[0], "the values", shape=(*lead, 4, 5), dtype=np.float32, axes=axes)
        axes = "(..., S_q, S_k)" if lead else "(S_q, S_k)"
        tools.expect_array(out[1], "the attention weights", shape=(*lead, 4, 6), axes=axes)


@sdp.check(gate=True)
def check_matches_reference(ctx):
    """Values and weights match the reference, with and without a mask (under jax.jit)."""

    rng = ctx.rng()
    q, k, v = (
        tools.normal(rng, 2, 3, 4, 8),
        tools.normal(rng, 2, 3, 6, 8),
        tools.normal(rng, 2, 3, 6, 5),
    )
    mask = rng.integers(0, 2, size=(2, 3, 4, 6)).astype(np.int32)
    mask[..., 0] = 1  # every query sees at least one key
    for m in (None, mask):
        want = tools.jitted(ctx.ref.scaled_dot_product)(q, k, v, m)
        got = tools.expect_tuple(
            tools.jitted(ctx.student.scaled_dot_product)(q, k, v, m), 2, "scaled_dot_product"
        )
        label = "without a mask" if m is None else "with a mask"
        hint = _weights_hint(ctx, q, k, v, got[1]) if m is None else _MASKED_WEIGHTS_HINT
        tools.expect_close(got[1], want[1], f"the attention weights ({label})", hint=hint)
        tools.expect_close(got[0], want[0], f"the values ({label})")


_MASKED_WEIGHTS_HINT = (
    "Without a mask yours match, so look at the masking: before the softmax, give each "
    "hidden key (mask 0) a very negative score (not 0), and keep the scores where mask != 0."
)


def _weights_hint(ctx, q: np.ndarray, k: np.ndarray, v: np.ndarray, weights) -> str:
    """Name the likely slip when unmasked attention weights differ from the reference. The
    slips are the reference's weights for rescaled queries: scores not divided (q times
    sqrt(d_k)), or divided by d_k (q over sqrt(d_k))."""
    try:
        w = np.asarray(weights, np.float64)
    except (TypeError, ValueError):  # not numbers: expect_close says so
        return ""
    root = np.float32(np.sqrt(q.shape[-1]))
    for scaled, words in (
        (q * root, slip("scaled_dot_product/scores-not-divided", "without dividing the scores")),
        (q / root, slip("scaled_dot_product/scores-divided-by-d-k", "dividing them by d_k")),
    ):
        slipped = np.asarray(tools.jitted(ctx.ref.scaled_dot_product)(scaled, k, v)[1], np.float64)
        if w.shape == slipped.shape and np.allclose(w, slipped, atol=1e-5):
            return (
                f"Yours are the softmax of Q K^T {words}: divide them by sqrt(d_k), the "
                "square root of the size of q's last axis."
            )
    if w.shape == (*q.shape[:-1], k.shape[-2]) and not np.allclose(w.sum(-1), 1.0, atol=1e-4):
        return slip(
            "scaled_dot_product/softmax-over-another-axis",
            "Your rows do not sum to 1: take the softmax over the last axis (the keys).",
        )
    return (
        "Check that the scores are Q K^T divided by sqrt(d_k) (the size of q's last axis) "
        "and that the softmax runs over the last axis (the keys)."
    )


@sdp.check
def check_rows_sum_to_one(ctx):
    """Each row of weights is >= 0 and sums to 1 over the keys."""
    rng = ctx.rng()
    q, k, v = tools.normal(rng, 3, 4, 8), tools.normal(rng, 3, 7, 8), tools.normal(rng, 3, 7, 5)
    weights = tools.expect_tuple(
        tools.jitted(ctx.student.scaled_dot_product)(q, k, v), 2, "scaled_dot_product"
    )[1]
    tools.expect_array(weights, "the attention weights", shape=(3, 4, 7))
    tools.expect_rows_sum_to_one(weights, "the attention weights")


@sdp.check
def check_masked_keys_get_zero_weight(ctx):
    """Keys hidden by the mask get weight 0; visible keys share all the weight."""
    rng = ctx.rng()
    q, k, v = tools.normal(rng, 2, 4, 8), tools.normal(rng, 2, 6, 8), tools.normal(rng, 2, 6, 5)
    mask = np.array([[1, 1, 0, 1, 0, 0], [0, 1, 1, 1, 1, 1]], np.int32)[:, None, :]  # (B, 1, S_k)
    for m, label in ((mask, "an int 0/1"), (mask.astype(bool), "a boolean")):
        weights = tools.expect_tuple(
            tools.jitted(ctx.student.scaled_dot_product)(q, k, v, m), 2, "sdp"
        )[1]
        w = tools.expect_array(weights, "the attention weights", shape=(2, 4, 6), finite=False)
        hidden = np.broadcast_to(m == 0, w.shape)
        if (np.abs(w[hidden]) > 1e-6).any():
            at = tuple(int(i) for i in np.argwhere(hidden & (np.abs(w) > 1e-6))[0])
            tools.fail(
                f"with {label} mask, the key at index {at} is hidden (mask 0) but gets weight "
                f"{w[at]:.4g}; hidden keys must get weight 0. Replace their scores by a very "
                "negative number before the softmax (keep scores where mask != 0)"
            )
        plain = np.asarray(tools.jitted(ctx.ref.scaled_dot_product)(q, k, v)[1], np.float64)
        if not np.allclose(w.sum(-1), 1.0, atol=1e-4) and np.allclose(
            w, plain * ~hidden, atol=1e-5
        ):
            tools.fail(
                f"with {label} mask, hidden keys get weight 0 but the visible keys' weights no "
                "longer sum to 1: the mask is applied after the softmax. Mask the scores "
                "before it (a very negative score for hidden keys), so that the softmax shares "
                "all the weight among the visible keys"
            )
        tools.expect_rows_sum_to_one(w, f"the attention weights (with {label} mask)")


@sdp.check
def check_large_scores_stay_finite(ctx):
    """Scores in the thousands give finite weights and values (no overflow in exp)."""
    rng = ctx.rng()
    q, k, v = (
        30 * tools.normal(rng, 2, 4, 8),
        30 * tools.normal(rng, 2, 6, 8),
        tools.normal(rng, 2, 6, 5),
    )
    want = tools.jitted(ctx.ref.scaled_dot_product)(q, k, v)
    got = tools.expect_tuple(
        tools.jitted(ctx.student.scaled_dot_product)(q, k, v), 2, "scaled_dot_product"
    )
    hint = (
        "exp of a score above about 88 overflows float32 to inf, and inf / inf is NaN. "
        "jax.nn.softmax avoids this; if you wrote the softmax yourself, subtract each row's "
        "maximum score before exp (the softmax does not change)."
    )
    for i, name in ((1, "the attention weights"), (0, "the values")):
        finite = np.isfinite(np.asarray(got[i], np.float64)).all()
        tools.expect_close(got[i], want[i], f"{name} for large scores", hint="" if finite else hint)


# --------------------------------------------------------------------------------------------
# 2. masked_embedding

emb = common.EXERCISES["masked_embedding"]


@tools.builder
def _emb():
    return lambda ns: lambda ids, mask: ns.MaskedEmbedding(VOCAB, E, name="emb")(ids, mask)


_emb_build = _emb()


@emb.check
def check_emb_shape_dtype(ctx):
    """Output `(B, S, E)`, float32."""
    ids, mask = common.ids_and_mask(ctx.rng())
    params = tools.run_haiku(_emb_build, ctx.ref, None, ids, mask)
    out = tools.run_haiku(_emb_build, ctx.student, params, ids, mask)
    tools.expect_array(out, "the embeddings", shape=(B, S, E), dtype=np.float32, axes="(B, S, E)")


@emb.check(gate=True)
def check_emb_matches_reference(ctx):
    """Matches the reference for int and boolean masks (under jax.jit)."""
    ids, mask = common.ids_and_mask(ctx.rng())
    tools.compare_module(ctx, _emb_build, ids, mask, names=("the embeddings (int mask)",))
    tools.compare_module(
        ctx, _emb_build, ids, mask.astype(bool), names=("the embeddings (bool mask)",)
    )


@emb.check
def check_padding_is_zero(ctx):
    """Padding positions are exactly zero; real tokens get their row of the table."""
    rng = ctx.rng()
    ids, mask = common.ids_and_mask(rng)
    ids = np.where(mask == 0, rng.integers(1, VOCAB, size=ids.shape), ids).astype(np.int32)
    params = tools.perturb(tools.run_haiku(_emb_build, ctx.ref, None, ids, mask), rng)
    out = tools.expect_array(
        tools.run_haiku(_emb_build, ctx.student, params, ids, mask),
        "the embeddings",
        shape=(B, S, E),
    )
    pad = mask == 0
    if np.abs(out[pad]).max(initial=0) != 0:
        at = tuple(int(i) for i in np.argwhere(pad)[0])
        tools.fail(
            f"position {at} is padding (mask 0) but its embedding is not zero: multiply the "
            "vectors by the mask, with a trailing axis so it broadcasts over E"
        )
    table = np.asarray(params["emb/~/embed"]["embeddings"])
    tools.expect_close(
        out[~pad],
        table[ids][~pad],
        "the embeddings of real tokens",
        hint="A real token (mask 1) should get its row of the embedding table, unchanged.",
    )


# --------------------------------------------------------------------------------------------
# 3. multihead_attention

mha = common.EXERCISES["multihead_attention"]


@tools.builder
def _mha():
    return lambda ns: (
        lambda q, k, v, mask=None: ns.MultiheadAttention(D, H, name="mha")(q, k, v, mask)
    )


_mha_build = _mha()


def _mha_inputs(rng, s_q=4, s_k=6):
    return tools.normal(rng, B, s_q, D), tools.normal(rng, B, s_k, D), tools.normal(rng, B, s_k, D)


@mha.check
def check_mha_shapes(ctx):
    """Self- and cross-attention shapes: `(B, S_q, D)` and `(B, h, S_q, S_k)`."""
    rng = ctx.rng()
    for s_q, s_k in ((S, S), (4, 6)):
        q, k, v = _mha_inputs(rng, s_q, s_k)
        params = tools.run_haiku(_mha_build, ctx.ref, None, q, k, v)
        out = tools.run_haiku(_mha_build, ctx.student, params, q, k, v)
        out, weights = tools.expect_tuple(out, 2, "MultiheadAttention")
        tools.expect_array(
            out, "the output", shape=(B, s_q, D), dtype=np.float32, axes="(B, S_q, D)"
        )
        shape = (B, H, s_q, s_k)
        tools.expect_array(weights, "the attention weights", shape=shape, axes="(B, h, S_q, S_k)")


_HEADS_HINT = (
    "Split the last axis into (h, D // h), in that order, then move h before S; after "
    "the attention, move h back after S before merging the heads into (B, S, D)."
)


def _mha_hint(ctx, params, q, k, v, got, want) -> str:
    """Name the slip: the reference on altered parameters (no output projection, keys or
    values projected with another's weights) gives the student's output; or the weights
    match and the slip is in merging the heads; else the head split."""
    try:
        out, weights = (np.asarray(x, np.float64) for x in got)
    except (TypeError, ValueError):
        return _HEADS_HINT
    name = {key.rsplit("/", 1)[-1]: key for key in params}
    identity = {"w": np.eye(D, dtype=np.float32), "b": np.zeros(D, np.float32)}
    q_, k_, v_, o_ = (params[name[f"proj_{x}"]] for x in "qkvo")
    slips = (
        (
            {name["proj_o"]: identity},
            slip(
                "multihead_attention/no-output-projection",
                "Yours leaves out the output projection: return self.proj_o of the merged heads.",
            ),
        ),
        (
            {name["proj_k"]: q_},
            slip(
                "multihead_attention/keys-projected-with-proj-q",
                "Your keys are projected with proj_q: "
                "project k with self.proj_k (and v with self.proj_v).",
            ),
        ),
        (
            {name["proj_v"]: q_},
            slip(
                "multihead_attention/values-projected-with-proj-q",
                "Your values are projected with proj_q: project v with self.proj_v.",
            ),
        ),
        (
            {name["proj_v"]: k_},
            slip(
                "multihead_attention/values-projected-with-proj-k",
                "Your values are projected with proj_k: project v with self.proj_v.",
            ),
        ),
        (
            {name["proj_k"]: v_},
            slip(
                "multihead_attention/keys-projected-with-proj-v",
                "Your keys are projected with proj_v: project k with self.proj_k.",
            ),
        ),
        (
            {name["proj_k"]: v_, name["proj_v"]: k_},
            slip(
                "multihead_attention/keys-and-values-swapped",
                "Your keys and values swap their projections: project k with self.proj_k and v "
                "with self.proj_v.",
            ),
        ),
        (
            {name["proj_q"]: k_},
            slip(
                "multihead_attention/queries-projected-with-proj-k",
                "Your queries are projected with proj_k: project q with self.proj_q.",
            ),
        ),
        (
            {name["proj_q"]: o_},
            slip(
                "multihead_attention/queries-projected-with-proj-o",
                "Your queries are projected with proj_o: project q with self.proj_q, and keep "
                "proj_o for the merged heads.",
            ),
        ),
    )
    for change, hint in slips:
        try:
            slipped = tools.run_haiku(_mha_build, ctx.ref, {**params, **change}, q, k, v)
        except Exception:  # noqa: BLE001 - recorded answers (a handout) hold no such question
            break
        if out.shape == slipped[0].shape and np.allclose(out, slipped[0], atol=1e-4):
            return hint
    ref_weights = np.asarray(want[1], np.float64)
    if weights.shape == ref_weights.shape and np.allclose(weights, ref_weights, atol=1e-5):
        return (
            "Your attention weights match, so look after the attention: move h back after S "
            "(swap axes -3 and -2) before merging the heads into (B, S, D), then apply proj_o."
        )
    return _HEADS_HINT


@mha.check(gate=True)
def check_mha_matches_reference(ctx):
    """Output and weights match the reference (cross-attention, no mask, under jax.jit)."""
    q, k, v = _mha_inputs(ctx.rng())
    params = tools.perturb(tools.run_haiku(_mha_build, ctx.ref, None, q, k, v), ctx.rng("params"))
    want = tools.run_haiku(_mha_build, ctx.ref, params, q, k, v)
    got = tools.run_haiku(_mha_build, ctx.student, params, q, k, v)
    got = tools.expect_tuple(got, 2, "MultiheadAttention")
    if ctx.recording:  # the hint's questions, recorded for a handout
        _mha_hint(ctx, params, q, k, v, want, want)
    try:
        tools.expect_close(got[0], want[0], "the output")
        tools.expect_close(got[1], want[1], "the attention weights")
    except CheckFailure as failure:  # the hint costs a few runs of the reference: only now
        raise CheckFailure(f"{failure} {_mha_hint(ctx, params, q, k, v, got, want)}") from None


@mha.check
def check_mha_masks(ctx):
    """Matches the reference for masks `(B, S_k)`, `(B, 1, S_k)` and `(B, S_q, S_k)`."""
    rng = ctx.rng()
    q, k, v = _mha_inputs(rng)
    pad = common._mask(rng, B, 6)
    full = np.broadcast_to(pad[:, None, :], (B, 4, 6)).copy()
    full[0, 1, :3] = 0
    # A mask's hint only where the output without a mask matches: else the slip is elsewhere
    # (mha_matches_reference names it) and every mask below would be blamed for it.
    tools.compare_module(
        ctx,
        _mha_build,
        q,
        k,
        v,
        names=("the output without a mask", "the attention weights without a mask"),
        hint="Yours differs before any mask is given: fix what mha_matches_reference "
        "reports first; this check then looks at the masks.",
    )
    for mask, label, wanted in (
        (pad, "(B, S_k)", "(B, 1, 1, S_k), mask[:, None, None, :]"),
        (pad[:, None, :], "(B, 1, S_k)", "(B, 1, 1, S_k), mask[:, None]"),
        (full, "(B, S_q, S_k)", "(B, 1, S_q, S_k), mask[:, None]"),
    ):
        hint = (
            f"a {label} mask must become {wanted}, so that it broadcasts against the "
            "(B, h, S_q, S_k) scores and hides keys (the last axis), never queries."
        )
        try:
            tools.compare_module(
                ctx,
                _mha_build,
                q,
                k,
                v,
                mask,
                names=(
                    f"the output with a {label} mask",
                    f"the attention weights with a {label} mask",
                ),
                hint=f"If mha_matches_reference passes, look at the mask: {hint}",
            )
        except (TypeError, ValueError) as err:  # a mask that does not broadcast
            if "broadcast" not in str(err):
                raise
            first = str(err).splitlines()[0]
            tools.fail(
                f"with a {label} mask your code raised {type(err).__name__}: {first}. Hint: {hint}"
            )


@mha.check
def check_mha_padding_gets_zero_weight(ctx):
    """With a padding mask, padded keys get weight 0 in every head, rows sum to 1."""
    rng = ctx.rng()
    q, k, v = _mha_inputs(rng)
    pad = common._mask(rng, B, 6)
    params = tools.run_haiku(_mha_build, ctx.ref, None, q, k, v, pad)
    out = tools.run_haiku(_mha_build, ctx.student, params, q, k, v, pad)
    w = tools.expect_array(
        tools.expect_tuple(out, 2, "MultiheadAttention")[1], "the attention weights"
    )
    tools.expect_array(w, "the attention weights", shape=(B, H, 4, 6))
    hidden = np.broadcast_to((pad == 0)[:, None, None, :], w.shape)
    if (np.abs(w[hidden]) > 1e-6).any():
        at = tuple(int(i) for i in np.argwhere(hidden & (np.abs(w) > 1e-6))[0])
        tools.fail(
            f"key {at[3]} of example {at[0]} is padding but head {at[1]} gives it weight "
            f"{w[at]:.4g}: pass the mask (with a head axis) to scaled_dot_product"
        )
    tools.expect_rows_sum_to_one(w, "the attention weights")


@mha.check
def check_mha_permutation_equivariance(ctx):
    """Self-attention commutes with shuffling the tokens (no positions involved)."""
    rng = ctx.rng()
    x = tools.normal(rng, B, S, D)
    pad = common._mask(rng, B, S)
    perm = rng.permutation(S)
    params = tools.perturb(tools.run_haiku(_mha_build, ctx.ref, None, x, x, x, pad), rng)
    out, w = tools.expect_tuple(
        tools.run_haiku(_mha_build, ctx.student, params, x, x, x, pad), 2, "MHA"
    )
    xp, padp = x[:, perm], pad[:, perm]
    outp, wp = tools.expect_tuple(
        tools.run_haiku(_mha_build, ctx.student, params, xp, xp, xp, padp), 2, "MHA"
    )
    hint = "Self-attention treats the tokens as a set; each token must be processed alike."
    tools.expect_close(
        outp,
        np.asarray(out)[:, perm],
        "the output for shuffled tokens",
        hint=hint,
        versus="your output for the tokens in order, shuffled alike",
    )
    tools.expect_close(
        wp,
        np.asarray(w)[:, :, perm][:, :, :, perm],
        "the weights for shuffled tokens",
        versus="your weights for the tokens in order, shuffled alike",
    )
