"""Grading for credit: the student's code runs in its own process; every verdict is made here.

    python -m m2l_nlp.grading.trusted [--seed N] SUBMISSION_FOLDER RESULTS_JSON [MORE PAIRS]

1. The reference (``solutions/``) runs in a process of its own and passes every check once;
   its time per exercise sets that exercise's limit (``grading.toml``'s
   ``time_limit_factor`` times, at least ``MIN_LIMIT_S`` seconds). The hidden checks
   (``solutions/hidden/``) are graded too, shown as ``grading.toml`` says.
2. Each submission gets a fresh grading seed: every input of every check is drawn from it
   (:func:`~m2l_nlp.grading.checks.tools.seeded`), so answers recorded from the handout or from an
   earlier grading match nothing. The student's process never sees it; the instructor finds
   it in the log and in ``results.json``'s ``extra_data``, and ``--seed`` grades again with it.
3. The submission is read as data (:mod:`.submission`: no links, no special files, sizes
   capped), its practicals copied into a folder of their own, and each runs in a worker
   process (:mod:`.worker`), as an unprivileged user when this process is root, with its
   resources bounded. The checks run here and ask the reference's process for its answers;
   the worker only computes the student's outputs for the inputs it is sent, as plain data.
4. Every request to a worker has a deadline; an exercise that runs past its limit is stopped
   (its worker killed) and the next one gets a fresh worker. Whatever a submission does, its
   processes (and only those: this process adopts orphans, :func:`remote.become_subreaper`)
   are killed after it, and its ``results.json`` is written, its own in a batch.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from m2l_nlp.fileio import write_json_atomic
from m2l_nlp.grading.checks.catalog import hidden_checks, load_exercises, read_settings
from m2l_nlp.grading.checks.registry import CheckFailure, Exercise
from m2l_nlp.grading.checks.report import results_json, score_table
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    ExerciseResult,
    blame_earlier,
    outcome,
    run_check,
    stub_lines_from,
)
from m2l_nlp.grading.checks.settings import SettingsError
from m2l_nlp.grading.checks.tools import seeded
from m2l_nlp.grading.trusted.recording import record
from m2l_nlp.grading.trusted.remote import (
    RemoteNamespace,
    Worker,
    WorkerGone,
    WorkerLost,
    WorkerStopped,
    WorkerUnavailable,
    become_subreaper,
    check_workers_start,
    kill_descendants,
    reap_orphans,
    remove_files_of,
    unprivileged_user,
)
from m2l_nlp.grading.trusted.submission import Found, SubmissionError, find_practicals
from m2l_nlp.grading.trusted.worker import LIMITS_ENV
from m2l_nlp.impl import repo_root

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

    While timing, every check runs the reference twice, once as the graded code and once
    as the reference, and each side compiles programs of its own, most of them the same
    programs: the second is then read back, not compiled. Student workers get no cache: their
    user cannot open this folder, so they can neither plant a program for the reference to
    run nor run one of its programs."""
    folder = tempfile.mkdtemp(prefix="reference-programs-", dir=scratch)
    return {
        "JAX_COMPILATION_CACHE_DIR": folder,
        "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0",
    }


def reference_pass(
    practical: str, root: Path, scratch: Path, factor: float = 5.0
) -> tuple[RemoteNamespace, dict[str, float]]:
    """Run the reference through every check of ``practical`` in its own process: that
    process (to answer the checks' questions about each submission), the limit per exercise."""
    source = root / "solutions" / f"{practical}.py"
    if not source.is_file():
        raise GraderBroken(f"{source} is missing: the autograder needs solutions/")
    worker = _start(source.parent, practical, None, scratch, _reference_programs(scratch))
    remote = RemoteNamespace(worker)
    remote.stub_lines = stub_lines_from(str(source))
    try:
        recorder = record(practical, remote, remote.stub_lines)
    except (RuntimeError, WorkerGone) as err:
        worker.kill()
        raise GraderBroken(str(err)) from None
    limits = {name: max(MIN_LIMIT_S, factor * t) for name, t in recorder.seconds.items()}
    return remote, limits


def _own_words(
    message: object, folder: Path, practical: str = "", found: Found | None = None
) -> str:
    """A message as the student should read it: their file by its name, not our folder (a
    notebook's definitions by the notebook's name), advice for a submission, not for pytest."""
    text = str(message).replace(f"{folder}/", "").replace("run pytest again", "submit again")
    if found is not None and (found.name or "").endswith(".ipynb"):
        text = text.replace(f"{practical}.py", f"{practical}.py (the definitions of {found.name})")
    return text[:MESSAGE_CHARS]


def _all_results(exercises: list[Exercise], status: str, message: str) -> list[ExerciseResult]:
    return [
        ExerciseResult(ex, [CheckResult(ex.name, c.name, status, message) for c in ex.checks])
        for ex in exercises
    ]


