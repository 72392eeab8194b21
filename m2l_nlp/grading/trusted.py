"""Grading for credit: the student's code runs in its own process; every verdict is made here.

    python -m m2l_nlp.grading.trusted SUBMISSION_FOLDER RESULTS_JSON [MORE PAIRS]

1. The reference (``solutions/``) runs in a process of its own and passes every check; its
   answers are recorded (:mod:`~m2l_nlp.grading.expected`) and its time per exercise sets
   that exercise's limit (``LIMIT_FACTOR`` times, at least ``MIN_LIMIT_S`` seconds).
2. The submission's practicals (``.py`` files or notebooks, :mod:`.submission`) are copied
   into a folder of their own, and each runs in a worker process (:mod:`.worker`), as an
   unprivileged user when this process is root. The checks run here; the worker only
   computes the student's outputs for the inputs it is sent, as plain data. It cannot
   import the reference, reach this process's state, or write the results.
3. An exercise that runs past its limit is stopped (its worker killed) and the next one
   gets a fresh worker. Once every student process is gone, this process writes
   ``results.json`` and prints the same scores.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from m2l_nlp.fileio import write_json_atomic
from m2l_nlp.grading.expected import Replay, record
from m2l_nlp.grading.registry import CheckFailure, Exercise, load_exercises
from m2l_nlp.grading.remote import (
    RemoteNamespace,
    Worker,
    WorkerLost,
    WorkerStopped,
    WorkerUnavailable,
    check_workers_start,
    unprivileged_user,
)
from m2l_nlp.grading.report import results_json, score_table
from m2l_nlp.grading.runner import (
    CheckResult,
    ExerciseResult,
    blame_earlier,
    outcome,
    run_check,
    stub_lines_from,
)
from m2l_nlp.grading.submission import SubmissionError, find_practicals
from m2l_nlp.impl import repo_root

LIMIT_FACTOR = 5.0
MIN_LIMIT_S = 10.0
LOAD_LIMIT_S = 60.0  # importing a practical file (JAX included)
MESSAGE_CHARS = 2000


class GraderBroken(Exception):
    """The reference itself fails on this machine: no grade would be right."""


def _practicals(exercises: dict[str, Exercise]) -> list[str]:
    return list(dict.fromkeys(ex.practical for ex in exercises.values()))


def _start(
    folder: Path,
    practical: str,
    user: tuple[int, int] | None,
    home: Path,
    env: dict[str, str] | None = None,
) -> Worker:
    """A worker with ``folder/<practical>.py`` imported (raises what the import raised);
    ``env``: more of its environment variables."""
    worker = Worker(folder, user, env={"HOME": str(home), **(env or {})})
    worker.limit, worker.deadline = LOAD_LIMIT_S, time.monotonic() + LOAD_LIMIT_S
    try:
        worker.request({"op": "load", "path": str(folder / f"{practical}.py"), "name": practical})
    except BaseException:
        worker.kill()
        raise
    worker.deadline = None
    return worker


def _reference_programs(scratch: Path) -> dict[str, str]:
    """The environment that keeps the reference worker's compiled programs on disk, in a
    folder of ``scratch`` that only the grader's user may open (``mkdtemp``: mode 0700).

    While recording, every check runs the reference twice, once as the graded code and once
    as the reference, and each side compiles programs of its own, most of them the same
    programs: the second is then read back, not compiled (practical 2's pass in 0.65x
    the time, ``benchmarks/README.md``). Student workers get no cache: their user cannot open
    this folder, so they can neither plant a program for the reference to run nor run one
    of its programs."""
    folder = tempfile.mkdtemp(prefix="reference-programs-", dir=scratch)
    return {
        "JAX_COMPILATION_CACHE_DIR": folder,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


def reference_pass(
    practical: str, root: Path, scratch: Path
) -> tuple[Replay, dict[str, float], Worker]:
    """Run the reference through every check of ``practical`` in its own process: the
    recorded answers (with that process to answer the rest), the limit per exercise."""
    source = root / "solutions" / f"{practical}.py"
    if not source.is_file():
        raise GraderBroken(f"{source} is missing: the autograder needs solutions/")
    worker = _start(source.parent, practical, None, scratch, _reference_programs(scratch))
    remote = RemoteNamespace(worker)
    stubs = stub_lines_from(str(source))
    try:
        recorder = record(practical, remote, stubs)
    except (RuntimeError, WorkerLost, WorkerStopped) as err:
        worker.kill()
        raise GraderBroken(str(err)) from None
    limits = {name: max(MIN_LIMIT_S, LIMIT_FACTOR * t) for name, t in recorder.seconds.items()}
    return Replay(recorder.records, stubs, fallback=remote), limits, worker


def _own_words(message: object, folder: Path) -> str:
    """A message as the student should read it: their file by its name, not our folder."""
    return str(message).replace(f"{folder}/", "")[:MESSAGE_CHARS]


def _all_results(exercises: list[Exercise], status: str, message: str) -> list[ExerciseResult]:
    return [
        ExerciseResult(ex, [CheckResult(ex.name, c.name, status, message) for c in ex.checks])
        for ex in exercises
    ]


def grade_practical(
    practical: str,
    source: str | None,
    folder: Path,
    user: tuple[int, int] | None,
    reference: Replay,
    limits: dict[str, float],
) -> list[ExerciseResult]:
    """Grade one practical of the submission (its file already in ``folder``)."""
    exercises = [ex for ex in load_exercises().values() if ex.practical == practical]
    if source is None:
        return _all_results(
            exercises,
            "not started",
            f"not started: the submission has no {practical}.py (nor a notebook of it)",
        )
    path = folder / f"{practical}.py"
    home = Path(tempfile.mkdtemp(prefix="home-", dir=folder.parent))
    if user is not None:
        os.chown(home, *user)
    try:
        worker: Worker | None = _start(folder, practical, user, home)
    except CheckFailure as err:  # the file does not import: said once, for every exercise
        return _all_results(exercises, "error", _own_words(err, folder))
    except WorkerStopped:
        message = f"importing {practical}.py took more than {LOAD_LIMIT_S:g} s"
        return _all_results(exercises, "error", message)
    results = []
    for ex in exercises:
        checks: list[CheckResult] = []
        limit = limits[ex.name]
        deadline = time.monotonic() + limit
        stopped = ""
        for chk in ex.checks:
            if stopped:
                checks.append(CheckResult(ex.name, chk.name, "failed", stopped))
                continue
            err: BaseException | None = None
            try:
                if worker is None:
                    worker = _start(folder, practical, user, home)
                worker.limit, worker.deadline = limit, deadline
                run_check(ex, chk, RemoteNamespace(worker), reference, [])
            except WorkerStopped:
                worker = None
                status, message = (
                    "failed",
                    (
                        f"stopped after {limit:.0f} s ({LIMIT_FACTOR:g} times the reference's time "
                        "on this machine): look for an endless loop, or a Python loop over every "
                        "array element"
                    ),
                )
                stopped = "not run: an earlier check of this exercise was stopped"
                checks.append(CheckResult(ex.name, chk.name, status, message))
                continue
            except WorkerLost as lost:
                worker = None
                status, message = (
                    "failed",
                    (
                        f"the process running your code ended ({lost}): does it call sys.exit() "
                        "or os._exit(), or crash?"
                    ),
                )
                checks.append(CheckResult(ex.name, chk.name, status, message))
                continue
            except Exception as caught:  # noqa: BLE001 - classified by outcome()
                err = caught
            status, message = outcome(err, {str(path)})
            checks.append(CheckResult(ex.name, chk.name, status, _own_words(message, folder)))
        results.append(ExerciseResult(ex, checks))
    if worker is not None:
        worker.kill()
    return results


def kill_user_processes(uid: int) -> None:
    """Kill every process of ``uid`` (student code that escaped its session)."""
    if uid in (0, os.getuid()):
        raise ValueError("refusing to kill the grader's own user's processes")
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            status = (entry / "status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("Uid:") and int(line.split()[1]) == uid:
                try:
                    os.kill(int(entry.name), signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def grade(
    jobs: Sequence[tuple[Path, Path]],
    root: Path | None = None,
    log: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """Grade each ``(submission folder, results.json path)`` of ``jobs`` (the reference is
    checked once for all) and write each results file; returns their contents."""
    root = root or repo_root()
    exercises = load_exercises()
    practicals = _practicals(exercises)
    user = unprivileged_user()
    scratch = Path(tempfile.mkdtemp(prefix="m2l-grading-"))
    os.chmod(scratch, 0o755)
    references: dict[str, tuple[Replay, dict[str, float], Worker]] = {}
    written = []
    try:
        if user is not None:  # said at once, not after the reference's checks
            check_workers_start(scratch, user, LOAD_LIMIT_S)
        for practical in practicals:
            start = time.monotonic()
            references[practical] = reference_pass(practical, root, scratch)
            log(
                f"{practical}: the reference passed every check in {time.monotonic() - start:.1f} s"
            )
        for number, (submission, results_path) in enumerate(jobs):
            folder = scratch / f"submission-{number}"
            folder.mkdir(mode=0o755)
            sources = find_practicals(submission, practicals)
            for practical, text in sources.items():
                if text is not None:
                    (folder / f"{practical}.py").write_text(text, encoding="utf-8")
                    os.chmod(folder / f"{practical}.py", 0o644)
            results: list[ExerciseResult] = []
            try:
                for practical in practicals:
                    reference, limits, _ = references[practical]
                    results += grade_practical(
                        practical, sources[practical], folder, user, reference, limits
                    )
            finally:
                if user is not None:  # nothing the student started outlives the grading
                    kill_user_processes(user[0])
            blame_earlier(results)
            failed_imports = (c.message for r in results for c in r.checks if c.status == "error")
            errors = list(dict.fromkeys(failed_imports))
            data = results_json(results, errors)
            write_json_atomic(results_path, data)
            written.append(data)
            if len(jobs) > 1:
                log(f"== {submission}")
            for text in errors:
                log(text)
            log(score_table(results, len(exercises)))
    finally:
        for _, _, worker in references.values():
            worker.kill()
        shutil.rmtree(scratch, ignore_errors=True)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m m2l_nlp.grading.trusted",
        description="Grade a submission for credit (student code in its own process).",
    )
    parser.add_argument(
        "pairs",
        nargs="+",
        metavar="SUBMISSION RESULTS",
        help="a folder with the student's files, then where to write its results.json (more "
        "pairs grade more submissions against one check of the reference)",
    )
    args = parser.parse_args(argv)
    if len(args.pairs) % 2:
        parser.error("give a results path after each submission folder")
    jobs = [(Path(s), Path(r)) for s, r in zip(args.pairs[::2], args.pairs[1::2], strict=True)]
    for submission, _ in jobs:
        if not submission.is_dir():
            print(f"error: {submission} is not a folder", file=sys.stderr)
            return 2
    try:
        grade(jobs)
    except (GraderBroken, SubmissionError, WorkerUnavailable) as err:
        print(f"error: {err}", file=sys.stderr)
        output = f"The autograder could not grade this submission: {err}"
        for _, results_path in jobs:
            write_json_atomic(results_path, {"score": 0, "output": output[:MESSAGE_CHARS]})
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
