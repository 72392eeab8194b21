"""Where the class struggles, from the gradebook: ``report.md``, three PNG plots and
``report.html`` (one file, its plots inside it, that opens offline).

- the distribution of the totals;
- per exercise: mean, median, and the share of submissions at full, partial and zero points;
- per check: the share of submissions that failed it;
- per named slip: how many submissions got its hint (by hint id), where the results carry ids.

A hidden exercise and its checks are left out unless ``show_hidden`` (after the due date).
Every text that came from a submission or the gradebook is escaped in the HTML.
"""

from __future__ import annotations

import base64
import html
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure

from m2l_nlp.fileio import atomic_file
from m2l_nlp.grading.classroom.gradebook import CheckRow, Row
from m2l_nlp.plotting import save_figure

PLOTS = ("totals.png", "exercises.png", "checks.png")


@dataclass(frozen=True)
class ExerciseStats:
    name: str
    max_score: float
    mean: float
    median: float
    full: float  # shares of the graded submissions
    partial: float
    zero: float


def exercise_stats(rows: list[Row], show_hidden: bool) -> list[ExerciseStats]:
    """Each exercise's figures over the submissions that have results, in the course's order."""
    scores: dict[str, list[float]] = defaultdict(list)
    best: dict[str, float] = {}
    for row in rows:
        for name, (score, max_score, hidden) in row.exercises.items():
            if show_hidden or not hidden:
                scores[name].append(score)
                best[name] = max_score
    stats = []
    for name, values in scores.items():
        n = len(values)
        full = sum(v >= best[name] for v in values) / n
        zero = sum(v <= 0 for v in values) / n
        stats.append(
            ExerciseStats(
                name,
                best[name],
                statistics.fmean(values),
                statistics.median(values),
                full,
                1 - full - zero,
                zero,
            )
        )
    return stats


def check_failures(checks: list[CheckRow], show_hidden: bool) -> list[tuple[str, str, float]]:
    """``(exercise, check, share failed)`` of each check, the most failed first."""
    runs: Counter[tuple[str, str]] = Counter()
    failed: Counter[tuple[str, str]] = Counter()
    for c in checks:
        if show_hidden or not c.hidden:
            runs[c.exercise, c.check] += 1
            failed[c.exercise, c.check] += c.status != "passed"
    shares = [(e, c, failed[e, c] / n) for (e, c), n in runs.items()]
    return sorted(shares, key=lambda s: -s[2])


def slip_counts(checks: list[CheckRow], show_hidden: bool) -> list[tuple[str, int]]:
    """``(hint id, submissions that got it)``, the most common first."""
    got = Counter(
        c.hint for c in checks if c.hint and (show_hidden or not c.hidden) and c.status != "passed"
    )
    return got.most_common()


def write_report(
    rows: list[Row], checks: list[CheckRow], folder: Path, show_hidden: bool = False
) -> list[Path]:
    """Write the report's files into ``folder``; returns their paths."""
    graded = [r for r in rows if r.score is not None]
    stats = exercise_stats(graded, show_hidden)
    failures = check_failures(checks, show_hidden)
    slips = slip_counts(checks, show_hidden)
    totals = [_total(r, show_hidden) for r in graded]
    folder.mkdir(parents=True, exist_ok=True)
    figures = (_totals_figure(totals), _exercises_figure(stats), _checks_figure(failures[:20]))
    paths = [save_figure(fig, folder / name) for fig, name in zip(figures, PLOTS, strict=True)]
    sections = _sections(rows, graded, totals, stats, failures, slips, show_hidden)
    with atomic_file(folder / "report.md", "w", encoding="utf-8") as handle:
        handle.write(_markdown(sections))
    with atomic_file(folder / "report.html", "w", encoding="utf-8") as handle:
        handle.write(_html(sections, paths))
    return [folder / "report.md", folder / "report.html", *paths]


def _total(row: Row, show_hidden: bool) -> float:
    return sum(s for s, _, hidden in row.exercises.values() if show_hidden or not hidden)


@dataclass(frozen=True)
class _Section:
    title: str
    header: tuple[str, ...]
    rows: list[tuple[str, ...]]
    note: str = ""