def _stopped_message(limit: float) -> str:
    return (
        f"stopped after {limit:.0f} s (a few times the reference's time on this machine): "
        "look for an endless loop, or a Python loop over every array element"
    )


def grade_practical(
    practical: str,
    found: Found,
    folder: Path,
    user: tuple[int, int] | None,
    reference: RemoteNamespace,
    limits: dict[str, float],
) -> list[ExerciseResult]:
    """Grade one practical of the submission (its file already in ``folder``). The time the
    reference's process takes to answer does not count against the student's limit."""
    exercises = [ex for ex in load_exercises().values() if ex.practical == practical]
    if found.text is None:
        message = found.problem or (
            f"not started: the submission has no {practical}.py (nor a notebook of it)"
        )
        return _all_results(exercises, "error" if found.problem else "not started", message)
    path = folder / f"{practical}.py"
    home = Path(tempfile.mkdtemp(prefix="home-", dir=folder))  # removed with the folder
    if user is not None:
        os.chown(home, *user)
    limited = {LIMITS_ENV: "1"}
    try:
        worker: Worker | None = _start(folder, practical, user, home, limited)
    except CheckFailure as err:  # the file does not import: said once, for every exercise
        return _all_results(exercises, "error", _own_words(err, folder, practical, found))
    except WorkerStopped:
        message = f"importing {practical}.py took more than {LOAD_LIMIT_S:g} s"
        return _all_results(exercises, "error", message)
    except WorkerLost as lost:
        message = f"the process importing {practical}.py ended ({lost}): does it exit or crash?"
        return _all_results(exercises, "error", message)
    results = []
    for ex in exercises:
        started = time.monotonic()
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
                    worker = _start(folder, practical, user, home, limited)
                worker.limit, worker.deadline = limit, deadline
                reference.worker.pauses = worker
                run_check(ex, chk, RemoteNamespace(worker), reference, [])
            except WorkerGone as gone:
                if reference.worker.gone is not None:
                    raise  # the reference's own process: no verdict on the student's code
                worker = None
                if isinstance(gone, WorkerStopped):
                    checks.append(CheckResult(ex.name, chk.name, "failed", _stopped_message(limit)))
                    stopped = "not run: an earlier check of this exercise was stopped"
                else:
                    message = (
                        f"the process running your code ended ({gone}): does it call sys.exit() "
                        "or os._exit(), or crash?"
                    )
                    checks.append(CheckResult(ex.name, chk.name, "failed", message))
                continue
            except Exception as caught:  # noqa: BLE001 - classified by outcome()
                err = caught
            finally:
                reference.worker.pauses = None
                reap_orphans({w.process.pid for w in (worker, reference.worker) if w})
            deadline = worker.deadline if worker is not None else deadline  # pauses moved it
            status, message = outcome(err, {str(path)})
            message = _own_words(message, folder, practical, found)
            checks.append(CheckResult(ex.name, chk.name, status, message))
        results.append(ExerciseResult(ex, checks, seconds=time.monotonic() - started))
    if worker is not None:
        worker.kill()
    return results


def _grade_submission(
    submission: Path,
    folder: Path,
    practicals: list[str],
    user: tuple[int, int] | None,
    references: dict[str, tuple[RemoteNamespace, dict[str, float]]],
    log: Callable[[str], None],
) -> tuple[list[ExerciseResult], list[str]]:
    """The results of one submission (in the current grading seed) and what to say first."""
    exercises = load_exercises()
    try:
        found = find_practicals(submission, practicals)
    except SubmissionError as err:
        message = f"error: {err}"
        return _all_results(list(exercises.values()), "error", message), [message]
    notes = []
    for practical, item in found.items():
        if item.text is not None:
            (folder / f"{practical}.py").write_text(item.text, encoding="utf-8")
            os.chmod(folder / f"{practical}.py", 0o644)
            notes.append(f"{practical}: graded {item.name}")
        notes += [f"{practical}: {note}" for note in item.notes]  # a problem: in its tests
    results: list[ExerciseResult] = []
    for practical in practicals:
        reference, limits = references[practical]
        try:
            results += grade_practical(practical, found[practical], folder, user, reference, limits)
        except WorkerGone as gone:  # the reference's own process: nothing to blame the student
            raise GraderBroken(f"the reference's process ended ({gone})") from None
        except Exception as err:  # noqa: BLE001 - one practical's loss, never the other's
            log("".join(traceback.format_exception(err)))
            kept = [ex for ex in exercises.values() if ex.practical == practical]
            message = f"the autograder could not grade {practical} ({type(err).__name__})"
            results += _all_results(kept, "error", message)
    return results, notes


