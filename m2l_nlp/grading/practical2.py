"""Graded checks of practical 2 (``practical2_transformers``): the transformer encoder.

Each check compares the student's component with the reference on the same inputs and the
same (perturbed) haiku parameters, or tests a property that needs no reference. Inputs are
small and seeded; tolerances hold on CPU and GPU (float32, matmuls at highest precision).
"""

from __future__ import annotations

import numpy as np

from m2l_nlp.config import ClassifierConfig
from m2l_nlp.grading.registry import exercise
from m2l_nlp.grading.tools import (
    expect_array,
    expect_close,
    expect_dropout_only_in_training,
    expect_rows_sum_to_one,
    fail,
    normal,
    perturb,
    run_haiku,
)

PRACTICAL = "practical2_transformers"

B, S, D, H, FF = 2, 5, 12, 3, 20  # d_head = 4 != H, so a head split in the wrong order shows


def _mask(rng: np.random.Generator, batch: int, length: int, min_valid: int = 1) -> np.ndarray:
    """A padding mask `(batch, length)` of 1s then 0s, with at least `min_valid` ones."""
    lengths = rng.integers(min_valid, length + 1, size=batch)
    lengths[0] = length  # one full row
    if batch > 1:
        lengths[-1] = max(min_valid, length - 2)  # one padded row
    return (np.arange(length)[None, :] < lengths[:, None]).astype(np.int32)


def _compare_module(ctx, build, *args, names=("output",), jit=True, hint=""):
    """Init the reference, perturb the params, apply reference and student, compare outputs."""
    rng = ctx.rng("params")
    params = perturb(run_haiku(build, ctx.ref, None, *args), rng)
    want = run_haiku(build, ctx.ref, params, *args)
    got = run_haiku(build, ctx.student, params, *args, jit=jit)
    if len(names) == 1:
        want, got = (want,), (got,)
    elif not isinstance(got, tuple) or len(got) != len(names):
        fail(f"should return a tuple ({', '.join(names)}); yours returned {_kind(got)}")
    for name, g, w in zip(names, got, want, strict=True):
        expect_close(g, w, name, hint=hint)
    return params, got


def _kind(value) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} items"
    if hasattr(value, "shape"):
        return f"one array of shape {tuple(value.shape)}"
    return type(value).__name__


def _expect_tuple(value, n: int, what: str):
    if not isinstance(value, (tuple, list)) or len(value) != n:
        fail(f"{what} should return a tuple of {n} items; yours returned {_kind(value)}")
    return value


# --------------------------------------------------------------------------------------------
# 1. scaled_dot_product

sdp = exercise(
    "scaled_dot_product",
    PRACTICAL,
    points=15,
    targets=("scaled_dot_product",),
    title="softmax(Q K^T / sqrt(d_k)) V with an optional mask",
)


@sdp.check
def check_shapes(ctx):
    """Output shapes for no and for two leading axes."""
    rng = ctx.rng()
    for lead in ((), (2, 3)):
        q, k, v = normal(rng, *lead, 4, 8), normal(rng, *lead, 6, 8), normal(rng, *lead, 6, 5)
        out = _expect_tuple(ctx.student.scaled_dot_product(q, k, v), 2, "scaled_dot_product")
        axes = "(..., S_q, d_v)" if lead else "(S_q, d_v)"
        expect_array(out[0], "the values", shape=(*lead, 4, 5), dtype=np.float32, axes=axes)
        axes = "(..., S_q, S_k)" if lead else "(S_q, S_k)"
        expect_array(out[1], "the attention weights", shape=(*lead, 4, 6), axes=axes)


@sdp.check
def check_matches_reference(ctx):
    """Values and weights match the reference, with and without a mask (under jax.jit)."""
    import jax

    rng = ctx.rng()
    q, k, v = normal(rng, 2, 3, 4, 8), normal(rng, 2, 3, 6, 8), normal(rng, 2, 3, 6, 5)
    mask = rng.integers(0, 2, size=(2, 3, 4, 6)).astype(np.int32)
    mask[..., 0] = 1  # every query sees at least one key
    for m in (None, mask):
        want = ctx.ref.scaled_dot_product(q, k, v, m)
        got = _expect_tuple(
            jax.jit(ctx.student.scaled_dot_product)(q, k, v, m), 2, "scaled_dot_product"
        )
        label = "without a mask" if m is None else "with a mask"
        hint = _weights_hint(q, k, got[1]) if m is None else _MASKED_WEIGHTS_HINT
        expect_close(got[1], want[1], f"the attention weights ({label})", hint=hint)
        expect_close(got[0], want[0], f"the values ({label})")


