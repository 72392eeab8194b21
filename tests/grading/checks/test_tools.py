"""Tests of m2l_nlp.grading.checks.tools: the assertions' messages say in words what is wrong,
and a build over draws crosses the wire as plain data."""

from __future__ import annotations

import numpy as np
import pytest

from m2l_nlp.grading.checks.registry import CheckFailure
from m2l_nlp.grading.checks.runner import (
    reference,
)
from m2l_nlp.grading.checks.tools import expect_array, expect_close, expect_rows_sum_to_one


def test_messages_say_what_is_wrong():
    with pytest.raises(CheckFailure, match=r"sum to 1\.37 at index \(0, 1\)"):
        w = np.array([[0.5, 0.5], [1.0, 0.37]])
        expect_rows_sum_to_one(w[None], "attention weights")
    with pytest.raises(CheckFailure, match=r"should have shape \(2, 3\) \(B, S\); yours has"):
        expect_array(np.zeros((3, 2)), "x", shape=(2, 3), axes="(B, S)")
    with pytest.raises(CheckFailure, match="should have dtype float32; yours has dtype int32"):
        expect_array(np.zeros(2, np.int32), "x", dtype=np.float32)
    with pytest.raises(CheckFailure, match=r"x: NaN values \(1 of 2\), the first at index \(1,\)"):
        expect_array(np.array([0.0, np.nan]), "x")
    with pytest.raises(
        CheckFailure,
        match=r"x: mismatch with the reference: at index \(1,\) yours is 2\.5, the reference has 2",
    ):
        expect_close(np.array([1.0, 2.5]), np.array([1.0, 2.0]), "x")
    with pytest.raises(
        CheckFailure, match=r"mismatch with your first run: .* your first run has 2"
    ):
        expect_close(np.array([1.0, 2.5]), np.array([1.0, 2.0]), "x", versus="your first run")
    with pytest.raises(CheckFailure, match=r"x: NaN at index \(1,\), where the reference has 2"):
        expect_close(np.array([1.0, np.nan]), np.array([1.0, 2.0]), "x")
    with pytest.raises(CheckFailure, match="did you forget a `return`"):
        expect_array(None, "x")
    expect_close(np.array([1.0, 2.0 + 1e-7]), np.array([1.0, 2.0]), "x")  # within tolerance


def test_a_build_over_draws_crosses_the_wire_and_nothing_outside_the_checks_builds():
    """``draws_of`` names its build by plain data (what a worker or a record holds): rebuilt
    from that data, it runs the module on every copy; a build named outside the checks'
    own modules is refused."""
    from m2l_nlp.grading.checks import wire
    from m2l_nlp.grading.checks.tools import DRAW_P, BuildSpec, draws_of, key_for, run_haiku
    from m2l_nlp.grading.practicals.practical2.blocks import _ffn

    plain = wire.from_plain(wire.to_plain(draws_of(_ffn(DRAW_P, True))(3).plain()))
    rebuilt = BuildSpec(plain["module"], plain["name"], tuple(plain["args"]))
    ref = reference("practical2_transformers")
    x = np.random.default_rng(0).standard_normal((2, 5, 12)).astype(np.float32)
    params = run_haiku(_ffn(0.1, False), ref, None, x)
    first, mean, var, _ = run_haiku(rebuilt, ref, params, x, key=key_for(1))
    assert first.shape == mean.shape == x.shape
    assert float(np.asarray(var).max()) > 0  # each copy drew masks of its own
    with pytest.raises(ValueError, match="builds come from"):
        BuildSpec("os", "system", ("true",))(ref)