def _failed(output: str, seed: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"score": 0, "output": output[:MESSAGE_CHARS], "tests": []}
    if seed is not None:
        data["extra_data"] = {"seed": seed}
    return data


def grade(
    jobs: Sequence[tuple[Path, Path]],
    root: Path | None = None,
    log: Callable[[str], None] = print,
    seed: int | None = None,
) -> list[dict[str, Any]]:
    """Grade each ``(submission folder, results.json path)`` of ``jobs`` (the reference is
    checked once for all) and write each results file, whatever a submission does; returns
    their contents. ``seed``: the grading seed of every submission (a fresh one each
    otherwise). Raises :class:`GraderBroken` or :class:`WorkerUnavailable` (each results file
    written, saying so) when no submission can be graded on this machine."""
    root = root or repo_root()
    become_subreaper()
    scratch = Path(tempfile.mkdtemp(prefix="m2l-grading-"))
    os.chmod(scratch, 0o755)
    references: dict[str, tuple[RemoteNamespace, dict[str, float]]] = {}
    written = []
    cleanup = contextlib.ExitStack()  # the hidden checks stay registered while grading only
    try:
        try:
            try:
                cleanup.enter_context(hidden_checks(root))
                settings = read_settings(root)
            except SettingsError as err:
                raise GraderBroken(str(err)) from None
            except Exception as err:  # noqa: BLE001 - the hidden checks' own import
                raise GraderBroken(f"the hidden checks do not import: {err!r}") from None
            exercises = load_exercises()
            practicals = _practicals(exercises)
            user = unprivileged_user()
            if user is not None:  # said at once, not after the reference's checks
                check_workers_start(scratch, user, LOAD_LIMIT_S)
            for practical in practicals:
                start = time.monotonic()
                references[practical] = reference_pass(
                    practical, root, scratch, settings.time_limit_factor
                )
                took = time.monotonic() - start
                log(f"{practical}: the reference passed every check in {took:.1f} s")
        except (GraderBroken, WorkerUnavailable) as err:
            for _, results_path in jobs:  # each student reads why; the instructor, main()'s line
                write_json_atomic(results_path, _failed(f"The autograder could not grade: {err}"))
            raise
        keep = {ref.worker.process.pid for ref, _ in references.values()}
        for number, (submission, results_path) in enumerate(jobs):
            this_seed = seed if seed is not None else secrets.randbits(62) + 1
            started = time.time()
            folder = scratch / f"submission-{number}"
            folder.mkdir(mode=0o755)
            if len(jobs) > 1:
                log(f"== {submission}")
            log(f"grading seed {this_seed} (python -m m2l_nlp.grading.trusted --seed {this_seed})")
            try:
                with seeded(this_seed):
                    results, notes = _grade_submission(
                        submission, folder, practicals, user, references, log
                    )
                blame_earlier(results)
                failed_imports = (
                    c.message for r in results for c in r.checks if c.status == "error"
                )
                errors = list(dict.fromkeys(failed_imports))
                data = results_json(results, [*notes, *errors], settings)
                data["extra_data"] = {"seed": this_seed}
                table = score_table(results, len(exercises))
            except Exception as err:  # noqa: BLE001 - this submission's loss only
                log("".join(traceback.format_exception(err)))
                data = _failed(
                    f"The autograder could not grade this submission ({type(err).__name__}); "
                    "your instructor has the details",
                    this_seed,
                )
                notes, errors, table = [], [], ""
            finally:  # nothing the student started or wrote outlives the grading
                kill_descendants(keep)
                if user is not None:
                    remove_files_of(user[0], started)
                shutil.rmtree(folder, ignore_errors=True)
            try:
                write_json_atomic(results_path, data)
            except OSError as err:  # e.g. a full disk: the next submission may still fit
                log(f"error: could not write {results_path}: {err}")
            written.append(data)
            for text in [*notes, *errors]:
                log(text)
            if table:
                log(table)
    finally:
        for ref, _ in references.values():
            ref.worker.kill()
        kill_descendants()
        shutil.rmtree(scratch, ignore_errors=True)
        cleanup.close()
    return written


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m m2l_nlp.grading.trusted",
        description="Grade a submission for credit (student code in its own process).",
    )
    parser.add_argument(
        "--seed",
        type=int,
        help="the grading seed (as logged for a submission, to grade it again the same way)",
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
        if not os.path.lexists(submission):  # a link or a file is the submission's problem
            print(f"error: {submission} does not exist", file=sys.stderr)
            return 2
    if args.seed is not None and args.seed <= 0:
        parser.error("--seed: give a positive number (0 is the local checks' seed)")
    try:
        grade(jobs, seed=args.seed)
    except (GraderBroken, WorkerUnavailable) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