_MASKED_WEIGHTS_HINT = (
    "Without a mask yours match, so look at the masking: before the softmax, give each "
    "hidden key (mask 0) a very negative score (not 0), and keep the scores where mask != 0."
)


def _weights_hint(q: np.ndarray, k: np.ndarray, weights) -> str:
    """Name the likely slip when unmasked attention weights differ from the reference."""
    try:
        w = np.asarray(weights, np.float64)
    except (TypeError, ValueError):  # not numbers: expect_close says so
        return ""
    scores = q.astype(np.float64) @ np.swapaxes(k, -1, -2).astype(np.float64)
    d_k = q.shape[-1]
    for scale, slip in ((1.0, "without dividing the scores"), (d_k, "dividing them by d_k")):
        e = np.exp(scores / scale - (scores / scale).max(-1, keepdims=True))
        if w.shape == e.shape and np.allclose(w, e / e.sum(-1, keepdims=True), atol=1e-5):
            return (
                f"Yours are the softmax of Q K^T {slip}: divide them by sqrt(d_k), the "
                "square root of the size of q's last axis."
            )
    if w.shape == scores.shape and not np.allclose(w.sum(-1), 1.0, atol=1e-4):
        return "Your rows do not sum to 1: take the softmax over the last axis (the keys)."
    return (
        "Check that the scores are Q K^T divided by sqrt(d_k) (the size of q's last axis) "
        "and that the softmax runs over the last axis (the keys)."
    )


@sdp.check
def check_rows_sum_to_one(ctx):
    """Each row of weights is >= 0 and sums to 1 over the keys."""
    rng = ctx.rng()
    q, k, v = normal(rng, 3, 4, 8), normal(rng, 3, 7, 8), normal(rng, 3, 7, 5)
    weights = _expect_tuple(ctx.student.scaled_dot_product(q, k, v), 2, "scaled_dot_product")[1]
    expect_array(weights, "the attention weights", shape=(3, 4, 7))
    expect_rows_sum_to_one(weights, "the attention weights")


@sdp.check
def check_masked_keys_get_zero_weight(ctx):
    """Keys hidden by the mask get weight 0; visible keys share all the weight."""
    rng = ctx.rng()
    q, k, v = normal(rng, 2, 4, 8), normal(rng, 2, 6, 8), normal(rng, 2, 6, 5)
    mask = np.array([[1, 1, 0, 1, 0, 0], [0, 1, 1, 1, 1, 1]], np.int32)[:, None, :]  # (B, 1, S_k)
    for m, label in ((mask, "an int 0/1"), (mask.astype(bool), "a boolean")):
        weights = _expect_tuple(ctx.student.scaled_dot_product(q, k, v, m), 2, "sdp")[1]
        w = expect_array(weights, "the attention weights", shape=(2, 4, 6), finite=False)
        hidden = np.broadcast_to(m == 0, w.shape)
        if (np.abs(w[hidden]) > 1e-6).any():
            at = tuple(int(i) for i in np.argwhere(hidden & (np.abs(w) > 1e-6))[0])
            fail(
                f"with {label} mask, the key at index {at} is hidden (mask 0) but gets weight "
                f"{w[at]:.4g}; hidden keys must get weight 0. Replace their scores by a very "
                "negative number before the softmax (keep scores where mask != 0)"
            )
        expect_rows_sum_to_one(w, f"the attention weights (with {label} mask)")


