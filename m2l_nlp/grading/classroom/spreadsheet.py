"""The gradebook as a CSV file an LMS imports: one row per student (each member of a group
submission has their own), the total and each exercise's points.

Columns: ``Student`` and ``SIS User ID`` (Canvas matches its students by them), ``Email
address`` (Moodle matches its users by it), ``Submission``, ``Total`` (results.json's score,
the one Gradescope posts), then one column per exercise in the course's order; the hidden
exercises (their names end in ``(hidden)``) only with ``hidden=True``. A submission with no
results has an empty total and its reason in ``Note``. A cell of text that begins with ``=``,
``+``, ``-`` or ``@`` (or a tab or a carriage return), which a spreadsheet would run as a
formula, gets a leading ``'``.
"""

from __future__ import annotations

import csv
from pathlib import Path

from m2l_nlp.fileio import atomic_file
from m2l_nlp.grading.classroom.gradebook import Row

FIXED = ("Student", "SIS User ID", "Email address", "Submission", "Total")
FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value: object) -> str:
    """``value`` as a cell: numbers as they are, text a spreadsheet cannot run."""
    if isinstance(value, float | int):
        return f"{value:g}"
    text = str(value)
    return "'" + text if text.startswith(FORMULA_STARTS) else text


def exercise_columns(rows: list[Row], hidden: bool) -> list[str]:
    """The exercises' columns, in the order the results list them."""
    names: dict[str, None] = {}
    for row in rows:
        for name, (_, _, is_hidden) in row.exercises.items():
            if hidden or not is_hidden:
                names[name + (" (hidden)" if is_hidden else "")] = None
    return list(names)


def write_csv(rows: list[Row], path: Path, hidden: bool = False) -> int:
    """Write the CSV (whole, or not at all); returns the number of students' rows."""
    columns = exercise_columns(rows, hidden)
    written = 0
    with atomic_file(path, "w", newline="", encoding="utf-8") as handle:
        out = csv.writer(handle)
        out.writerow([safe_cell(c) for c in [*FIXED, *columns, "Note"]])
        for row in rows:
            points = {
                name + (" (hidden)" if is_hidden else ""): score
                for name, (score, _, is_hidden) in row.exercises.items()
            }
            total = "" if row.score is None else row.score  # results.json's, as Gradescope's
            for person in row.submitters or (None,):
                name, sid, email = (person.name, person.sid, person.email) if person else ("",) * 3
                cells = [name, sid, email, row.submission, total]
                cells += [points.get(column, "") for column in columns]
                out.writerow([safe_cell(c) for c in [*cells, row.error or ""]])
                written += 1
    return written
