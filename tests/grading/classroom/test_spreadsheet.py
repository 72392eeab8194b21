"""m2l_nlp.grading.classroom.spreadsheet: the CSV an LMS imports, one row per student."""

from __future__ import annotations

import csv

from m2l_nlp.grading.classroom.exports import Submitter
from m2l_nlp.grading.classroom.gradebook import Row
from m2l_nlp.grading.classroom.spreadsheet import safe_cell, write_csv

ROWS = [
    Row(
        "s1",
        (Submitter("Ada", "ada@x.org", "1"),),
        25.0,
        None,
        {"multi_hot": (10, 10, False), "extra": (5, 5, True)},
    ),
    Row(
        "s2",
        (Submitter("=cmd|' /C calc'!A0", "e@x.org", "2"), Submitter("Bo", "b@x.org", "3")),
        7.5,
        None,
        {"multi_hot": (7.5, 10, False)},
    ),
    Row("s3", (), None, "no autograder results", {}),
]


def _read(path):
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


def test_one_row_per_student_with_the_total_and_each_exercise(tmp_path):
    assert write_csv(ROWS, tmp_path / "grades.csv") == 4
    rows = _read(tmp_path / "grades.csv")
    assert list(rows[0]) == [
        "Student",
        "SIS User ID",
        "Email address",
        "Submission",
        "Total",
        "multi_hot",
        "Note",
    ]
    assert [(r["Student"], r["Total"], r["multi_hot"]) for r in rows] == [
        ("Ada", "25", "10"),
        ("'=cmd|' /C calc'!A0", "7.5", "7.5"),
        ("Bo", "7.5", "7.5"),
        ("", "", ""),
    ]
    assert rows[3]["Note"] == "no autograder results"
    write_csv(ROWS, tmp_path / "all.csv", hidden=True)
    assert _read(tmp_path / "all.csv")[0]["extra (hidden)"] == "5"


def test_no_text_cell_can_run_as_a_formula():
    for text in ("=1+1", "+1", "-1", "@SUM(A1)", "\t=1", "\r=1"):
        assert safe_cell(text) == "'" + text
    assert safe_cell("Ada") == "Ada" and safe_cell(-2.5) == "-2.5"  # a number stays one


def test_the_header_cannot_run_as_a_formula_either(tmp_path):
    rows = [Row("s", (), 1.0, None, {"=HYPERLINK(1)": (1.0, 1.0, False)})]
    write_csv(rows, tmp_path / "g.csv")
    assert (tmp_path / "g.csv").read_text().splitlines()[0].endswith(",'=HYPERLINK(1),Note")
