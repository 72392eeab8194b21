"""The score table printed at the end of every graded run."""

from __future__ import annotations

import re
from typing import Any

from m2l_nlp.grading.checks.runner import ExerciseResult
from m2l_nlp.grading.checks.settings import GradingSettings


def score_table(results: list[ExerciseResult], exercises: int | None = None) -> str:
    """A plain-text table, one block per practical: exercise, status, checks passed, points;
    then the total and what to do next. ``exercises`` (all there are) lets the last line
    say how many were not graded in this run (``pytest -m NAME``)."""
    header = ("exercise", "status", "checks", "points")
    rows: list[tuple[str, ...] | str] = []
    practical = None
    for r in results:
        if r.exercise.practical != practical:
            practical = r.exercise.practical
            rows.append(practical)
        passed = sum(c.status == "passed" for c in r.checks)
        points = f"{r.points:g} / {r.exercise.points:g}"
        rows.append(("  " + r.exercise.name, r.status, f"{passed}/{len(r.checks)}", points))
    total = sum(r.points for r in results)
    best = sum(r.exercise.points for r in results)
    footer = ("total", "", "", f"{total:g} / {best:g}")
    cells = [header, footer, *(row for row in rows if isinstance(row, tuple))]
    widths = [max(len(row[i]) for row in cells) for i in range(4)]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(w) if i >= 2 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    rule = "-" * len(fmt(header))
    lines = [fmt(header), rule]
    lines += [row if isinstance(row, str) else fmt(row) for row in rows]
    lines += [rule, fmt(footer)]
    for r in results:
        if r.status == "incomplete":  # name the stubs left, which the table does not show
            left = dict.fromkeys(c.message for c in r.checks if c.status == "not started")
            lines += [
                f"{r.exercise.name}, still to write: {m.removeprefix('not started: ')}"
                for m in left
            ]
    lines += [f"{r.exercise.name}: {r.note}" for r in results if r.note]
    todo = [r.exercise.name for r in results if r.status != "passed"]
    left_out = (exercises or len(results)) - len(results)
    if not todo and left_out:
        done = [r.exercise.name for r in results]
        names = ", ".join(done) if len(done) <= 3 else f"{len(done)} exercises"
        lines.append(f"{names} passed; {left_out} exercises not graded in this run")
    elif not todo:
        lines.append("all exercises passed")
    else:
        names = ", ".join(todo) if len(todo) <= 3 else f"{len(todo)} exercises"
        lines.append(f"to do: {names}; work on one with `pytest -m {todo[0]}`")
    return "\n".join(lines)


def _fenced(text: str) -> str:
    """``text`` as a Markdown code block whose fence is longer than any run of backticks in
    it: whatever the student's code printed or raised is shown, never read as markup."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}text\n{text}\n{fence}"


def _markdown(r: ExerciseResult) -> str:
    """One exercise's feedback for Gradescope: status and points, then each check that did
    not pass by name and description, its message in a code block."""
    passed = sum(c.status == "passed" for c in r.checks)
    lines = [
        f"**{r.status}**: {passed}/{len(r.checks)} checks passed, "
        f"{r.points:g}/{r.exercise.points:g} points"
    ]
    if r.note:
        lines += ["", _fenced(r.note)]
    docs = {c.name: c.doc for c in r.exercise.checks}
    failed = [c for c in r.checks if c.status != "passed"]
    if len(failed) > 1 and len({c.message for c in failed}) == 1:  # e.g. not started: once
        names = ", ".join(f"**{c.check}**{r.worth(c.check)}" for c in failed)
        return "\n".join([*lines, "", names, "", _fenced(failed[0].message)])
    for c in failed:
        lines += ["", f"**{c.check}**{r.worth(c.check)}: {docs.get(c.check, '')}", ""]
        lines.append(_fenced(c.message))
    return "\n".join(lines)


def results_json(
    results: list[ExerciseResult],
    notes: list[str],
    settings: GradingSettings | None = None,
) -> dict[str, Any]:
    """Gradescope's ``results.json`` for the graded exercises, its feedback in Markdown
    (``notes``: what is said first, e.g. a file that does not import). The hidden
    exercises' results are shown as ``settings`` says, and count in the score if it says so;
    the grader's log (stdout) is the instructor's."""
    settings = settings or GradingSettings()
    practicals = list(dict.fromkeys(r.exercise.practical for r in results))
    tests, counted = [], 0.0
    numbers: dict[str, int] = {}
    for r in results:
        ex = r.exercise
        numbers[ex.practical] = numbers.get(ex.practical, 0) + 1
        hidden = ex.hidden
        tests.append(
            {
                "name": ex.name + (" (hidden)" if hidden else ""),
                "number": f"{practicals.index(ex.practical) + 1}.{numbers[ex.practical]}",
                "score": r.points,
                "max_score": ex.points,
                "status": "passed" if r.status == "passed" else "failed",
                "output": _markdown(r),
                "output_format": "md",
                "tags": [ex.practical, ex.name] + (["hidden"] if hidden else []),
                "visibility": settings.hidden_visibility if hidden else "visible",
                "execution_time": round(r.seconds, 2),
            }
        )
        if not hidden or settings.hidden_in_total:
            counted += r.points
    rows = ["| practical | points |", "|---|---|"]
    for practical in practicals:
        shown = [r for r in results if r.exercise.practical == practical and not r.exercise.hidden]
        if shown:
            earned, best = sum(r.points for r in shown), sum(r.exercise.points for r in shown)
            rows.append(f"| {practical} | {earned:g} / {best:g} |")
    output = "\n\n".join([*(_fenced(n) for n in notes), "\n".join(rows)])
    # every check's verdict, for the instructor's gradebook (Gradescope shows students none)
    checks = [
        {
            "exercise": r.exercise.name,
            "check": c.check,
            "status": c.status,
            **({"hint": c.hint} if c.hint else {}),
        }
        for r in results
        for c in r.checks
    ]
    return {
        "score": round(counted, 2),
        "execution_time": round(sum(r.seconds for r in results), 2),
        "output": output,
        "output_format": "md",
        "test_output_format": "md",
        "stdout_visibility": "hidden",
        "tests": tests,
        "extra_data": {"checks": checks},
    }
