"""Graded checks of practical 1, the features: ``multi_hot``, ``bag_of_bigrams`` and ``tfidf``.

The encodings are checked against small examples worked out by hand (written below as
literals) and against the reference on random inputs.
"""

from __future__ import annotations

import math

import numpy as np

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import slip
from m2l_nlp.grading.practicals.practical1 import common

# Two reviews worked out by hand (V = 6). Row 0: token 3 twice, padding id 0 at the end.
# Row 1: token 5 twice; the padding holds junk ids 2 (also a real token of the row) and 1
# (a token found nowhere in the row): neither may be counted, and 2 must stay 1.
HAND_IDS = np.array([[3, 1, 3, 0, 0], [5, 2, 5, 2, 1]], np.int32)
HAND_MASK = np.array([[1, 1, 1, 0, 0], [1, 1, 1, 0, 0]], np.int32)
HAND_V = 6
HAND_MULTI_HOT = np.array([[0, 1, 0, 1, 0, 0], [0, 0, 1, 0, 0, 1]], np.float32)
# Bigrams with 10 buckets, bucket = (a * 6 + b) % 10:
# row 0: (3, 1) -> 19 -> 9, (1, 3) -> 9 -> 9, then pairs that touch the padding -> 0 (masked)
# row 1: (5, 2) -> 32 -> 2, (2, 5) -> 17 -> 7, then pairs that touch the padding -> 0 (masked)
HAND_BUCKETS = 10
HAND_BIGRAMS = np.array([[9, 9, 0, 0], [2, 7, 0, 0]], np.int32)
HAND_PAIR_MASK = np.array([[1, 1, 0, 0], [1, 1, 0, 0]], np.int32)
HAND_BAG = np.concatenate(
    [
        HAND_MULTI_HOT,
        np.array([[0, 0, 0, 0, 0, 0, 0, 0, 0, 1], [0, 0, 1, 0, 0, 0, 0, 1, 0, 0]], np.float32),
    ],
    axis=1,
)


# --------------------------------------------------------------------------------------------
# 1. multi_hot

mh = common.EXERCISES["multi_hot"]


@mh.check
def check_mh_shape_dtype(ctx):
    """`(N, V)` float32 of 0s and 1s."""
    ids, mask = common.random_batch(ctx.rng(), 3, 8, 12)
    out = tools.expect_array(
        tools.jitted(ctx.student.multi_hot, 2)(ids, mask, 12),
        "multi_hot(ids, mask, 12)",
        shape=(3, 12),
        dtype=np.float32,
        axes="(N, V)",
    )
    if not np.isin(out, (0.0, 1.0)).all():
        bad = out[~np.isin(out, (0.0, 1.0))][0]
        tools.fail(
            f"multi_hot should hold only 0s and 1s; yours holds {bad:g}. A token that occurs "
            "several times still counts 1 (presence, not a count)"
        )


@mh.check
def check_mh_hand_example(ctx):
    """The worked example: repeats count once, padding (whatever its id) is ignored."""
    out = tools.expect_array(
        tools.jitted(ctx.student.multi_hot, 2)(HAND_IDS, HAND_MASK, HAND_V),
        "multi_hot",
        shape=(2, HAND_V),
    )
    for row in range(2):
        for token in range(HAND_V):
            got, want = out[row, token], HAND_MULTI_HOT[row, token]
            if got == want:
                continue
            real = HAND_IDS[row][HAND_MASK[row] == 1].tolist()
            pad = HAND_IDS[row][HAND_MASK[row] == 0].tolist()
            if want == 0 and token in pad:
                why = slip(
                    "multi_hot/padding-counted",
                    f"token {token} only appears at padding positions (mask 0), so it must "
                    "stay 0: use the mask",
                )
            elif want == 1 and got > 1:
                why = slip(
                    "multi_hot/counts-not-presence",
                    f"token {token} occurs {real.count(token)} times but must count 1",
                )
            elif want == 1 and token in pad:
                why = slip(
                    "multi_hot/set-with-repeated-indices",
                    f"token {token} is a real token of the review and must be 1, even though "
                    "the padding holds the same id: `.set` with repeated indices keeps an "
                    "arbitrary one of the values, use `.max`",
                )
            else:
                why = f"token {token} should be {want:g}"
            tools.fail(
                f"for the review ids={HAND_IDS[row].tolist()}, mask={HAND_MASK[row].tolist()} "
                f"(V={HAND_V}) the expected vector is {HAND_MULTI_HOT[row].astype(int).tolist()}; "
                f"yours is {out[row].tolist()}: {why}"
            )