@sdp.check
def check_large_scores_stay_finite(ctx):
    """Scores in the thousands give finite weights and values (no overflow in exp)."""
    rng = ctx.rng()
    q, k, v = 30 * normal(rng, 2, 4, 8), 30 * normal(rng, 2, 6, 8), normal(rng, 2, 6, 5)
    want = ctx.ref.scaled_dot_product(q, k, v)
    got = _expect_tuple(ctx.student.scaled_dot_product(q, k, v), 2, "scaled_dot_product")
    hint = (
        "exp of a score above about 88 overflows float32 to inf, and inf / inf is NaN. "
        "jax.nn.softmax avoids this; if you wrote the softmax yourself, subtract each row's "
        "maximum score before exp (the softmax does not change)."
    )
    for i, name in ((1, "the attention weights"), (0, "the values")):
        finite = np.isfinite(np.asarray(got[i], np.float64)).all()
        expect_close(got[i], want[i], f"{name} for large scores", hint="" if finite else hint)


# --------------------------------------------------------------------------------------------
# 2. masked_embedding

emb = exercise(
    "masked_embedding",
    PRACTICAL,
    points=5,
    targets=("MaskedEmbedding",),
    title="token embedding with zero vectors at padding",
)
VOCAB, E = 30, D  # the same sizes everywhere: JAX compiles each operation once


def _emb_build(ns):
    return lambda ids, mask: ns.MaskedEmbedding(VOCAB, E, name="emb")(ids, mask)


def _ids_mask(rng, batch=B, length=S):
    ids = rng.integers(1, VOCAB, size=(batch, length)).astype(np.int32)
    mask = _mask(rng, batch, length)
    ids[mask == 0] = 0
    return ids, mask


@emb.check
def check_emb_shape_dtype(ctx):
    """Output `(B, S, E)`, float32."""
    ids, mask = _ids_mask(ctx.rng())
    params = run_haiku(_emb_build, ctx.ref, None, ids, mask)
    out = run_haiku(_emb_build, ctx.student, params, ids, mask)
    expect_array(out, "the embeddings", shape=(B, S, E), dtype=np.float32, axes="(B, S, E)")


@emb.check
def check_emb_matches_reference(ctx):
    """Matches the reference for int and boolean masks (under jax.jit)."""
    ids, mask = _ids_mask(ctx.rng())
    _compare_module(ctx, _emb_build, ids, mask, names=("the embeddings (int mask)",))
    _compare_module(ctx, _emb_build, ids, mask.astype(bool), names=("the embeddings (bool mask)",))


@emb.check
def check_padding_is_zero(ctx):
    """Padding positions are exactly zero; real tokens get their row of the table."""
    rng = ctx.rng()
    ids, mask = _ids_mask(rng)
    ids = np.where(mask == 0, rng.integers(1, VOCAB, size=ids.shape), ids).astype(np.int32)
    params = perturb(run_haiku(_emb_build, ctx.ref, None, ids, mask), rng)
    out = expect_array(
        run_haiku(_emb_build, ctx.student, params, ids, mask), "the embeddings", shape=(B, S, E)
    )
    pad = mask == 0
    if np.abs(out[pad]).max(initial=0) != 0:
        at = tuple(int(i) for i in np.argwhere(pad)[0])
        fail(
            f"position {at} is padding (mask 0) but its embedding is not zero: multiply the "
            "vectors by the mask, with a trailing axis so it broadcasts over E"
        )
    table = np.asarray(params["emb/~/embed"]["embeddings"])
    expect_close(
        out[~pad],
        table[ids][~pad],
        "the embeddings of real tokens",
        hint="A real token (mask 1) should get its row of the embedding table, unchanged.",
    )


# --------------------------------------------------------------------------------------------
# 3. multihead_attention

mha = exercise(
    "multihead_attention",
    PRACTICAL,
    points=20,
    targets=("MultiheadAttention",),
    uses=("scaled_dot_product",),
    title="h heads of scaled dot-product attention with learned projections",
)


def _mha_build(ns):
    return lambda q, k, v, mask=None: ns.MultiheadAttention(D, H, name="mha")(q, k, v, mask)


def _mha_inputs(rng, s_q=4, s_k=6):
    return normal(rng, B, s_q, D), normal(rng, B, s_k, D), normal(rng, B, s_k, D)


