"""``m2l-nlp class import | export``: a class's results into the gradebook, and out of it.

m2l-nlp class import EXPORT [--gradebook PATH]   # Gradescope's graded export, no regrading
m2l-nlp class export --csv grades.csv [--gradebook PATH] [--show-hidden]
"""

from __future__ import annotations

import argparse
import datetime
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from m2l_nlp.grading.classroom.batch import (
    GraderFailed,
    NotIsolated,
    grade_class,
    score_changes,
)
from m2l_nlp.grading.classroom.exports import ExportError, read_export
from m2l_nlp.grading.classroom.gradebook import Gradebook, GradebookError
from m2l_nlp.grading.classroom.spreadsheet import write_csv
from m2l_nlp.grading.classroom.summary import write_report

GRADEBOOK = "gradebook.sqlite"


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="m2l-nlp class", description="The instructor's view of a whole class."
    )
    sub = parser.add_subparsers(dest="command", required=True)
    grade = sub.add_parser("grade", help="grade every submission with the trusted grader")
    grade.add_argument("export", type=Path, help="Gradescope's Export Submissions (zip, folder)")
    grade.add_argument(
        "--gradebook", type=Path, help=f"the gradebook (default: {GRADEBOOK} beside the export)"
    )
    grade.add_argument(
        "--regrade", action="store_true", help="grade all again, with the last run's seed"
    )
    grade.add_argument(
        "--dry-run", action="store_true", help="with --regrade: show who gains or loses, keep none"
    )
    grade.add_argument(
        "--local", action="store_true", help="grade without isolation (student code runs as you)"
    )
    grade.add_argument(
        "--jobs",
        type=_positive,
        help="graders side by side (default: one per 2 cores and 4 GB of memory, in "
        "bubblewrap's sandboxes only)",
    )
    grade.set_defaults(run=cmd_grade)
    imports = sub.add_parser(
        "import",
        help="read the results Gradescope's export carries into the gradebook (no regrading)",
    )
    imports.add_argument("export", type=Path, help="Gradescope's Export Submissions (zip, folder)")
    imports.add_argument(
        "--gradebook", type=Path, help=f"the gradebook (default: {GRADEBOOK} beside the export)"
    )
    export = sub.add_parser("export", help="write the gradebook as a CSV an LMS imports")
    export.add_argument("--csv", type=Path, required=True, help="the CSV file to write")
    export.add_argument("--gradebook", type=Path, default=Path(GRADEBOOK), help="the gradebook")
    export.add_argument(
        "--show-hidden", action="store_true", help="add the hidden exercises' columns"
    )
    report = sub.add_parser("report", help="where the class struggles: Markdown, PNG, HTML")
    report.add_argument("--out", type=Path, default=Path("class-report"), help="its folder")
    report.add_argument("--gradebook", type=Path, default=Path(GRADEBOOK), help="the gradebook")
    when = report.add_mutually_exclusive_group()
    when.add_argument("--show-hidden", action="store_true", help="report the hidden exercises")
    when.add_argument(
        "--due",
        type=datetime.date.fromisoformat,
        metavar="YYYY-MM-DD",
        help="the due date: the hidden exercises are reported from the day after it",
    )
    similar = sub.add_parser(
        "similar", help="pairs of submissions alike enough to read side by side (a lead only)"
    )
    similar.add_argument("export", type=Path, help="Gradescope's Export Submissions (zip, folder)")
    similar.add_argument(
        "--threshold", type=float, default=0.5, help="the share of shared code to list a pair"
    )
    similar.add_argument("--out", type=Path, default=Path("class-report"), help="its folder")
    similar.set_defaults(run=cmd_similar)
    imports.set_defaults(run=cmd_import)
    export.set_defaults(run=cmd_export)
    report.set_defaults(run=cmd_report)
    return parser


