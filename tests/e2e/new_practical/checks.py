"""Checks of practical 9 (a test's)."""

from m2l_nlp.grading.checks.registry import exercise
from m2l_nlp.grading.checks.tools import expect_close, jitted, normal
from m2l_nlp.grading.practicals.practical2.common import _mask

attend = exercise("self_attention", "practical9_demo", 5, targets=("self_attention",))


@attend.check(gate=True)
def check_matches_reference(ctx):
    """`self_attention` matches the reference on a padded batch."""
    rng = ctx.rng()
    x, mask = normal(rng, 2, 5, 4), _mask(rng, 2, 5)
    want = jitted(ctx.ref.self_attention)(x, mask)
    expect_close(jitted(ctx.student.self_attention)(x, mask), want, "output")