@mha.check
def check_mha_shapes(ctx):
    """Self- and cross-attention shapes: `(B, S_q, D)` and `(B, h, S_q, S_k)`."""
    rng = ctx.rng()
    for s_q, s_k in ((S, S), (4, 6)):
        q, k, v = _mha_inputs(rng, s_q, s_k)
        params = run_haiku(_mha_build, ctx.ref, None, q, k, v)
        out = run_haiku(_mha_build, ctx.student, params, q, k, v)
        out, weights = _expect_tuple(out, 2, "MultiheadAttention")
        expect_array(out, "the output", shape=(B, s_q, D), dtype=np.float32, axes="(B, S_q, D)")
        shape = (B, H, s_q, s_k)
        expect_array(weights, "the attention weights", shape=shape, axes="(B, h, S_q, S_k)")


@mha.check
def check_mha_matches_reference(ctx):
    """Output and weights match the reference (cross-attention, no mask, under jax.jit)."""
    q, k, v = _mha_inputs(ctx.rng())
    _compare_module(
        ctx,
        _mha_build,
        q,
        k,
        v,
        names=("the output", "the attention weights"),
        hint=(
            "Split the last axis into (h, D // h), in that order, then move h before S; after "
            "the attention, move h back after S before merging the heads into (B, S, D)."
        ),
    )


@mha.check
def check_mha_masks(ctx):
    """Matches the reference for masks `(B, S_k)`, `(B, 1, S_k)` and `(B, S_q, S_k)`."""
    rng = ctx.rng()
    q, k, v = _mha_inputs(rng)
    pad = _mask(rng, B, 6)
    full = np.broadcast_to(pad[:, None, :], (B, 4, 6)).copy()
    full[0, 1, :3] = 0
    for mask, label in (
        (pad, "(B, S_k)"),
        (pad[:, None, :], "(B, 1, S_k)"),
        (full, "(B, S_q, S_k)"),
    ):
        _compare_module(
            ctx,
            _mha_build,
            q,
            k,
            v,
            mask,
            names=(f"the output with a {label} mask", f"the attention weights with a {label} mask"),
            hint=(
                "If mha_matches_reference passes, look at the mask: give it a head axis so it "
                "broadcasts against (B, h, S_q, S_k)."
            ),
        )


@mha.check
def check_mha_padding_gets_zero_weight(ctx):
    """With a padding mask, padded keys get weight 0 in every head, rows sum to 1."""
    rng = ctx.rng()
    q, k, v = _mha_inputs(rng)
    pad = _mask(rng, B, 6)
    params = run_haiku(_mha_build, ctx.ref, None, q, k, v, pad)
    out = run_haiku(_mha_build, ctx.student, params, q, k, v, pad)
    w = expect_array(_expect_tuple(out, 2, "MultiheadAttention")[1], "the attention weights")
    expect_array(w, "the attention weights", shape=(B, H, 4, 6))
    hidden = np.broadcast_to((pad == 0)[:, None, None, :], w.shape)
    if (np.abs(w[hidden]) > 1e-6).any():
        at = tuple(int(i) for i in np.argwhere(hidden & (np.abs(w) > 1e-6))[0])
        fail(
            f"key {at[3]} of example {at[0]} is padding but head {at[1]} gives it weight "
            f"{w[at]:.4g}: pass the mask (with a head axis) to scaled_dot_product"
        )
    expect_rows_sum_to_one(w, "the attention weights")


@mha.check
def check_mha_permutation_equivariance(ctx):
    """Self-attention commutes with shuffling the tokens (no positions involved)."""
    rng = ctx.rng()
    x = normal(rng, B, S, D)
    pad = _mask(rng, B, S)
    perm = rng.permutation(S)
    params = perturb(run_haiku(_mha_build, ctx.ref, None, x, x, x, pad), rng)
    out, w = _expect_tuple(run_haiku(_mha_build, ctx.student, params, x, x, x, pad), 2, "MHA")
    xp, padp = x[:, perm], pad[:, perm]
    outp, wp = _expect_tuple(run_haiku(_mha_build, ctx.student, params, xp, xp, xp, padp), 2, "MHA")
    hint = "Self-attention treats the tokens as a set; each token must be processed alike."
    expect_close(
        outp,
        np.asarray(out)[:, perm],
        "the output for shuffled tokens",
        hint=hint,
        versus="your output for the tokens in order, shuffled alike",
    )
    expect_close(
        wp,
        np.asarray(w)[:, :, perm][:, :, :, perm],
        "the weights for shuffled tokens",
        versus="your weights for the tokens in order, shuffled alike",
    )


