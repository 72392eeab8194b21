"""The class's gradebook: one SQLite file (the standard library's ``sqlite3``).

Tables (schema :data:`SCHEMA_VERSION`, in ``meta``):

- ``submissions(id, created_at)`` and ``submitters(submission, position, name, email, sid)``:
  who submitted what, from Gradescope's metadata;
- ``runs(id, kind, seed, course_commit, bundle_hash, started_at, finished_at)``: each grading
  or import (``kind``: ``grade`` or ``import``; ``finished_at`` is empty while it can resume);
- ``outcomes(run, submission, score, error)``: a submission's total in a run, or why it has
  none (``error``: one line);
- ``exercises(run, submission, exercise, score, max_score, status, hidden)``: results.json's
  tests;
- ``checks(run, submission, exercise, check_name, status, hint)``: every check's verdict
  (results.json's ``extra_data.checks``), where the results carry them.

A submission's results are those of the latest run that has its outcome. Each submission is
written in one transaction: a run killed midway loses at most the one in progress.
"""

from __future__ import annotations

import datetime
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from m2l_nlp.grading.classroom.exports import Submission, Submitter

SCHEMA_VERSION = 1
_SCHEMA = """
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE submissions (id TEXT PRIMARY KEY, created_at TEXT NOT NULL);
CREATE TABLE submitters (
    submission TEXT NOT NULL REFERENCES submissions(id), position INTEGER NOT NULL,
    name TEXT NOT NULL, email TEXT NOT NULL, sid TEXT NOT NULL,
    PRIMARY KEY (submission, position));
CREATE TABLE runs (
    id INTEGER PRIMARY KEY AUTOINCREMENT, kind TEXT NOT NULL, seed INTEGER, course_commit TEXT,
    bundle_hash TEXT, started_at TEXT NOT NULL, finished_at TEXT);
CREATE TABLE outcomes (
    run INTEGER NOT NULL REFERENCES runs(id), submission TEXT NOT NULL REFERENCES submissions(id),
    score REAL, error TEXT, PRIMARY KEY (run, submission));
CREATE TABLE exercises (
    run INTEGER NOT NULL, submission TEXT NOT NULL, exercise TEXT NOT NULL, score REAL NOT NULL,
    max_score REAL NOT NULL, status TEXT NOT NULL, hidden INTEGER NOT NULL,
    PRIMARY KEY (run, submission, exercise),
    FOREIGN KEY (run, submission) REFERENCES outcomes(run, submission));
CREATE TABLE checks (
    run INTEGER NOT NULL, submission TEXT NOT NULL, exercise TEXT NOT NULL,
    check_name TEXT NOT NULL, status TEXT NOT NULL, hint TEXT,
    PRIMARY KEY (run, submission, exercise, check_name),
    FOREIGN KEY (run, submission) REFERENCES outcomes(run, submission));
"""


class GradebookError(ValueError):
    """A gradebook that cannot be used; its message says what to do."""


@dataclass(frozen=True)
class Row:
    """A submission's latest results: its total (None with ``error``) and each exercise's
    ``(score, max_score, hidden)``."""

    submission: str
    submitters: tuple[Submitter, ...]
    score: float | None
    error: str | None
    exercises: dict[str, tuple[float, float, bool]]


@dataclass(frozen=True)
class CheckRow:
    """A check's verdict for one submission, in its latest run (``hint``: a named slip's id,
    where the results carry one)."""

    submission: str
    exercise: str
    check: str
    status: str
    hint: str | None
    hidden: bool


