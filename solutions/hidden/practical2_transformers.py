"""Hidden checks of practical 2: graded by the autograder only, never shipped to students.

This folder sits inside ``solutions/``, so ``make handout`` leaves it out and the installed
autograder keeps it root's only. The checks are written like the public ones (``exercise(...,
hidden=True)`` and ``@ex.check``); a haiku build must be a public one
(``m2l_nlp.grading.practicals``), since the process that runs the student's code rebuilds it
by name and cannot read this file.
How Gradescope shows their results (after the due date, by default) and whether their
points count: ``[hidden]`` in ``grading.toml``.
"""

from __future__ import annotations

import numpy as np

from m2l_nlp.grading.checks.registry import exercise
from m2l_nlp.grading.checks.tools import expect_close, jitted, normal, perturb, run_haiku
from m2l_nlp.grading.practicals.practical2.attention import _mha_build
from m2l_nlp.grading.practicals.practical2.common import B, D

PRACTICAL = "practical2_transformers"

longer = exercise(
    "attention_beyond_the_examples",
    PRACTICAL,
    points=10,
    targets=("scaled_dot_product", "MultiheadAttention"),
    title="attention on longer sequences, more leading axes and one visible key",
    hidden=True,
)


@longer.check(gate=True, covers=("scaled_dot_product",))
def check_longer_sequences_and_more_axes(ctx):
    """`scaled_dot_product` with three leading axes and 40 keys matches the reference."""
    rng = ctx.rng()
    q, k, v = normal(rng, 2, 2, 3, 7, 8), normal(rng, 2, 2, 3, 40, 8), normal(rng, 2, 2, 3, 40, 5)
    mask = (rng.random((2, 2, 3, 7, 40)) < 0.5).astype(np.int32)
    mask[..., 0] = 1
    want = jitted(ctx.ref.scaled_dot_product)(q, k, v, mask)
    got = jitted(ctx.student.scaled_dot_product)(q, k, v, mask)
    expect_close(got[1], want[1], "the attention weights (three leading axes, 40 keys)")
    expect_close(got[0], want[0], "the values (three leading axes, 40 keys)")


@longer.check(gate=True, covers=("MultiheadAttention",))
def check_longer_sequences_through_heads(ctx):
    """`MultiheadAttention` on 30 keys and a random mask matches the reference."""
    rng = ctx.rng()
    q, k, v = normal(rng, B, 11, D), normal(rng, B, 30, D), normal(rng, B, 30, D)
    mask = (rng.random((B, 11, 30)) < 0.6).astype(np.int32)
    mask[..., 0] = 1
    params = perturb(run_haiku(_mha_build, ctx.ref, None, q, k, v, mask), ctx.rng("params"))
    want = run_haiku(_mha_build, ctx.ref, params, q, k, v, mask)
    got = run_haiku(_mha_build, ctx.student, params, q, k, v, mask)
    expect_close(got[0], want[0], "MultiheadAttention's output (30 keys, a random mask)")
    expect_close(got[1], want[1], "MultiheadAttention's weights (30 keys, a random mask)")


@longer.check
def check_one_visible_key(ctx):
    """Where the mask leaves one key, every query copies that key's value."""
    rng = ctx.rng()
    q, k, v = normal(rng, B, 9, D), normal(rng, B, 9, D), normal(rng, B, 9, D)
    mask = np.zeros((B, 9), np.int32)
    mask[:, 4] = 1
    params = perturb(run_haiku(_mha_build, ctx.ref, None, q, k, v, mask), ctx.rng("params"))
    want = run_haiku(_mha_build, ctx.ref, params, q, k, v, mask)
    got = run_haiku(_mha_build, ctx.student, params, q, k, v, mask)
    expect_close(got[0], want[0], "MultiheadAttention's output with one visible key")