# --------------------------------------------------------------------------------------------
# 4. positionwise_feed_forward

ffn = exercise(
    "positionwise_feed_forward",
    PRACTICAL,
    points=10,
    targets=("PositionwiseFeedForward",),
    title="Linear(d_ff), ReLU, dropout while training, Linear(d_model)",
)


def _ffn(p: float, is_train: bool):
    def build(ns):
        return lambda x: ns.PositionwiseFeedForward(D, FF, p, name="ffn")(x, is_train)

    return build


@ffn.check
def check_ffn_matches_reference(ctx):
    """Evaluation output `(B, S, D)` matches the reference (under jax.jit)."""
    x = normal(ctx.rng(), B, S, D)
    _compare_module(
        ctx, _ffn(0.1, False), x, names=("the output (evaluation mode)",), hint="Is the ReLU there?"
    )


@ffn.check
def check_ffn_eval_no_dropout(ctx):
    """Evaluation (`is_train=False`) needs no random key and is deterministic."""
    x = normal(ctx.rng(), B, S, D)
    params = run_haiku(_ffn(0.5, True), ctx.ref, None, x)
    first = run_haiku(_ffn(0.5, False), ctx.student, params, x)
    second = run_haiku(_ffn(0.5, False), ctx.student, params, x)
    expect_array(first, "the output", shape=(B, S, D))
    expect_close(second, first, "a second evaluation of the same input", versus="the first")


@ffn.check
def check_ffn_dropout(ctx):
    """Dropout is on in training (p=0.5 changes the output) and p=0 changes nothing."""
    x = normal(ctx.rng(), B, S, D)
    expect_dropout_only_in_training(
        ctx,
        _ffn,
        x,
        what="PositionwiseFeedForward",
    )


# --------------------------------------------------------------------------------------------
# 5. encoder_block

block = exercise(
    "encoder_block",
    PRACTICAL,
    points=15,
    targets=("EncoderBlock",),
    uses=("MultiheadAttention", "PositionwiseFeedForward"),
    title="x = LayerNorm(x + Dropout(SubLayer(x))) for attention, then feed-forward",
)


def _block(p: float, is_train: bool, return_attention: bool = False):
    def build(ns):
        def forward(x, mask):
            module = ns.EncoderBlock(D, H, FF, p, name="block")
            return module(x, mask, is_train=is_train, return_attention=return_attention)

        return forward

    return build


@block.check
def check_block_matches_reference(ctx):
    """Evaluation output matches the reference, with a padding mask (under jax.jit)."""
    rng = ctx.rng()
    x, pad = normal(rng, B, S, D), _mask(rng, B, S)
    _compare_module(
        ctx,
        _block(0.1, False),
        x,
        pad,
        names=("the output of EncoderBlock",),
        hint="Residual around each sub-layer, then LayerNorm: norm_1 after attention, "
        "norm_2 after the feed-forward; pass the mask to the attention.",
    )


@block.check
def check_block_return_attention(ctx):
    """`return_attention=True` gives `(out, weights)`; `False` gives one array."""
    rng = ctx.rng()
    x, pad = normal(rng, B, S, D), _mask(rng, B, S)
    _compare_module(
        ctx,
        _block(0.1, False, True),
        x,
        pad,
        names=("the output", "the attention weights"),
    )
    params = run_haiku(_block(0.1, False), ctx.ref, None, x, pad)
    out = run_haiku(_block(0.1, False), ctx.student, params, x, pad)
    expect_array(out, "the output with return_attention=False", shape=(B, S, D))


