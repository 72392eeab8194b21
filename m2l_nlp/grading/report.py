"""The score table printed at the end of every graded run."""

from __future__ import annotations

from typing import Any

from m2l_nlp.grading.runner import ExerciseResult


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


def results_json(results: list[ExerciseResult], import_errors: list[str]) -> dict[str, Any]:
    """Gradescope's ``results.json`` content for the graded exercises."""
    tests = []
    for r in results:
        output = "\n".join(r.messages()) or f"all {len(r.checks)} checks passed"
        tests.append(
            {
                "name": r.exercise.name,
                "score": r.points,
                "max_score": r.exercise.points,
                "status": "passed" if r.status == "passed" else "failed",
                "output": f"{r.status}: {output}",
                "visibility": "visible",
            }
        )
    data: dict[str, Any] = {"score": sum(r.points for r in results), "tests": tests}
    if import_errors:
        data["output"] = "\n\n".join(import_errors)
    return data
