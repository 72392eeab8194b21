"""The score table printed at the end of every graded run."""

from __future__ import annotations

from m2l_nlp.grading.runner import ExerciseResult


def score_table(results: list[ExerciseResult]) -> str:
    """A plain-text table: exercise, status, checks passed, points; then the total."""
    rows = [("exercise", "status", "checks", "points")]
    for r in results:
        passed = sum(c.status == "passed" for c in r.checks)
        rows.append(
            (
                r.exercise.name,
                r.status,
                f"{passed}/{len(r.checks)}",
                f"{r.points:g} / {r.exercise.points:g}",
            )
        )
    total = sum(r.points for r in results)
    best = sum(r.exercise.points for r in results)
    widths = [max(len(row[i]) for row in rows) for i in range(4)]

    def fmt(row: tuple[str, ...]) -> str:
        return "  ".join(
            cell.rjust(w) if i >= 2 else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ).rstrip()

    rule = "-" * len(fmt(rows[0]))
    lines = [fmt(rows[0]), rule, *(fmt(row) for row in rows[1:]), rule]
    lines.append(fmt(("total", "", "", f"{total:g} / {best:g}")))
    todo = [r.exercise.name for r in results if r.status != "passed"]
    if todo:
        lines.append(f"to do: {', '.join(todo)} (work on one with `pytest -m {todo[0]}`)")
    else:
        lines.append("all exercises passed")
    return "\n".join(lines)