@block.check
def check_block_post_layer_norm(ctx):
    """Output is layer-normalised: every token has mean 0 and variance 1 at initialisation."""
    rng = ctx.rng()
    x = 3.0 * normal(rng, B, S, D) + 1.0
    params = run_haiku(_block(0.1, False), ctx.ref, None, x, None)  # scale 1, offset 0
    out = expect_array(run_haiku(_block(0.1, False), ctx.student, params, x, None), "the output")
    mean, var = out.mean(-1), out.var(-1)
    if np.abs(mean).max() > 1e-3 or np.abs(var - 1).max() > 1e-2:
        at = np.unravel_index(np.argmax(np.abs(var - 1) + np.abs(mean)), mean.shape)
        at = tuple(int(i) for i in at)
        fail(
            f"the block's output should come out of a LayerNorm (post-LN: "
            f"LayerNorm(x + SubLayer(x))), so with fresh parameters each token has mean 0 and "
            f"variance 1; token {at} has mean {mean[at]:.3g} and variance {var[at]:.3g}"
        )


@block.check
def check_block_dropout(ctx):
    """Dropout on in training, off in evaluation (no random key needed), p=0 is a no-op."""
    rng = ctx.rng()
    x, pad = normal(rng, B, S, D), _mask(rng, B, S)
    expect_dropout_only_in_training(
        ctx,
        _block,
        x,
        pad,
        what="EncoderBlock",
    )


@block.check
def check_block_permutation_equivariance(ctx):
    """Shuffling the tokens (and the mask) shuffles the output the same way."""
    rng = ctx.rng()
    x, pad = normal(rng, B, S, D), _mask(rng, B, S)
    perm = rng.permutation(S)
    build = _block(0.1, False)
    params = perturb(run_haiku(build, ctx.ref, None, x, pad), rng)
    out = expect_array(run_haiku(build, ctx.student, params, x, pad), "the output")
    outp = run_haiku(build, ctx.student, params, x[:, perm], pad[:, perm])
    expect_close(
        outp,
        out[:, perm],
        "the output for shuffled tokens",
        versus="your output for the tokens in order, shuffled alike",
    )


# --------------------------------------------------------------------------------------------
# 6. transformer_encoder

encoder = exercise(
    "transformer_encoder",
    PRACTICAL,
    points=10,
    targets=("TransformerEncoder",),
    uses=("EncoderBlock",),
    title="a stack of encoder blocks, and its attention maps",
)
LAYERS = 3


def _encoder(p: float, is_train: bool, maps: bool = False):
    def build(ns):
        def forward(x, mask):
            module = ns.TransformerEncoder(LAYERS, H, D, FF, p, name="encoder")
            if maps:
                return module.get_attention_maps(x, mask, is_train=is_train)
            return module(x, mask, is_train=is_train)

        return forward

    return build


@encoder.check
def check_encoder_matches_reference(ctx):
    """Evaluation output of 3 blocks matches the reference, with a mask (under jax.jit)."""
    rng = ctx.rng()
    x, pad = normal(rng, B, S, D), _mask(rng, B, S)
    _compare_module(
        ctx,
        _encoder(0.1, False),
        x,
        pad,
        names=("the output of TransformerEncoder",),
        hint="Apply every block in order, each to the previous block's output, with the mask.",
    )


@encoder.check
def check_attention_maps(ctx):
    """`get_attention_maps` returns one `(B, h, S, S)` map per block, as the reference."""
    rng = ctx.rng()
    x, pad = normal(rng, B, S, D), _mask(rng, B, S)
    build = _encoder(0.1, False, maps=True)
    params = perturb(run_haiku(_encoder(0.1, False), ctx.ref, None, x, pad), rng)
    want = run_haiku(build, ctx.ref, params, x, pad)
    got = run_haiku(build, ctx.student, params, x, pad)
    if not isinstance(got, (list, tuple)) or len(got) != LAYERS:
        fail(
            f"get_attention_maps should return a list with one map per block ({LAYERS} here); "
            f"yours returned {_kind(got) if not isinstance(got, list) else f'{len(got)} items'}"
        )
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        expect_close(
            g,
            w,
            f"the attention map of block {i}",
            hint="Each block must see the output of the previous block, as in __call__.",
        )


@encoder.check
def check_encoder_dropout(ctx):
    """`is_train` reaches the blocks: dropout in training, none in evaluation."""
    rng = ctx.rng()
    x, pad = normal(rng, B, S, D), _mask(rng, B, S)
    expect_dropout_only_in_training(
        ctx,
        _encoder,
        x,
        pad,
        what="TransformerEncoder",
    )


