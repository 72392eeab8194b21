"""Tests of m2l_nlp.grading.checks.report: the score table's totals and statuses, and
Gradescope's results.json."""

from __future__ import annotations

import json

import pytest

from m2l_nlp.grading.checks import registry
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.registry import Exercise, slip
from m2l_nlp.grading.checks.report import results_json, score_table
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    ExerciseResult,
)
from m2l_nlp.grading.checks.settings import GradingSettings


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


def _result(name: str, statuses: dict[str, str], message: str = "") -> ExerciseResult:
    ex = load_exercises()[name]
    return ExerciseResult(ex, [CheckResult(name, c, s, message) for c, s in statuses.items()])


def test_results_json_is_markdown_that_student_text_cannot_mark_up():
    hostile = "```\n# You got full marks\n<img src=x onerror=alert(1)> **bold** ````"
    sdp = _result(
        "scaled_dot_product",
        {"shapes": "passed", "matches_reference": "failed"},
        f"your code raised ValueError: {hostile}",
    )
    sdp.seconds = 1.25
    data = results_json([sdp], [f"practical2_transformers.py, line 3: {hostile}"])
    assert data["output_format"] == data["test_output_format"] == "md"
    assert data["stdout_visibility"] == "hidden"
    (test,) = data["tests"]
    assert test["number"] == "1.1" and test["tags"] == [
        "practical2_transformers",
        sdp.exercise.name,
    ]
    assert test["execution_time"] == 1.25 and test["visibility"] == "visible"
    assert "**matches_reference**: Values and weights match the reference" in test["output"]
    for text in (test["output"], data["output"]):  # inside a fence longer than any inside
        fence = "`````text\n"
        start = text.index(fence)
        assert hostile in text[start:] and text[start:].count("\n`````") == 1
    json.dumps(data)


def test_hidden_results_are_shown_and_counted_as_the_settings_say():
    sdp = _result("scaled_dot_product", dict.fromkeys(["shapes"], "passed"))
    hidden = ExerciseResult(
        registry.Exercise("extra", "practical2_transformers", 10, ("f",), hidden=True),
        [CheckResult("extra", "c", "passed")],
    )
    counted = results_json([sdp, hidden], [], GradingSettings())
    assert counted["score"] == sdp.points + 10
    assert counted["tests"][1]["visibility"] == "after_due_date"
    assert counted["tests"][1]["name"] == "extra (hidden)"
    apart = results_json([sdp, hidden], [], GradingSettings(hidden_in_total=False))
    assert apart["score"] == sdp.points and "| practical2_transformers |" in apart["output"]


def test_every_checks_verdict_is_kept_for_the_instructor_without_its_message():
    sdp = _result("scaled_dot_product", {"shapes": "passed", "masking": "failed"}, "secret")
    data = results_json([sdp], [])
    assert data["extra_data"]["checks"] == [
        {"exercise": "scaled_dot_product", "check": "shapes", "status": "passed"},
        {"exercise": "scaled_dot_product", "check": "masking", "status": "failed"},
    ]
    assert "secret" not in json.dumps(data["extra_data"])


def test_a_named_slip_is_kept_by_its_id_and_student_words_name_none():
    """A failed check whose message holds a slip's words (registry.slip) carries its id; the
    words that name no slip give none, and a passed check none."""
    words = slip("scaled_dot_product/test-slip-4f1e", "the test's slip, in words")
    sdp = _result("scaled_dot_product", {"shapes": "passed", "masking": "failed"}, f"x: {words}")
    assert [c.hint for c in sdp.checks] == [None, "scaled_dot_product/test-slip-4f1e"]
    data = results_json([sdp], [])
    assert data["extra_data"]["checks"][1]["hint"] == "scaled_dot_product/test-slip-4f1e"
    assert "hint" not in data["extra_data"]["checks"][0]
    assert CheckResult("e", "c", "failed", "the test's slip").hint is None
    with pytest.raises(ValueError, match="already names"):
        slip("scaled_dot_product/another-id", "the test's slip, in words")
