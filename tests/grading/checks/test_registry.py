"""Tests of m2l_nlp.grading.checks.registry: which targets an exercise's gates cover."""

from __future__ import annotations

import pytest

from m2l_nlp.grading.checks.registry import Exercise


def test_a_gate_covers_the_targets_it_names_and_one_target_by_default():
    def check_a(ctx):
        """a"""

    def check_b(ctx):
        """b"""

    def check_c(ctx):
        """c"""

    one = Exercise("one_target", "p", 1, ("f",))
    one.check(gate=True)(check_a)
    one.check(check_b)  # not a gate: covers nothing unless it says so
    assert [c.covers for c in one.checks] == [("f",), ()]
    assert one.uncovered() == []
    two = Exercise("two_targets", "p", 1, ("f", "G"))
    two.check(gate=True)(check_a)  # which of the two it compares is not guessed
    two.check(gate=True, covers=("f",))(check_b)
    assert two.uncovered() == ["G"]
    with pytest.raises(ValueError, match=r"'c' of 'two_targets' covers H, not a target .*: f, G"):
        two.check(gate=True, covers=("H",))(check_c)


def test_a_message_is_named_by_the_longest_slip_it_holds():
    from m2l_nlp.grading.checks.registry import named_slip, slip

    slip("demo_registry/short", "the scores of the demo")
    slip("demo_registry/long", "the scores of the demo, left unscaled")
    assert named_slip("yours are the scores of the demo here") == "demo_registry/short"
    assert named_slip("... the scores of the demo, left unscaled: ...") == "demo_registry/long"
    assert named_slip("nothing a slip names") is None
