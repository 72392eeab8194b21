"""Tests of m2l_nlp.grading.checks.tools: the assertions' messages say in words what is wrong,
and a build over draws crosses the wire as plain data; the grading seed; the comparisons of
a module with the reference (practical 2's feed-forward layer, the reference against itself
and against slips of it), and the statistics of its training mode."""

from __future__ import annotations

import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.registry import CheckFailure
from m2l_nlp.grading.checks.runner import Context, reference
from m2l_nlp.grading.checks.tools import expect_array, expect_close, expect_rows_sum_to_one
from m2l_nlp.grading.practicals.practical2.blocks import FFN, _ffn


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


def test_the_grading_seed_changes_every_input_and_is_restored():
    plain = tools.rng_for("ex", "check").standard_normal(3)
    np.testing.assert_array_equal(tools.rng_for("ex", "check").standard_normal(3), plain)
    assert not np.allclose(tools.rng_for("ex", "other").standard_normal(3), plain)
    assert tools.grading_seed() == 0
    with pytest.raises(KeyError), tools.seeded(7):
        assert tools.grading_seed() == 7
        assert not np.allclose(tools.rng_for("ex", "check").standard_normal(3), plain)
        assert not np.array_equal(tools.key_for(1), jax.random.PRNGKey(1))
        raise KeyError("inside")
    assert tools.grading_seed() == 0
    np.testing.assert_array_equal(tools.key_for(1), jax.random.PRNGKey(1))


def test_inputs_are_float32_and_perturbed_parameters_all_move():
    x = tools.normal(np.random.default_rng(0), 2, 3)
    assert x.shape == (2, 3) and x.dtype == np.float32
    params = {"linear": {"w": np.zeros((2, 3), np.float32), "b": np.zeros(3, np.float32)}}
    moved = tools.perturb(params, np.random.default_rng(0))
    again = tools.perturb(params, np.random.default_rng(0))
    for name in ("w", "b"):
        got = moved["linear"][name]
        assert got.shape == params["linear"][name].shape and got.dtype == np.float32
        assert (got != 0).all()
        np.testing.assert_array_equal(got, again["linear"][name])


def test_code_that_runs_elsewhere_is_handed_the_whole_call():
    asked = []

    class Remote(tools.Elsewhere):
        def run_haiku(self, build, params, args, key=None, jit=False):
            asked.append((build, params, args, key, jit))
            return "answered"

    class RemoteFunction(tools.ElsewhereFunction):
        def jitted(self, static_argnums=()):
            return lambda *args: ("jitted elsewhere", static_argnums, args)

    build = _ffn(0.1, False)
    assert tools.run_haiku(build, Remote(), {"p": 1}, 2, key="k", jit=False) == "answered"
    assert asked == [(build, {"p": 1}, (2,), "k", False)]
    assert tools.jitted(RemoteFunction(), 1)(5) == ("jitted elsewhere", (1,), (5,))
    assert tools.jitted(lambda x, n: x * n, 1)(jnp.ones(2), 3).tolist() == [3.0, 3.0]
    with pytest.raises(NotImplementedError):
        tools.Elsewhere().run_haiku(build, None, ())
    with pytest.raises(NotImplementedError):
        tools.ElsewhereFunction().jitted()


def test_what_was_returned_is_said_in_words():
    assert tools.kind_of((1, 2)) == "a tuple of 2 items"
    assert tools.kind_of(np.zeros((2, 3))) == "one array of shape (2, 3)"
    assert tools.kind_of(None) == "NoneType"
    assert tools.expect_tuple([1, 2], 2, "f") == [1, 2]
    with pytest.raises(CheckFailure, match="f should return a tuple of 2 items; yours returned"):
        tools.expect_tuple(np.zeros(3), 2, "f")


def test_a_function_is_compared_with_the_reference_under_jit():
    ref = types.SimpleNamespace(scale=lambda x, n: x * n)
    right = types.SimpleNamespace(scale=lambda x, n: n * x)
    wrong = types.SimpleNamespace(scale=lambda x, n: x * n + (x > 1))
    x = np.arange(3, dtype=np.float32)
    for student in (right, wrong):
        ctx = types.SimpleNamespace(ref=ref, student=student)
        if student is wrong:
            with pytest.raises(CheckFailure, match=r"scaled: mismatch .* at index \(2,\)"):
                tools.expect_same_as_reference(ctx, "scale", x, 2, static=(1,), what="scaled")
        else:
            want = tools.expect_same_as_reference(ctx, "scale", x, 2, static=(1,), what="scaled")
            np.testing.assert_array_equal(want, x * 2)


