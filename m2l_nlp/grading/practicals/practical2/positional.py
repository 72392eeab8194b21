"""Graded checks of practical 2, positions: ``positional_encoding`` (the sinusoidal table
and the module that adds it)."""

from __future__ import annotations

import numpy as np

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import slip
from m2l_nlp.grading.practicals.practical2 import common
from m2l_nlp.grading.practicals.practical2.common import B, D, S

# --------------------------------------------------------------------------------------------
# 7. positional_encoding

pe = common.EXERCISES["positional_encoding"]


# The usual slips, each as the reference's table of other sizes (no closed form lives in the
# grader: its package is readable by the student's process). With D' = 2D, the exponent of
# feature j is 2(j // 2) / 2D = (j // 2) / D: the pair's number, not its even index.
_TABLE_SLIPS = (
    (
        lambda ref, n, d: ref(n, d)[:, np.arange(d) ^ 1] if d % 2 == 0 else None,
        slip(
            "positional_encoding/sine-and-cosine-swapped",
            "Yours has sine and cosine swapped: the even features (0, 2, ...) get the sine, the "
            "odd ones the cosine.",
        ),
    ),
    (
        lambda ref, n, d: ref(n + 1, d)[1:],
        slip(
            "positional_encoding/positions-from-1",
            "Yours counts positions from 1: the first position is 0, so its row is sin(0) = 0 and "
            "cos(0) = 1 alternating.",
        ),
    ),
    (
        lambda ref, n, d: np.zeros((n, d)),
        slip(
            "positional_encoding/set-result-dropped",
            "Yours is all zeros: JAX arrays cannot change, so `pe.at[...].set(...)` returns a new "
            "array and leaves `pe` as it was. Keep what it returns: `pe = pe.at[...].set(...)`.",
        ),
    ),
    (
        lambda ref, n, d: ref(n, 2 * d)[:, :d],
        slip(
            "positional_encoding/exponent-of-the-pair-number",
            "Yours divides by 10000^(i / d_model) with i the number of the pair: the exponent is "
            "2i / d_model, the index of the pair's even feature.",
        ),
    ),
)


def _table_hint(ctx, table, max_len: int, d_model: int) -> str:
    """Name the slip a wrong table shows, if it is one of the usual ones."""
    try:
        got = np.asarray(table, np.float64)
    except (TypeError, ValueError):
        return ""
    if got.shape != (max_len, d_model):  # the comparison says so
        return ""
    for slipped, hint in _TABLE_SLIPS:
        want = slipped(lambda n, d: np.asarray(ctx.ref.sinusoidal_encoding(n, d)), max_len, d_model)
        if want is not None and np.allclose(got, want, atol=1e-5):
            return hint
    return (
        "Even features (0, 2, ...) get the sine, odd features the cosine, of "
        "pos / 10000^(2i / d_model) where 2i is the even feature index of the pair."
    )


def _table_sizes(ctx) -> tuple[tuple[int, int], ...]:
    """``(max_len, d_model)`` pairs, an even and an odd ``d_model``: drawn from the grading
    seed when there is one, so that no table is the same from one grading to the next."""
    if tools.grading_seed() == 0:
        return ((50, 16), (10, 7))
    rng = ctx.rng("sizes")
    return (
        (int(rng.integers(20, 60)), 2 * int(rng.integers(4, 12))),
        (int(rng.integers(5, 15)), 2 * int(rng.integers(2, 6)) + 1),
    )


@pe.check
def check_table_shape_dtype(ctx):
    """`sinusoidal_encoding(max_len, d_model)` is a float32 `(max_len, d_model)` array."""
    for max_len, d_model in _table_sizes(ctx):
        table = ctx.student.sinusoidal_encoding(max_len, d_model)
        tools.expect_array(
            table,
            f"sinusoidal_encoding({max_len}, {d_model})",
            shape=(max_len, d_model),
            dtype=np.float32,
            axes="(max_len, d_model)",
        )


@pe.check(gate=True, covers=("sinusoidal_encoding",))
def check_table_closed_form(ctx):
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(same), odd D too."""
    for max_len, d_model in _table_sizes(ctx):
        table = ctx.student.sinusoidal_encoding(max_len, d_model)
        tools.expect_close(
            table,
            ctx.ref.sinusoidal_encoding(max_len, d_model),
            f"sinusoidal_encoding({max_len}, {d_model})",
            atol=1e-5,
            rtol=1e-5,
            hint=_table_hint(ctx, table, max_len, d_model),
        )


@tools.builder
def _pe(p: float, is_train: bool, max_len: int = 20):
    def build(ns):
        return lambda x: ns.PositionalEncoding(D, max_len, p, name="pe")(x, is_train)

    return build


PE = tools.WithDropout(_pe, lambda rng: (tools.normal(rng, B, S, D),), "PositionalEncoding")


@pe.check(gate=True, covers=("PositionalEncoding",))
def check_adds_table(ctx):
    """In evaluation, the output is `x + table[:S]` (under jax.jit)."""
    rng = ctx.rng()
    x = tools.normal(rng, B, S, D)
    tools.compare_module(
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
    out = tools.run_haiku(_pe(0.1, False), ctx.student, {}, np.zeros((B, S, D), np.float32))
    tools.expect_close(
        out,
        np.broadcast_to(np.asarray(ctx.ref.sinusoidal_encoding(20, D))[:S], (B, S, D)),
        "the output for x = 0 (it should be the table itself)",
    )


@pe.check
def check_too_long_raises(ctx):
    """A sequence longer than `max_len` raises `ValueError` that says so."""
    x = np.zeros((1, 25, D), np.float32)
    try:
        tools.run_haiku(_pe(0.1, False), ctx.student, {}, x)
    except ValueError:
        return
    except (NotImplementedError, AssertionError):
        raise
    except Exception as err:  # noqa: BLE001 - any other error is the wrong kind
        tools.fail(
            f"a sequence of 25 tokens with max_len=20 should raise ValueError with a clear "
            f"message; yours raised {type(err).__name__}: {err}"
        )
    tools.fail(
        "a sequence of 25 tokens with max_len=20 should raise ValueError; yours raised nothing"
    )


@pe.check
def check_pe_dropout(ctx):
    """Dropout after the addition in training only."""
    PE.expect_only_in_training(ctx)


@pe.check
def check_pe_training_matches_reference(ctx):
    """Training output (p_dropout=0.5) is the reference's: dropout on the sum, once."""
    PE.expect_trains_like(ctx, hint="Dropout goes on the sum of the input and the table, once.")