@mh.check(gate=True)
def check_mh_matches_reference(ctx):
    """Random batches with repeats and junk ids at padding match the reference (under jax.jit)."""
    rng = ctx.rng()
    for batch, length, vocab in ((4, 9, 7), (3, 20, 50)):
        ids, mask = common.random_batch(rng, batch, length, vocab)
        what = f"multi_hot on a random ({batch}, {length}) batch, V={vocab}"
        tools.expect_same_as_reference(ctx, "multi_hot", ids, mask, vocab, static=(2,), what=what)


# --------------------------------------------------------------------------------------------
# 2. bag_of_bigrams

bob = common.EXERCISES["bag_of_bigrams"]


@bob.check
def check_bigram_ids_hand_example(ctx):
    """The worked example: bucket (a * V + b) % num_buckets, pairs touching padding masked."""
    out = tools.expect_tuple(
        tools.jitted(ctx.student.bigram_ids, 2, 3)(HAND_IDS, HAND_MASK, HAND_V, HAND_BUCKETS),
        2,
        "bigram_ids",
    )
    buckets = tools.expect_array(out[0], "the buckets", shape=(2, 4), axes="(N, S - 1)")
    pair_mask = tools.expect_array(out[1], "the pair mask", shape=(2, 4), axes="(N, S - 1)")
    if not np.issubdtype(buckets.dtype, np.integer):
        tools.fail(f"the buckets should be integers (int32); yours have dtype {buckets.dtype}")
    if not np.array_equal(pair_mask, HAND_PAIR_MASK):
        tools.fail(
            f"for mask={HAND_MASK.tolist()} the pair mask should be {HAND_PAIR_MASK.tolist()} "
            f"(1 only where both tokens of the pair are real); yours is {pair_mask.tolist()}"
        )
    if not np.array_equal(buckets, HAND_BIGRAMS):
        swapped = (HAND_IDS[:, 1:] * HAND_V + HAND_IDS[:, :-1]) % HAND_BUCKETS
        hint = (
            slip(
                "bag_of_bigrams/first-token-times-v",
                "the first token of the pair is multiplied by V: (ids[:, i] * V + ids[:, i + 1])",
            )
            if np.array_equal(np.where(HAND_PAIR_MASK == 1, buckets, 0), swapped * HAND_PAIR_MASK)
            else "bucket = (first * V + second) % num_buckets, and 0 where the pair is masked"
        )
        tools.fail(
            f"for ids={HAND_IDS.tolist()}, mask={HAND_MASK.tolist()}, V={HAND_V} and "
            f"{HAND_BUCKETS} buckets the buckets should be {HAND_BIGRAMS.tolist()}; yours are "
            f"{buckets.tolist()}: {hint}"
        )


@bob.check
def check_bag_hand_example(ctx):
    """The worked example: `[multi-hot tokens | multi-hot buckets]`, masked pairs not counted."""
    out = tools.expect_array(
        tools.jitted(ctx.student.bag_of_bigrams, 2, 3)(HAND_IDS, HAND_MASK, HAND_V, HAND_BUCKETS),
        "bag_of_bigrams",
        shape=(2, HAND_V + HAND_BUCKETS),
        dtype=np.float32,
        axes="(N, V + num_buckets)",
    )
    if not np.array_equal(out[:, :HAND_V], HAND_MULTI_HOT):
        tools.fail(
            f"the first V={HAND_V} columns of bag_of_bigrams should be the multi-hot vector of "
            f"the tokens, {HAND_MULTI_HOT.astype(int).tolist()}; yours are "
            f"{out[:, :HAND_V].tolist()} (unigrams first, then the bigram buckets)"
        )
    if not np.array_equal(out, HAND_BAG):
        extra = ""
        if out[0, HAND_V] == 1:
            extra = slip(
                "bag_of_bigrams/pair-mask-not-passed",
                ": bucket 0 is set, but the only pairs in bucket 0 touch the padding; pass the "
                "pair mask to multi_hot",
            )
        tools.fail(
            f"the bigram columns should be {HAND_BAG[:, HAND_V:].astype(int).tolist()}; yours "
            f"are {out[:, HAND_V:].tolist()}{extra}"
        )