class Gradebook:
    """``Gradebook(path)`` opens the file, making it if it is not there."""

    def __init__(self, path: Path):
        self.path = path
        try:
            self.db = sqlite3.connect(path, isolation_level=None)  # transactions are ours
            self.db.execute("PRAGMA foreign_keys = ON")
            if not self.db.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]:
                # new (or made by a run killed before this): the schema whole, or nothing
                self.db.executescript(
                    f"BEGIN; {_SCHEMA} INSERT INTO meta VALUES "
                    f"('schema_version', '{SCHEMA_VERSION}'); COMMIT;"
                )
            version = self._version()
        except sqlite3.DatabaseError as err:
            raise GradebookError(f"{path} is not a gradebook ({err}): give another path") from err
        if version is None:
            self.db.close()
            raise GradebookError(f"{path} is not an m2l-nlp gradebook: give another path")
        if version != SCHEMA_VERSION:
            self.db.close()
            raise GradebookError(
                f"{path} was made by another m2l-nlp (its schema {version}, this one's "
                f"{SCHEMA_VERSION}): export it with that version, then grade again"
            )

    def _version(self) -> int | None:
        try:
            found = self.db.execute("SELECT value FROM meta WHERE key = 'schema_version'")
        except sqlite3.OperationalError:  # no meta table: not ours
            return None
        row = found.fetchone()
        return int(row[0]) if row else None

    def close(self) -> None:
        self.db.close()

    def start_run(
        self,
        kind: str,
        seed: int | None = None,
        course_commit: str | None = None,
        bundle_hash: str | None = None,
    ) -> int:
        """A new run (``grade`` or ``import``); returns its id."""
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        with self.db:
            self.db.execute("BEGIN")
            cursor = self.db.execute(
                "INSERT INTO runs (kind, seed, course_commit, bundle_hash, started_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (kind, seed, course_commit, bundle_hash, now),
            )
        return int(cursor.lastrowid)

    def finish_run(self, run: int) -> None:
        """Mark ``run`` finished: a later grading starts a run of its own."""
        now = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
        with self.db:
            self.db.execute("UPDATE runs SET finished_at = ? WHERE id = ?", (now, run))

    def last_run(self, kind: str) -> tuple[int, int | None, bool] | None:
        """``(id, seed, finished)`` of the latest run of ``kind``, or None."""
        found = self.db.execute(
            "SELECT id, seed, finished_at IS NOT NULL FROM runs WHERE kind = ? "
            "ORDER BY id DESC LIMIT 1",
            (kind,),
        ).fetchone()
        return (found[0], found[1], bool(found[2])) if found else None

    def run_version(self, run: int) -> tuple[str | None, str | None]:
        """``(course_commit, bundle_hash)`` that ``run`` recorded."""
        found = self.db.execute(
            "SELECT course_commit, bundle_hash FROM runs WHERE id = ?", (run,)
        ).fetchone()
        return (found[0], found[1]) if found else (None, None)

    def graded(self, kind: str = "grade") -> set[str]:
        """The submissions that some run of ``kind`` has an outcome for."""
        rows = self.db.execute(
            "SELECT DISTINCT o.submission FROM outcomes o JOIN runs r ON r.id = o.run "
            "WHERE r.kind = ?",
            (kind,),
        )
        return {submission for (submission,) in rows}

    def scores(self, run: int | None = None) -> dict[str, dict[str, float]]:
        """``{submission: {exercise: score}}`` in ``run``, or in each one's latest run."""
        if run is None:
            return {
                row.submission: {e: v[0] for e, v in row.exercises.items()} for row in self.latest()
            }
        found: dict[str, dict[str, float]] = {}
        rows = self.db.execute(
            "SELECT submission, exercise, score FROM exercises WHERE run = ?", (run,)
        )
        for submission, exercise, score in rows:
            found.setdefault(submission, {})[exercise] = score
        return found

    def drop_run(self, run: int) -> None:
        """Remove ``run`` and every row of it (a dry run's); its id is never given again."""
        with self.db:
            self.db.execute("BEGIN")
            for table in ("checks", "exercises", "outcomes"):
                self.db.execute(f"DELETE FROM {table} WHERE run = ?", (run,))
            self.db.execute("DELETE FROM runs WHERE id = ?", (run,))

    def record(
        self,
        run: int,
        submission: Submission,
        results: dict[str, Any] | None,
        error: str | None = None,
    ) -> None:
        """The submission, its submitters and its results (Gradescope's results.json) in
        ``run``, in one transaction; ``error`` (one line) where it has no results, or where
        they cannot be read as results.json."""
        if results is not None:
            try:
                score = _number(results.get("score"))
                exercises = _exercise_rows(results)
                checks = _check_rows(results)
            except (TypeError, ValueError, AttributeError):
                results, error = None, "its results cannot be read as results.json"
        with self.db:
            self.db.execute("BEGIN")
            self.db.execute(
                "INSERT INTO submissions VALUES (?, ?) ON CONFLICT(id) DO UPDATE SET "
                "created_at = excluded.created_at",
                (submission.id, submission.created_at),
            )
            self.db.execute("DELETE FROM submitters WHERE submission = ?", (submission.id,))
            self.db.executemany(
                "INSERT INTO submitters VALUES (?, ?, ?, ?, ?)",
                [
                    (submission.id, i, p.name, p.email, p.sid)
                    for i, p in enumerate(submission.submitters)
                ],
            )
            for table in ("checks", "exercises", "outcomes"):  # this run's earlier rows
                self.db.execute(
                    f"DELETE FROM {table} WHERE run = ? AND submission = ?", (run, submission.id)
                )
            if results is None:
                self.db.execute(
                    "INSERT INTO outcomes VALUES (?, ?, NULL, ?)",
                    (run, submission.id, error or "no results"),
                )
                return
            self.db.execute(
                "INSERT INTO outcomes VALUES (?, ?, ?, NULL)", (run, submission.id, score)
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO exercises VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(run, submission.id, *row) for row in exercises],
            )
            self.db.executemany(
                "INSERT OR REPLACE INTO checks VALUES (?, ?, ?, ?, ?, ?)",
                [(run, submission.id, *row) for row in checks],
            )

    def recorded(self, run: int) -> set[str]:
        """The submissions that ``run`` has an outcome for (a resumed run skips them)."""
        rows = self.db.execute("SELECT submission FROM outcomes WHERE run = ?", (run,))
        return {submission for (submission,) in rows}

    def latest(self) -> list[Row]:
        """Each submission's results in the latest run that has them, by submission id."""
        rows = []
        latest = self.db.execute(
            "SELECT o.submission, o.run, o.score, o.error FROM outcomes o WHERE o.run = "
            "(SELECT MAX(run) FROM outcomes WHERE submission = o.submission) ORDER BY o.submission"
        ).fetchall()
        for submission, run, score, error in latest:
            people = self.db.execute(
                "SELECT name, email, sid FROM submitters WHERE submission = ? ORDER BY position",
                (submission,),
            ).fetchall()
            exercises = self.db.execute(
                "SELECT exercise, score, max_score, hidden FROM exercises "
                "WHERE run = ? AND submission = ? ORDER BY rowid",
                (run, submission),
            ).fetchall()
            rows.append(
                Row(
                    submission,
                    tuple(Submitter(*p) for p in people),
                    score,
                    error,
                    {name: (s, m, bool(h)) for name, s, m, h in exercises},
                )
            )
        return rows

    def latest_checks(self) -> list[CheckRow]:
        """Every check's verdict in each submission's latest run with results."""
        found = self.db.execute(
            "SELECT c.submission, c.exercise, c.check_name, c.status, c.hint, "
            "COALESCE(e.hidden, 0) FROM checks c "
            "LEFT JOIN exercises e ON e.run = c.run AND e.submission = c.submission "
            "AND e.exercise = c.exercise WHERE c.run = "
            "(SELECT MAX(run) FROM outcomes WHERE submission = c.submission) ORDER BY c.rowid"
        )
        return [CheckRow(s, e, c, st, h, bool(hid)) for s, e, c, st, h, hid in found]

    def counts(self) -> dict[str, int]:
        """Rows per table (for a run's summary)."""
        tables = ("submissions", "submitters", "runs", "outcomes", "exercises", "checks")
        return {t: self.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in tables}