# --------------------------------------------------------------------------------------------
# 7. positional_encoding

pe = exercise(
    "positional_encoding",
    PRACTICAL,
    points=15,
    targets=("sinusoidal_encoding", "PositionalEncoding"),
    title="the sinusoidal position table, added to the token vectors",
)


def _closed_form(max_len: int, d_model: int) -> np.ndarray:
    table = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** ((j - j % 2) / d_model)
            table[pos, j] = np.sin(angle) if j % 2 == 0 else np.cos(angle)
    return table


@pe.check
def check_table_shape_dtype(ctx):
    """`sinusoidal_encoding(max_len, d_model)` is a float32 `(max_len, d_model)` array."""
    for max_len, d_model in ((50, 16), (10, 7)):
        table = ctx.student.sinusoidal_encoding(max_len, d_model)
        expect_array(
            table,
            f"sinusoidal_encoding({max_len}, {d_model})",
            shape=(max_len, d_model),
            dtype=np.float32,
            axes="(max_len, d_model)",
        )


@pe.check
def check_table_closed_form(ctx):
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(same), odd D too."""
    for max_len, d_model in ((50, 16), (10, 7)):
        table = ctx.student.sinusoidal_encoding(max_len, d_model)
        expect_close(
            table,
            _closed_form(max_len, d_model),
            f"sinusoidal_encoding({max_len}, {d_model})",
            atol=1e-5,
            rtol=1e-5,
            hint="Even features (0, 2, ...) get the sine, odd features the cosine, of "
            "pos / 10000^(2i / d_model) where 2i is the even feature index of the pair.",
        )


def _pe(p: float, is_train: bool, max_len: int = 20):
    def build(ns):
        return lambda x: ns.PositionalEncoding(D, max_len, p, name="pe")(x, is_train)

    return build


@pe.check
def check_adds_table(ctx):
    """In evaluation, the output is `x + table[:S]` (under jax.jit)."""
    rng = ctx.rng()
    x = normal(rng, B, S, D)
    _compare_module(
        ctx,
        _pe(0.1, False),
        x,
        names=("the output of PositionalEncoding (evaluation)",),
        hint=(
            "Add the first S rows of the table to x, and return the sum. If "
            "table_closed_form fails too, fix sinusoidal_encoding first: the module adds "
            "the table it makes."
        ),
    )
    out = run_haiku(_pe(0.1, False), ctx.student, {}, np.zeros((B, S, D), np.float32))
    expect_close(
        out,
        np.broadcast_to(_closed_form(S, D), (B, S, D)),
        "the output for x = 0 (it should be the table itself)",
    )


@pe.check
def check_too_long_raises(ctx):
    """A sequence longer than `max_len` raises `ValueError` that says so."""
    x = np.zeros((1, 25, D), np.float32)
    try:
        run_haiku(_pe(0.1, False), ctx.student, {}, x)
    except ValueError:
        return
    except (NotImplementedError, AssertionError):
        raise
    except Exception as err:  # noqa: BLE001 - any other error is the wrong kind
        fail(
            f"a sequence of 25 tokens with max_len=20 should raise ValueError with a clear "
            f"message; yours raised {type(err).__name__}: {err}"
        )
    fail("a sequence of 25 tokens with max_len=20 should raise ValueError; yours raised nothing")


@pe.check
def check_pe_dropout(ctx):
    """Dropout after the addition in training only."""
    x = normal(ctx.rng(), B, S, D)
    expect_dropout_only_in_training(
        ctx,
        _pe,
        x,
        what="PositionalEncoding",
    )


# --------------------------------------------------------------------------------------------
# 8. classifier

clf = exercise(
    "classifier",
    PRACTICAL,
    points=10,
    targets=("masked_pool", "TransformerClassifier"),
    uses=("MaskedEmbedding", "PositionalEncoding", "TransformerEncoder"),
    title="masked pooling and the full classifier (one logit per review)",
)
POOLINGS = ("mean", "max", "mean_max")


def _pool_inputs(rng):
    x = normal(rng, 3, 6, 4)
    mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0], [0, 0, 0, 0, 0, 0]], np.int32)
    return x, mask


def _numpy_pool(x, mask, pooling):
    valid = mask[..., None] != 0
    count = np.maximum(valid.sum(1), 1)
    mean = np.where(valid, x, 0).sum(1) / count
    maximum = np.where(valid.any(1), np.where(valid, x, -np.inf).max(1), 0)
    return {"mean": mean, "max": maximum, "mean_max": np.concatenate([mean, maximum], -1)}[pooling]


@clf.check
def check_pool_matches_reference(ctx):
    """`masked_pool` matches the reference for mean, max and mean_max (incl. an empty row)."""
    x, mask = _pool_inputs(ctx.rng())
    for pooling in POOLINGS:
        want = ctx.ref.masked_pool(x, mask, pooling)
        got = ctx.student.masked_pool(x, mask, pooling)
        name = f"masked_pool(..., {pooling!r}) of 3 reviews, the last one empty (all padding)"
        expect_array(got, name, shape=want.shape, axes="(B, D or 2D)")
        expect_close(got, want, name, hint="The last review (all padding) pools to zeros.")


@clf.check
def check_pool_ignores_padding(ctx):
    """Padding never changes the pooled vector, an empty review pools to zeros."""
    rng = ctx.rng()
    x, mask = _pool_inputs(rng)
    noisy = np.where(mask[..., None] == 0, 100.0 + 50 * normal(rng, *x.shape), x).astype(np.float32)
    for pooling in POOLINGS:
        got = expect_array(
            ctx.student.masked_pool(noisy, mask, pooling), f"masked_pool(..., {pooling!r})"
        )
        expect_close(
            got,
            _numpy_pool(x, mask, pooling),
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
    fail("masked_pool(x, mask, 'sum') should raise ValueError naming the allowed poolings")


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


def _clf(config: ClassifierConfig, is_train: bool):
    def build(ns):
        return lambda ids, mask: ns.TransformerClassifier(config, name="classifier")(
            ids, mask, is_train
        )

    return build


@clf.check
def check_classifier_matches_reference(ctx):
    """Logits `(B,)` match the reference for every pooling (evaluation, under jax.jit)."""
    rng = ctx.rng()
    ids, mask = _ids_mask(rng)
    for pooling in POOLINGS:
        build = _clf(_clf_config(pooling), False)
        params = perturb(run_haiku(build, ctx.ref, None, ids, mask), rng)
        want = run_haiku(build, ctx.ref, params, ids, mask)
        got = run_haiku(build, ctx.student, params, ids, mask, jit=pooling == "mean")
        expect_array(got, f"the logits (pooling {pooling!r})", shape=(B,), axes="(B,)")
        expect_close(
            got,
            want,
            f"the logits (pooling {pooling!r})",
            hint="Embed, add positions, encode with the mask, pool with config.pooling over "
            "real tokens, then the head; return one logit per review (drop the last axis).",
        )


@clf.check
def check_classifier_padding_invariance(ctx):
    """The same review padded to different lengths, with junk ids at padding, gets one logit."""
    rng = ctx.rng()
    ids, mask = _ids_mask(rng)
    long_ids = np.concatenate([ids, rng.integers(1, VOCAB, size=(B, 4))], 1).astype(np.int32)
    long_mask = np.concatenate([mask, np.zeros((B, 4), np.int32)], 1)
    long_ids[:, :S] = np.where(mask == 0, rng.integers(1, VOCAB, size=(B, S)), ids)
    for pooling in ("mean", "mean_max"):
        build = _clf(_clf_config(pooling), False)
        params = perturb(run_haiku(build, ctx.ref, None, ids, mask), rng)
        short = expect_array(run_haiku(build, ctx.student, params, ids, mask), "the logits")
        longer = run_haiku(build, ctx.student, params, long_ids, long_mask)
        expect_close(
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
    ids, mask = _ids_mask(ctx.rng())
    expect_dropout_only_in_training(
        ctx,
        lambda p, t: _clf(_clf_config("mean", p), t),
        ids,
        mask,
        what="TransformerClassifier",
    )