def test_two_outputs_that_vary_alike_score_about_one_and_others_far_more():
    copies, rng = tools.DRAWS, np.random.default_rng(0)

    def stats(samples):  # what over_draws returns, from (copies, 50) samples
        mean = samples.mean(0)
        centred = samples - mean
        return samples[0], mean, (centred**2).mean(0), (centred**4).mean(0)

    want = stats(rng.standard_normal((copies, 50)))
    alike = tools.draw_scores(stats(rng.standard_normal((copies, 50))), want, copies)
    wider = tools.draw_scores(stats(1.2 * rng.standard_normal((copies, 50))), want, copies)
    shifted = tools.draw_scores(stats(0.1 + rng.standard_normal((copies, 50))), want, copies)
    assert alike.shape == (50,) and 0.3 < alike.mean() < 2
    assert wider.mean() > tools.DRAW_SCORE and shifted.mean() > tools.DRAW_SCORE


# --------------------------------------------------------------------------------------------
# Practical 2's feed-forward layer as the module compared: the reference's copy passes every
# comparison, a slip of it fails the one that should catch it, with its words.

_SLIPS = {
    "no ReLU": [("jax.nn.relu(self.linear_1(x))", "self.linear_1(x)")],
    "no dropout": [
        ("hidden = hk.dropout(hk.next_rng_key(), self.p_dropout, hidden)", "hidden = hidden")
    ],
    "keep probability as the rate": [
        (
            "hk.dropout(hk.next_rng_key(), self.p_dropout, hidden)",
            "hk.dropout(hk.next_rng_key(), 1 - self.p_dropout, hidden)",
        )
    ],
    "dropout of the output": [  # the hidden layer's dropout moved to the output
        ("hidden = hk.dropout(hk.next_rng_key(), self.p_dropout, hidden)", "pass"),
        (
            "return self.linear_2(hidden)",
            "out = self.linear_2(hidden)\n"
            "        if is_train and self.p_dropout > 0:\n"
            "            out = hk.dropout(hk.next_rng_key(), self.p_dropout, out)\n"
            "        return out",
        ),
    ],
}


@pytest.fixture(scope="module")
def ffn_context(tmp_path_factory, _apply, _module_from):
    """``context(slip)``: a check's context of the feed-forward exercise, its student the
    reference's copy (``slip`` None) or a copy with ``slip`` made."""
    ex = load_exercises()["positionwise_feed_forward"]
    ref = reference("practical2_transformers")
    folder = tmp_path_factory.mktemp("ffn")

    def context(slip: str | None) -> Context:
        student = _module_from(_apply(_SLIPS[slip] if slip else []), folder)
        return Context(student, ref, ex, ex.checks[0])

    return context


def test_the_references_copy_passes_every_comparison_of_a_module(ffn_context):
    ctx = ffn_context(None)
    x = tools.normal(ctx.rng(), 2, 5, 12)
    params, (got,) = tools.compare_module(ctx, _ffn(0.1, False), x)
    assert np.asarray(got).shape == x.shape and set(params) == {"ffn/~/linear_1", "ffn/~/linear_2"}
    FFN.expect_evaluation_matches(ctx)
    FFN.expect_only_in_training(ctx)
    FFN.expect_trains_like(ctx)


def test_a_wrong_layer_fails_the_comparison_and_training_mode_says_why_it_stops(ffn_context):
    ctx = ffn_context("no ReLU")
    with pytest.raises(CheckFailure, match="mismatch with the reference.*Is the ReLU there"):
        FFN.expect_evaluation_matches(ctx, hint="Is the ReLU there?")
    with pytest.raises(CheckFailure, match="evaluation-mode output of .* already differs"):
        FFN.expect_trains_like(ctx)


def test_a_missing_dropout_is_caught_in_training_mode(ffn_context):
    ctx = ffn_context("no dropout")
    FFN.expect_evaluation_matches(ctx)  # evaluation mode is right
    with pytest.raises(CheckFailure, match="dropout should be active while training"):
        FFN.expect_only_in_training(ctx)
    with pytest.raises(CheckFailure, match="it does not vary at all"):
        FFN.expect_trains_like(ctx)


def test_a_keep_probability_given_as_the_rate_is_named(ffn_context):
    with pytest.raises(CheckFailure, match="takes the rate of dropping"):
        FFN.expect_only_in_training(ffn_context("keep probability as the rate"))


def test_dropout_in_the_wrong_place_varies_otherwise_than_the_references(ffn_context):
    ctx = ffn_context("dropout of the output")
    FFN.expect_only_in_training(ctx)  # it drops out in training, and only then
    with pytest.raises(CheckFailure, match=r"varies otherwise than the reference's over 4096"):
        FFN.expect_trains_like(ctx)