def _number(value: Any) -> float:
    """A score: a number (None is 0); raises ValueError for anything else."""
    if value is None:
        return 0.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _check_rows(results: dict[str, Any]) -> list[tuple[str, str, str, str | None]]:
    """``(exercise, check, status, hint)`` of results.json's ``extra_data.checks``."""
    extra = results.get("extra_data")
    checks = extra.get("checks") if isinstance(extra, dict) else None
    rows = []
    for c in checks if isinstance(checks, list) else []:
        if isinstance(c, dict) and {"exercise", "check", "status"} <= c.keys():
            hint = c.get("hint")
            rows.append(
                (
                    str(c["exercise"]),
                    str(c["check"]),
                    str(c["status"]),
                    None if hint is None else str(hint),
                )
            )
    return rows


def _exercise_rows(results: dict[str, Any]) -> list[tuple[str, float, float, str, int]]:
    """``(exercise, score, max_score, status, hidden)`` of each of results.json's tests; the
    exercise's name is the second tag (m2l-nlp's own results), else the test's name."""
    rows = []
    tests = results.get("tests")
    for test in tests if isinstance(tests, list) else []:
        if not isinstance(test, dict):
            continue
        tags = test.get("tags") if isinstance(test.get("tags"), list) else []
        name = str(tags[1]) if len(tags) >= 2 else str(test.get("name", "?"))
        rows.append(
            (
                name,
                _number(test.get("score")),
                _number(test.get("max_score")),
                str(test.get("status", "")),
                int("hidden" in tags),
            )
        )
    return rows