@bob.check(gate=True, covers=("bigram_ids", "bag_of_bigrams"))
def check_bigrams_match_reference(ctx):
    """Random batches match the reference for both functions (under jax.jit)."""
    rng = ctx.rng()
    for batch, length, vocab, buckets in ((4, 9, 7, 13), (3, 20, 300, 64)):
        ids, mask = common.random_batch(rng, batch, length, vocab)
        label = f"on a random ({batch}, {length}) batch, V={vocab}, {buckets} buckets"
        want = tools.jitted(ctx.ref.bigram_ids, 2, 3)(ids, mask, vocab, buckets)
        got = tools.expect_tuple(
            tools.jitted(ctx.student.bigram_ids, 2, 3)(ids, mask, vocab, buckets), 2, "bigram_ids"
        )
        tools.expect_close(got[1], want[1], f"the pair mask of bigram_ids {label}")
        tools.expect_close(got[0], want[0], f"the buckets of bigram_ids {label}")
        what = f"bag_of_bigrams {label}"
        tools.expect_same_as_reference(
            ctx, "bag_of_bigrams", ids, mask, vocab, buckets, static=(2, 3), what=what
        )


# --------------------------------------------------------------------------------------------
# 3. tfidf

tf = common.EXERCISES["tfidf"]
# 4 reviews, 4 features. Feature 0 is everywhere (df 4), feature 1 in one review (df 1, with
# a count of 2 that must still count as one review), feature 2 in two reviews (df 2),
# feature 3 nowhere (df 0). The last review is empty.
TF_FEATURES = np.array([[1, 2, 1, 0], [1, 0, 0, 0], [1, 0, 1, 0], [1, 0, 0, 0]], np.float32)
TF_EMPTY = np.zeros((1, 4), np.float32)


@tf.check
def check_idf_hand_example(ctx):
    """`fit_idf` on a worked example: `log((1 + N) / (1 + df)) + 1`, df counts reviews."""
    got = tools.expect_array(
        ctx.student.fit_idf(TF_FEATURES), "fit_idf(features)", shape=(4,), axes="(F,)"
    )
    want = np.asarray(ctx.ref.fit_idf(TF_FEATURES), np.float64)
    if got.shape == want.shape and abs(got[1] - (math.log(5 / 4) + 1)) < 1e-4:
        tools.fail(
            "fit_idf: feature 1 appears in one review (with value 2); df counts the reviews "
            "where a feature is non-zero, not the sum of its values"
        )
    tools.expect_close(
        got,
        want,
        "fit_idf on the worked example (df = [4, 1, 2, 0], N = 4)",
        hint="idf = log((1 + N) / (1 + df)) + 1, with df the number of rows where the feature "
        "is non-zero (natural log).",
    )


@tf.check
def check_tfidf_hand_example(ctx):
    """`tfidf` weighs by idf then scales each row to norm 1; an empty row stays 0 (no NaN)."""
    idf = np.asarray(ctx.ref.fit_idf(TF_FEATURES), np.float32)
    features = np.concatenate([TF_FEATURES, TF_EMPTY])
    want = ctx.ref.tfidf(features, idf)
    got = tools.expect_array(
        ctx.student.tfidf(features, idf), "tfidf(features, idf)", shape=(5, 4), axes="(N, F)"
    )
    row_norms = np.sqrt((got.astype(np.float64) ** 2).sum(1))
    if not np.allclose(row_norms[:4], 1, atol=1e-4):
        tools.fail(
            f"every non-empty row of tfidf should have L2 norm 1 (the square root of the sum of "
            f"squares); yours have norms {np.round(row_norms[:4], 4).tolist()}"
        )
    tools.expect_close(
        got,
        want,
        "tfidf on the worked example",
        hint="Multiply each column by its idf first, then divide each row by its L2 norm; "
        "a row of zeros stays zeros.",
    )


@tf.check(gate=True, covers=("fit_idf", "tfidf"))
def check_tfidf_matches_reference(ctx):
    """Random features (with empty rows) match the reference for both functions (jax.jit)."""
    rng = ctx.rng()
    features = (rng.random((6, 9)) < 0.3).astype(np.float32) * rng.integers(1, 4, (6, 9))
    features[2] = 0
    idf = tools.expect_same_as_reference(
        ctx, "fit_idf", features, what="fit_idf on random features"
    )
    tools.expect_same_as_reference(ctx, "tfidf", features, idf, what="tfidf on random features")