def _sections(rows, graded, totals, stats, failures, slips, show_hidden) -> list[_Section]:
    hidden_note = "" if show_hidden else " Hidden exercises are left out (--show-hidden)."
    summary = _Section(
        "Totals",
        ("submissions", "with results", "mean", "median", "min", "max"),
        [
            (
                str(len(rows)),
                str(len(graded)),
                *(
                    (
                        f"{statistics.fmean(totals):.1f}",
                        f"{statistics.median(totals):g}",
                        f"{min(totals):g}",
                        f"{max(totals):g}",
                    )
                    if totals
                    else ("-",) * 4
                ),
            )
        ],
        "Totals are the sum of the exercises shown." + hidden_note,
    )
    exercises = _Section(
        "Exercises",
        ("exercise", "points", "mean", "median", "full", "partial", "zero"),
        [
            (
                s.name,
                f"{s.max_score:g}",
                f"{s.mean:.1f}",
                f"{s.median:g}",
                f"{s.full:.0%}",
                f"{s.partial:.0%}",
                f"{s.zero:.0%}",
            )
            for s in stats
        ],
    )
    checks = _Section(
        "Checks, the most failed first",
        ("exercise", "check", "failed by"),
        [(e, c, f"{share:.0%}") for e, c, share in failures],
        "" if failures else "The results carry no check's verdict (an older grader's).",
    )
    named = _Section(
        "Named slips",
        ("hint", "submissions"),
        [(hint, str(n)) for hint, n in slips],
        "" if slips else "No named slip's hint id is recorded in these results.",
    )
    return [summary, exercises, checks, named]


def _markdown(sections: list[_Section]) -> str:
    lines = ["# The class's results", ""]
    for section in sections:
        lines += [f"## {section.title}", ""]
        if section.rows:
            lines.append("| " + " | ".join(_md_cell(h) for h in section.header) + " |")
            lines.append("|" + "---|" * len(section.header))
            lines += ["| " + " | ".join(_md_cell(c) for c in row) + " |" for row in section.rows]
            lines.append("")
        if section.note:
            lines += [section.note, ""]
    lines += [f"![{name}]({name})" for name in PLOTS]
    return "\n".join(lines) + "\n"


def _md_cell(text: str) -> str:
    """A table cell: HTML escaped, ``|`` escaped, and on one line (no heading can start)."""
    return " ".join(html.escape(text).replace("|", "\\|").split())


def _html(sections: list[_Section], plots: list[Path]) -> str:
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>The class's results</title>",
        "<style>body{font-family:sans-serif;max-width:60em;margin:auto}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px}</style>",
        "</head><body><h1>The class's results</h1>",
    ]
    for section in sections:
        parts.append(f"<h2>{html.escape(section.title)}</h2>")
        if section.rows:
            parts.append("<table>" + _html_row(section.header, "th"))
            parts += [_html_row(row, "td") for row in section.rows]
            parts.append("</table>")
        if section.note:
            parts.append(f"<p>{html.escape(section.note)}</p>")
    for path in plots:  # inside the page: it opens offline, alone
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        parts.append(f"<p><img alt='{path.name}' src='data:image/png;base64,{data}'></p>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _html_row(cells: tuple[str, ...], tag: str) -> str:
    return "<tr>" + "".join(f"<{tag}>{html.escape(c)}</{tag}>" for c in cells) + "</tr>"


def _totals_figure(totals: list[float]) -> Figure:
    fig = Figure(figsize=(6, 3.5))
    ax = fig.add_subplot()
    ax.hist(totals or [0], bins=min(20, max(1, len(set(totals)))), color="#4c72b0")
    ax.set(title="Totals", xlabel="points", ylabel="submissions")
    fig.tight_layout()
    return fig


def _exercises_figure(stats: list[ExerciseStats]) -> Figure:
    fig = Figure(figsize=(7, 0.4 * len(stats) + 1.5))
    ax = fig.add_subplot()
    names = [s.name for s in stats][::-1]
    left = [0.0] * len(names)
    for field, colour in (("full", "#55a868"), ("partial", "#dd8452"), ("zero", "#c44e52")):
        shares = [getattr(s, field) for s in stats][::-1]
        ax.barh(names, shares, left=left, color=colour, label=field)
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.set(title="Exercises: share of submissions", xlim=(0, 1))
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.06), ncol=3, fontsize="small")
    fig.tight_layout()
    return fig


def _checks_figure(failures: list[tuple[str, str, float]]) -> Figure:
    fig = Figure(figsize=(7, 0.35 * len(failures) + 1.5))
    ax = fig.add_subplot()
    labels = [f"{e} / {c}" for e, c, _ in failures][::-1]
    ax.barh(labels, [share for _, _, share in failures][::-1], color="#c44e52")
    ax.set(title="The most failed checks: share of submissions", xlim=(0, 1))
    fig.tight_layout()
    return fig