def _positive(text: str) -> int:
    """A number of graders: a whole number, 1 or more."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} graders: give a whole number, 1 or more")
    return int(text)


def cmd_grade(args: argparse.Namespace) -> int:
    if args.dry_run and not args.regrade:
        raise GradebookError("--dry-run goes with --regrade: it shows what a regrade changes")
    path = args.gradebook or args.export.resolve().parent / GRADEBOOK
    book = Gradebook(path)
    try:
        before = book.scores()
        work = path.with_name(path.name + ".work")
        job = grade_class(args.export, book, work, args.regrade, args.local, jobs=args.jobs)
        if args.regrade:
            changes = score_changes(before, book.scores(job.run))
            for line in _change_lines(changes):
                print(line)
            if args.dry_run:
                book.drop_run(job.run)
                shutil.rmtree(work / f"run-{job.run}", ignore_errors=True)
                print("dry run: the gradebook is as it was")
        counts = book.counts()
    finally:
        book.close()
    print(f"gradebook {path}: " + ", ".join(f"{n} {table}" for table, n in counts.items()))
    return 0


def _change_lines(changes: dict[str, list[tuple[str, float]]]) -> list[str]:
    if not changes:
        return ["regrade: no submission gains or loses points"]
    lines = []
    for exercise, moves in changes.items():
        gains = [f"{s} {d:+g}" for s, d in moves if d > 0]
        losses = [f"{s} {d:+g}" for s, d in moves if d < 0]
        lines.append(
            f"{exercise}: {len(gains)} gain ({', '.join(gains) or '-'}), "
            f"{len(losses)} lose ({', '.join(losses) or '-'})"
        )
    return lines


def cmd_import(args: argparse.Namespace) -> int:
    submissions = read_export(args.export)
    path = args.gradebook or args.export.resolve().parent / GRADEBOOK
    book = Gradebook(path)
    try:
        run = book.start_run("import")
        missing = 0
        for submission in submissions:
            if submission.results is None:
                missing += 1
            book.record(run, submission, submission.results, "no autograder results in the export")
        counts = book.counts()
    finally:
        book.close()
    print(
        f"imported {len(submissions)} submissions ({missing} without results) into {path}: "
        + ", ".join(f"{n} {table}" for table, n in counts.items())
    )
    print(f"next: m2l-nlp class export --gradebook {path} --csv grades.csv")
    return 0


def _existing(path: Path) -> Gradebook:
    if not path.is_file():
        raise GradebookError(
            f"{path} does not exist: `m2l-nlp class import EXPORT` makes it, or give "
            "--gradebook PATH"
        )
    return Gradebook(path)


def cmd_export(args: argparse.Namespace) -> int:
    book = _existing(args.gradebook)
    try:
        rows = book.latest()
    finally:
        book.close()
    written = write_csv(rows, args.csv, hidden=args.show_hidden)
    print(f"wrote {args.csv}: {written} students' rows from {len(rows)} submissions")
    return 0


def cmd_report(args: argparse.Namespace) -> int:
    book = _existing(args.gradebook)
    try:
        rows, checks = book.latest(), book.latest_checks()
    finally:
        book.close()
    hidden = args.show_hidden or (args.due is not None and datetime.date.today() > args.due)
    written = write_report(rows, checks, args.out, show_hidden=hidden)
    print(f"wrote {len(written)} files in {args.out}: open {args.out / 'report.html'}")
    return 0


def cmd_similar(args: argparse.Namespace) -> int:
    import tempfile

    from m2l_nlp.grading.classroom.batch import class_folder, submissions_in
    from m2l_nlp.grading.classroom.similarity import (
        LEAD,
        code_of,
        notebook_code,
        similar_pairs,
        write_pairs,
    )
    from m2l_nlp.impl import repo_root

    # the starter code: the stubs, and the notebooks as handed out (their setup and scaffold)
    handed = [
        *(repo_root() / "exercises").glob("*.py"),
        *(repo_root() / "notebooks").glob("*.ipynb"),
    ]
    stubs = [
        notebook_code(text) if p.suffix == ".ipynb" else text
        for p in handed
        if not p.stem.endswith("_solved")
        for text in [p.read_text(encoding="utf-8")]
    ]
    with tempfile.TemporaryDirectory() as work:
        folder = class_folder(args.export, Path(work))
        codes = {
            s.id: code_of(folder / s.id)
            for s in submissions_in(folder)
            if (folder / s.id).is_dir() and not (folder / s.id).is_symlink()
        }
    pairs = similar_pairs(codes, stubs, args.threshold)
    paths = write_pairs(pairs, args.out, args.threshold)
    print(LEAD)
    for pair in pairs:
        first, second = pair.similarity
        print(f"{pair.first} ~ {pair.second}: {first:.0%} / {second:.0%} of their code shared")
    print(f"{len(pairs)} of {len(codes) * (len(codes) - 1) // 2} pairs; side by side: {paths[1]}")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``m2l-nlp class``; returns the exit code."""
    args = _parser().parse_args(argv)
    try:
        return args.run(args)
    except (ExportError, GradebookError, NotIsolated, GraderFailed, LookupError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: {error.strerror or error}{where}: check the path", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
