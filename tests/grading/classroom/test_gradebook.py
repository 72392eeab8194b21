"""m2l_nlp.grading.classroom.gradebook: the class's results in SQLite, one transaction per
submission."""

from __future__ import annotations

import sqlite3
import subprocess
import sys

import pytest

from m2l_nlp.grading.classroom.exports import read_export
from m2l_nlp.grading.classroom.gradebook import Gradebook, GradebookError


def test_an_import_keeps_every_submission_exercise_and_check(export, tmp_path):
    book = Gradebook(tmp_path / "book.sqlite")
    run = book.start_run("import")
    for submission in read_export(export):
        book.record(run, submission, submission.results, "no autograder results")
    assert book.recorded(run) == {f"submission_10{i}" for i in range(1, 5)}
    assert book.counts() == {
        "submissions": 4,
        "submitters": 5,
        "runs": 1,
        "outcomes": 4,
        "exercises": 7,
        "checks": 6,
    }
    rows = {row.submission: row for row in book.latest()}
    assert rows["submission_101"].score == 25 and rows["submission_101"].exercises == {
        "multi_hot": (10, 10, False),
        "tfidf": (10, 10, False),
        "extra": (5, 5, True),
    }
    assert rows["submission_104"].score is None
    assert rows["submission_104"].error == "no autograder results"
    failed = book.db.execute(
        "SELECT submission FROM checks WHERE exercise = 'tfidf' AND status = 'failed'"
    ).fetchall()
    assert sorted(failed) == [("submission_102",), ("submission_103",)]
    book.close()


def test_a_later_run_wins_and_a_run_recorded_again_replaces_its_rows(export, tmp_path):
    book = Gradebook(tmp_path / "book.sqlite")
    ada = read_export(export)[0]
    first = book.start_run("import")
    book.record(first, ada, ada.results)
    second = book.start_run("grade", seed=7)
    lower = {**ada.results, "score": 3, "tests": ada.results["tests"][:1]}
    book.record(second, ada, lower)
    book.record(second, ada, lower)  # a resumed run writing it again: no duplicate rows
    (row,) = book.latest()
    assert row.score == 3 and list(row.exercises) == ["multi_hot"]
    assert book.counts()["outcomes"] == 2 and book.counts()["exercises"] == 4
    book.close()


def test_a_kill_mid_write_loses_only_the_submission_in_progress(export, tmp_path):
    """A process killed inside a submission's transaction: the file opens, whole, with the
    submissions written before it."""
    path = tmp_path / "book.sqlite"
    code = f"""
import os, signal
from pathlib import Path
from m2l_nlp.grading.classroom.exports import read_export
from m2l_nlp.grading.classroom.gradebook import Gradebook
book = Gradebook(Path({str(path)!r}))
run = book.start_run("import")
first, second = read_export(Path({str(export)!r}))[:2]
book.record(run, first, first.results)
def killed(statement):  # the second submission's rows, killed halfway
    if "INTO exercises" in statement:
        os.kill(os.getpid(), signal.SIGKILL)
book.db.set_trace_callback(killed)
book.record(run, second, second.results)
"""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == -9, done.stderr
    book = Gradebook(path)
    assert book.recorded(1) == {"submission_101"}
    assert book.counts()["submitters"] == 1 and book.counts()["exercises"] == 3
    book.close()


def test_a_file_that_is_not_this_versions_gradebook_is_refused_in_one_line(tmp_path):
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE t (x)")
    with pytest.raises(GradebookError, match="is not an m2l-nlp gradebook"):
        Gradebook(other)
    older = tmp_path / "older.sqlite"
    Gradebook(older).close()
    with sqlite3.connect(older) as db:
        db.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    with pytest.raises(GradebookError, match="made by another m2l-nlp.*export it with"):
        Gradebook(older)
    (tmp_path / "text.sqlite").write_text("hello, not a database at all" * 100)
    with pytest.raises(GradebookError, match="is not a gradebook"):
        Gradebook(tmp_path / "text.sqlite")


def test_runs_are_found_finished_and_dropped_and_their_rows_read_back(export, tmp_path):
    book = Gradebook(tmp_path / "book.sqlite")
    ada, alan = read_export(export)[:2]
    assert book.last_run("grade") is None
    first = book.start_run("grade", seed=11)
    book.record(first, ada, ada.results)
    assert book.last_run("grade") == (first, 11, False)
    book.finish_run(first)
    assert book.last_run("grade") == (first, 11, True) and book.graded("grade") == {ada.id}
    assert book.graded("import") == set()
    checks = book.latest_checks()
    assert [(c.submission, c.exercise, c.status, c.hidden) for c in checks] == [
        (ada.id, "multi_hot", "passed", False),
        (ada.id, "tfidf", "passed", False),
    ]
    second = book.start_run("grade", seed=11)
    book.record(second, alan, alan.results)
    book.record(second, ada, {**ada.results, "tests": ada.results["tests"][:1]})
    assert book.scores(first)[ada.id] == {"multi_hot": 10, "tfidf": 10, "extra": 5}
    assert book.scores() == {ada.id: {"multi_hot": 10}, alan.id: {"multi_hot": 10, "tfidf": 0}}
    book.drop_run(second)
    assert book.scores()[ada.id] == {"multi_hot": 10, "tfidf": 10, "extra": 5}
    assert book.counts()["runs"] == 1 and book.last_run("grade")[0] == first
    assert book.start_run("grade") == second + 1  # a dropped run's id is not given again
    book.close()


def test_results_that_are_not_results_json_are_a_row_with_its_reason(export, tmp_path):
    book = Gradebook(tmp_path / "book.sqlite")
    run = book.start_run("import")
    ada = read_export(export)[0]
    for bad in ({"score": "abc"}, {"score": 1, "tests": [{"score": [1]}]}, {"score": True}):
        book.record(run, ada, bad)
        (row,) = book.latest()
        assert row.score is None and row.error == "its results cannot be read as results.json"
    book.close()


def test_a_run_keeps_the_course_commit_and_the_bundle_it_graded_with(tmp_path):
    book = Gradebook(tmp_path / "book.sqlite")
    run = book.start_run("grade", seed=7, course_commit="abc123+changes", bundle_hash="f00d")
    assert book.run_version(run) == ("abc123+changes", "f00d")
    assert book.run_version(run + 1) == (None, None)  # no such run
