"""Tests of m2l_nlp.grading.checks.report: the score table's totals and statuses."""

from __future__ import annotations

from m2l_nlp.grading.checks.registry import Exercise
from m2l_nlp.grading.checks.report import score_table
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    ExerciseResult,
)


def test_score_table_totals_and_statuses():
    ex1 = Exercise("alpha", "p", 10, ("a",))
    ex2 = Exercise("beta", "p", 5, ("b",))
    results = [
        ExerciseResult(ex1, [CheckResult("alpha", "c", "passed")]),
        ExerciseResult(
            ex2, [CheckResult("beta", "c", "passed"), CheckResult("beta", "d", "failed")]
        ),
    ]
    table = score_table(results)
    assert "alpha" in table and "passed" in table and "10 / 10" in table
    assert "beta" in table and "failed" in table and "1/2" in table and "0 / 5" in table
    assert "10 / 15" in table.splitlines()[-2]
