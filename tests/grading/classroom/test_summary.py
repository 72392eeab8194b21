"""m2l_nlp.grading.classroom.summary: the class report (Markdown, PNG plots, an HTML page
that opens offline), its figures, and what it leaves hidden."""

from __future__ import annotations

import pytest

from m2l_nlp.grading.classroom.exports import Submitter
from m2l_nlp.grading.classroom.gradebook import CheckRow, Row
from m2l_nlp.grading.classroom.summary import (
    check_failures,
    exercise_stats,
    slip_counts,
    write_report,
)

HOSTILE = "<script>alert(1)</script>"
ROWS = [
    Row(
        "s1",
        (Submitter(HOSTILE, "a@x", "1"),),
        25,
        None,
        {"multi_hot": (10, 10, False), "tfidf": (10, 10, False), "extra": (5, 5, True)},
    ),
    Row("s2", (), 10, None, {"multi_hot": (10, 10, False), "tfidf": (0, 10, False)}),
    Row("s3", (), 7.5, None, {"multi_hot": (5, 10, False), "tfidf": (2.5, 10, False)}),
    Row("s4", (), None, "no results", {}),
]
CHECKS = [
    CheckRow("s1", "tfidf", "norm", "passed", None, False),
    CheckRow("s2", "tfidf", "norm", "failed", "tfidf.l1-norm", False),
    CheckRow("s3", "tfidf", "norm", "failed", "tfidf.l1-norm", False),
    CheckRow("s3", "multi_hot", HOSTILE, "failed", None, False),
    CheckRow("s1", "extra", "secret_check", "failed", "extra.slip", True),
    CheckRow("s2", "multi_hot", "shapes", "passed", None, False),
]


def test_each_exercises_mean_median_and_shares():
    stats = {s.name: s for s in exercise_stats(ROWS[:3], show_hidden=False)}
    assert list(stats) == ["multi_hot", "tfidf"]
    tfidf = stats["tfidf"]
    assert tfidf.mean == pytest.approx(12.5 / 3) and tfidf.median == 2.5
    assert (tfidf.full, tfidf.zero) == (pytest.approx(1 / 3), pytest.approx(1 / 3))
    assert tfidf.partial == pytest.approx(1 / 3)
    assert "extra" in {s.name for s in exercise_stats(ROWS[:3], show_hidden=True)}


def test_checks_and_slips_counted_the_most_common_first_hidden_left_out():
    assert check_failures(CHECKS, show_hidden=False)[:2] == [
        ("multi_hot", HOSTILE, 1.0),
        ("tfidf", "norm", pytest.approx(2 / 3)),
    ]
    assert ("multi_hot", "shapes", 0.0) in check_failures(CHECKS, False)
    assert all(c != "secret_check" for _, c, _ in check_failures(CHECKS, False))
    assert slip_counts(CHECKS, show_hidden=False) == [("tfidf.l1-norm", 2)]
    assert ("extra.slip", 1) in slip_counts(CHECKS, show_hidden=True)


def test_the_report_is_written_whole_and_its_page_escapes_every_text(tmp_path):
    written = write_report(ROWS, CHECKS, tmp_path / "out")
    assert sorted(p.name for p in written) == sorted(
        ["report.md", "report.html", "totals.png", "exercises.png", "checks.png"]
    )
    for png in (tmp_path / "out").glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (tmp_path / "out" / "report.html").read_text()
    assert HOSTILE not in page and "&lt;script&gt;" in page
    assert "src='data:image/png;base64," in page and "secret_check" not in page
    markdown = (tmp_path / "out" / "report.md").read_text()
    assert "| tfidf | norm | 67% |" in markdown and "| tfidf.l1-norm | 2 |" in markdown
    assert "| 4 | 3 | 12.5 | 10 | 7.5 | 20 |" in markdown  # s1's 25 less its hidden 5


def test_a_name_with_a_line_break_stays_in_its_markdown_cell(tmp_path):
    checks = [CheckRow("s1", "tfidf", "norm\n# You passed", "failed", None, False)]
    write_report(ROWS[:1], checks, tmp_path)
    markdown = (tmp_path / "report.md").read_text()
    assert "\n# You passed" not in markdown and "| tfidf | norm # You passed | 100% |" in markdown
