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
   (its worker killed) and the next one gets a fresh worker. A submission has one time budget
   and one memory budget for all its processes together (``grading.toml``), and each of its
   processes starts with its limits already set (:mod:`.limits`). Whatever a submission does,
   its processes (and only those: this process adopts orphans, :func:`remote.become_subreaper`),
   files and IPC objects are gone before the next starts (:mod:`.cleanup`), and its
   ``results.json`` is written, its own in a batch.
5. Whatever a student wrote is made safe before it is printed or logged (:func:`safe_text`).
   A batch is graded only from folders that the student's user cannot open, and no folder
   is named on the grader's command line (:func:`main` re-runs itself with the list in a
   root-only file).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import re
import resource
import secrets
import subprocess
import sys
import tempfile
import time
import traceback
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from m2l_nlp.fileio import write_json_atomic
from m2l_nlp.grading.checks.catalog import load_exercises, read_settings
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
from m2l_nlp.grading.trusted.cleanup import (
    Cleaned,
    remove_files_of,
    remove_ipc_of,
    remove_keys_of,
    remove_path,
    writable_folders,
)
from m2l_nlp.grading.trusted.limits import (
    REFERENCE_OOM_SCORE,
    STUDENT_LIMITS,
    STUDENT_OOM_SCORE,
    MemoryWatch,
    TimeBudget,
    TmpfsGrowth,
    detached_shared_memory,
    memory_files_of,
    set_oom_score,
)
from m2l_nlp.grading.trusted.recording import record
from m2l_nlp.grading.trusted.remote import (
    READABLE,
    OutOfTime,
    RemoteNamespace,
    Worker,
    WorkerGone,
    WorkerLost,
    WorkerStopped,
    WorkerUnavailable,
    become_subreaper,
    check_workers_start,
    descendants,
    kill_descendants,
    reap_orphans,
    signal_descendants,
    unprivileged_user,
)
from m2l_nlp.grading.trusted.submission import Found, SubmissionError, find_practicals
from m2l_nlp.impl import repo_root

MIN_LIMIT_S = 10.0
LOAD_LIMIT_S = 60.0  # importing a practical file (JAX included)
MESSAGE_CHARS = 2000
LOG_CHARS = 20_000  # one line of the log (a traceback of student code, say)
JOBS_FLAG = "--jobs-file"

# Printed as escapes: every control, format, surrogate, private-use, unassigned and line or
# paragraph separator character (terminal escapes, carriage returns that overwrite a line,
# bidi marks and invisible tags that reorder or hide text), newline and tab excepted.
_UNSAFE_KINDS = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def _shown(char: str) -> str:
    if char in "\n\t" or unicodedata.category(char) not in _UNSAFE_KINDS:
        return char
    code = ord(char)
    return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"


def safe_text(text: object, limit: int = MESSAGE_CHARS) -> str:
    """``text`` as it may be printed or logged: unsafe characters escaped (``\\x1b``), at
    most ``limit`` characters (a note says how many more there were)."""
    try:
        text = text if isinstance(text, str) else str(text)
    except Exception:  # noqa: BLE001 - a student's __str__
        return "(a message that could not be shown)"
    more = len(text) - limit
    text = "".join(map(_shown, text[:limit]))
    return text + (f" [... {more} more characters]" if more > 0 else "")


def safe_log(log: Callable[[str], None]) -> Callable[[str], None]:
    """``log`` that escapes what it prints and never raises: a logging failure costs
    nothing."""

    def write(text: object) -> None:
        try:
            log(safe_text(text, LOG_CHARS))
        except Exception:  # noqa: BLE001 - a closed or full stdout, say
            pass

    return write


REFERENCE_TIME_FACTOR = 3  # a submission's allowance for the reference's answers, in passes


class GraderBroken(Exception):
    """The reference itself fails on this machine: no grade would be right."""


def _practicals(exercises: dict[str, Exercise]) -> list[str]:
    return list(dict.fromkeys(ex.practical for ex in exercises.values()))


def _start(
    folder: Path,
    practical: str,
    user: tuple[int, int] | None,
    home: Path | None = None,
    env: dict[str, str] | None = None,
    budget: TimeBudget | None = None,
) -> Worker:
    """A worker with ``folder/<practical>.py`` imported (raises what the import raised);
    ``env``: more of its environment variables. ``home``: its HOME (the reference's); a
    student's worker (``home`` None) gets a fresh empty one, and its limits before its
    interpreter starts, so that nothing an earlier worker planted runs first."""
    student = home is None
    if student:
        home = Path(tempfile.mkdtemp(prefix="home-", dir=folder))  # removed with the folder
        if user is not None:
            os.chown(home, *user)
    worker = Worker(
        folder,
        user,
        env={"HOME": str(home), **(env or {})},
        limits=STUDENT_LIMITS if student else None,
        oom_score=STUDENT_OOM_SCORE if student else None,
        budget=budget,
    )
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
    exercises: dict[str, Exercise],
    practical: str,
    root: Path,
    scratch: Path,
    factor: float = 5.0,
) -> tuple[RemoteNamespace, dict[str, float]]:
    """Run the reference through every check of ``practical`` (of the catalog ``exercises``)
    in its own process: that process (to answer the checks' questions about each
    submission), the limit per exercise."""
    source = root / "solutions" / f"{practical}.py"
    if not source.is_file():
        raise GraderBroken(f"{source} is missing: the autograder needs solutions/")
    worker = _start(source.parent, practical, None, scratch, _reference_programs(scratch))
    remote = RemoteNamespace(worker)
    remote.stub_lines = stub_lines_from(str(source))
    try:
        recorder = record(exercises, practical, remote, remote.stub_lines)
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
    text = safe_text(message, 4 * MESSAGE_CHARS)
    text = text.replace(f"{folder}/", "").replace("run pytest again", "submit again")
    if found is not None and (found.name or "").endswith(".ipynb"):
        name = safe_text(found.name, 200)
        text = text.replace(f"{practical}.py", f"{practical}.py (the definitions of {name})")
    return safe_text(text)


def _all_results(exercises: list[Exercise], status: str, message: str) -> list[ExerciseResult]:
    return [
        ExerciseResult(ex, [CheckResult(ex.name, c.name, status, message) for c in ex.checks])
        for ex in exercises
    ]


def _memory_message(watch: MemoryWatch | None) -> str | None:
    """What to say when the memory watch stopped the student's processes (else None)."""
    tripped = watch.reset() if watch is not None else None
    if tripped is None:
        return None
    return (
        f"your code's processes held {tripped / 2**20:.0f} MB together, over the "
        f"{watch.budget / 2**20:.0f} MB one submission may use: they were stopped"
    )


def _out_of_time_message(budget: TimeBudget) -> str:
    return (
        f"not run: the whole submission's time ({budget.seconds:.0f} s, imports included) "
        "ran out; look for an endless loop or a slow import"
    )


def _stopped_message(limit: float) -> str:
    return (
        f"stopped after {limit:.0f} s (a few times the reference's time on this machine): "
        "look for an endless loop, or a Python loop over every array element"
    )


def grade_practical(
    exercises: dict[str, Exercise],
    practical: str,
    found: Found,
    folder: Path,
    user: tuple[int, int] | None,
    reference: RemoteNamespace,
    limits: dict[str, float],
    budget: TimeBudget | None = None,
    watch: MemoryWatch | None = None,
) -> list[ExerciseResult]:
    """Grade one practical of the submission (its file already in ``folder``). The time the
    reference's process takes to answer does not count against the student's limit, nor
    against the submission's ``budget``."""
    exercises = [ex for ex in exercises.values() if ex.practical == practical]
    if found.text is None:
        message = found.problem or (
            f"not started: the submission has no {practical}.py (nor a notebook of it)"
        )
        return _all_results(exercises, "error" if found.problem else "not started", message)
    path = folder / f"{practical}.py"
    try:
        worker: Worker | None = _start(folder, practical, user, budget=budget)
    except CheckFailure as err:  # the file does not import: said once, for every exercise
        return _all_results(exercises, "error", _own_words(err, folder, practical, found))
    except OutOfTime:
        return _all_results(exercises, "failed", _out_of_time_message(budget))
    except WorkerStopped:
        message = f"importing {practical}.py took more than {LOAD_LIMIT_S:g} s"
        return _all_results(exercises, "error", message)
    except WorkerLost as lost:
        message = _memory_message(watch) or (
            f"the process importing {practical}.py ended ({lost}): does it exit or crash?"
        )
        return _all_results(exercises, "error", message)
    results = []
    for ex in exercises:
        started = time.monotonic()
        checks: list[CheckResult] = []
        limit = limits[ex.name]
        deadline = time.monotonic() + limit
        stopped = ""
        for chk in ex.checks:
            if not stopped and budget is not None and budget.left() <= 0:
                stopped = _out_of_time_message(budget)
            if stopped:
                checks.append(CheckResult(ex.name, chk.name, "failed", stopped))
                continue
            err: BaseException | None = None
            try:
                if worker is None:
                    worker = _start(folder, practical, user, budget=budget)
                worker.limit, worker.deadline = limit, deadline
                reference.worker.pauses = worker
                run_check(ex, chk, RemoteNamespace(worker), reference, [])
            except WorkerGone as gone:
                if reference.worker.gone is not None:
                    raise  # the reference's own process: no verdict on the student's code
                worker = None
                if isinstance(gone, OutOfTime):
                    stopped = _out_of_time_message(budget)
                    checks.append(CheckResult(ex.name, chk.name, "failed", stopped))
                elif isinstance(gone, WorkerStopped):
                    checks.append(CheckResult(ex.name, chk.name, "failed", _stopped_message(limit)))
                    stopped = "not run: an earlier check of this exercise was stopped"
                elif isinstance(gone, CheckFailure):  # pragma: no cover - never both
                    raise
                else:
                    message = _memory_message(watch) or (
                        f"the process running your code ended ({gone}): does it call "
                        "sys.exit() or os._exit(), or crash?"
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
            if status == "not started":  # the student's own words, shown in the score table
                message = " ".join(message.split())
            checks.append(CheckResult(ex.name, chk.name, status, message))
        results.append(ExerciseResult(ex, checks, seconds=time.monotonic() - started))
    if worker is not None:
        worker.kill()
    return results


def submission_seconds(settings_limit: float, limits: dict[str, float], practicals: int) -> float:
    """One submission's whole time: what the reference's times allow (each exercise's limit
    and one import allowance per practical), at most ``settings_limit``."""
    return min(settings_limit, sum(limits.values()) + practicals * LOAD_LIMIT_S)


def _grade_submission(
    exercises: dict[str, Exercise],
    submission: Path,
    folder: Path,
    practicals: list[str],
    user: tuple[int, int] | None,
    references: dict[str, tuple[RemoteNamespace, dict[str, float]]],
    log: Callable[[str], None],
    budget: TimeBudget | None = None,
    watch: MemoryWatch | None = None,
    between: Callable[[], None] | None = None,
) -> tuple[list[ExerciseResult], list[str]]:
    """The results of one submission (in the current grading seed) and what to say first.
    ``between()`` runs after each practical: what its student code left must not reach the
    next one (which could show the questions of hidden checks in its visible messages)."""
    try:
        found = find_practicals(submission, practicals)
    except SubmissionError as err:
        message = f"error: {safe_text(err)}"
        return _all_results(list(exercises.values()), "error", message), [message]
    notes = []
    for practical, item in found.items():
        if item.text is not None:
            _write_practical(folder / f"{practical}.py", item.text)
            notes.append(f"{practical}: graded {safe_text(item.name, 200)}")
        notes += [
            f"{practical}: {safe_text(note)}" for note in item.notes
        ]  # a problem: in its tests
    results: list[ExerciseResult] = []
    for practical in practicals:
        reference, limits = references[practical]
        try:
            results += grade_practical(
                exercises,
                practical,
                found[practical],
                folder,
                user,
                reference,
                limits,
                budget,
                watch,
            )
        except WorkerGone as gone:  # the reference's own process: nothing to blame the student
            raise GraderBroken(f"the reference's process ended ({gone})") from None
        except Exception as err:  # noqa: BLE001 - one practical's loss, never the other's
            log("".join(traceback.format_exception(err)))
            kept = [ex for ex in exercises.values() if ex.practical == practical]
            message = f"the autograder could not grade {practical} ({type(err).__name__})"
            results += _all_results(kept, "error", message)
        if between is not None:
            between()
    return results, notes


def _write_practical(path: Path, text: str) -> None:
    """The student's file, readable by the student's user (never a surrogate: escaped)."""
    path.write_text(text, encoding="utf-8", errors="surrogateescape")
    os.chmod(path, 0o644)


def _failed(output: str, seed: int | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {"score": 0, "output": output[:MESSAGE_CHARS], "tests": []}
    if seed is not None:
        data["extra_data"] = {"seed": seed}
    return data


class _Batch:
    """What every submission of one grading shares: the references, the settings, the
    student's user, the folders to clean, the memory watch, and the log."""

    def __init__(self, root: Path, scratch: Path, log: Callable[[str], None]):
        self.root, self.scratch, self.log = root, scratch, log
        self.references: dict[str, tuple[RemoteNamespace, dict[str, float]]] = {}
        self.reference_seconds: dict[str, float] = {}  # each reference's whole pass
        self.settings: Any = None
        self.exercises: dict[str, Exercise] = {}  # the catalog, the hidden checks included
        self.practicals: list[str] = []
        self.user: tuple[int, int] | None = None
        self.shared: list[str] = []
        self.watch: MemoryWatch | None = None
        # Set when a submission's leftovers could not all be removed: a later submission
        # of the batch could read them, so none is graded after it.
        self.tainted = ""

    def keep(self) -> set[int]:
        """The reference's processes: never a submission's to count or kill."""
        return {ref.worker.process.pid for ref, _ in self.references.values()}

    def check_reference(self, practical: str) -> None:
        """Run (or, if its process has ended, run again) the reference's pass."""
        reference = self.references.get(practical)
        if reference is not None and reference[0].worker.gone is None:
            return
        start = time.monotonic()
        if self.watch is not None:  # its new process is not yet among those kept apart
            self.watch.paused = True
        try:
            remote, limits = reference_pass(
                self.exercises, practical, self.root, self.scratch, self.settings.time_limit_factor
            )
        finally:
            if self.watch is not None:
                self.watch.paused = False
        self.references[practical] = remote, limits
        took = time.monotonic() - start
        self.reference_seconds[practical] = took
        self.log(f"{practical}: the reference passed every check in {took:.1f} s")
        problem = set_oom_score(remote.worker.process.pid, REFERENCE_OOM_SCORE)
        if problem:
            self.log(f"note: the reference's OOM score is left as it is: {problem}")

    def clean(self, started: float, folder: Path, keep_folder: bool = False) -> None:
        """Everything a submission started or left goes; each step's errors are logged,
        never raised. ``keep_folder``: between two practicals, the submission's files stay
        and only its workers' homes in ``folder`` go."""

        def homes() -> Cleaned:
            done = Cleaned()
            for home in folder.glob("home-*"):
                done.add(remove_path(home))
            return done

        steps: list[tuple[str, Callable[[], Any]]] = [
            ("processes", lambda: kill_descendants(self.keep())),
            ("homes", homes) if keep_folder else ("folder", lambda: remove_path(folder)),
        ]
        if self.user is not None:
            uid = self.user[0]
            steps += [
                ("files", lambda: remove_files_of(uid, started, self.shared)),
                ("IPC objects", lambda: remove_ipc_of(uid)),
                ("keyrings", lambda: remove_keys_of(self.user)),
            ]
        for what, step in steps:
            try:
                done = step()
            except Exception as err:  # noqa: BLE001 - logged; the next submission goes on
                self.log(f"cleanup ({what}) failed: {err!r}")
                continue
            if isinstance(done, Cleaned) and done.left:
                self.log(f"cleanup ({what}): {len(done.left)} left, e.g. {done.left[0]}")
                if what in ("files", "homes", "IPC objects", "keyrings"):
                    self.tainted = (
                        f"what an earlier submission left ({what}) could not all be removed, "
                        "and a later one could read it: grade the rest of the batch again"
                    )


def _grade_one(batch: _Batch, number: int, submission: Path, seed: int) -> dict[str, Any]:
    """Grade one submission and return its results (always; anything it raised is its own
    error), its processes, files and IPC objects gone."""
    log = batch.log
    started = time.time()
    folder = batch.scratch / f"submission-{number}"
    notes: list[str] = []
    errors: list[str] = []
    table = ""
    try:
        for practical in batch.practicals:
            batch.check_reference(practical)
        folder.mkdir(mode=0o755)
        limits = {n: t for _, lim in batch.references.values() for n, t in lim.items()}
        seconds = submission_seconds(
            batch.settings.submission_time_limit, limits, len(batch.practicals)
        )
        # the reference's answers to one submission take less than its own pass over every
        # check: more than a few times that is the submission's doing (it slows the machine)
        allowance = REFERENCE_TIME_FACTOR * sum(batch.reference_seconds.values()) + 60
        budget = TimeBudget(seconds, allowance)
        with seeded(seed):
            results, notes = _grade_submission(
                batch.exercises,
                submission,
                folder,
                batch.practicals,
                batch.user,
                batch.references,
                log,
                budget,
                batch.watch,
                between=lambda: batch.clean(started, folder, keep_folder=True),
            )
        blame_earlier(results)
        failed_imports = (c.message for r in results for c in r.checks if c.status == "error")
        errors = list(dict.fromkeys(failed_imports))
        data = results_json(results, [*notes, *errors], batch.settings)
        data["extra_data"] = {"seed": seed}
        table = score_table(results, len(batch.exercises))
    except (Exception, WorkerGone) as err:  # noqa: BLE001 - this submission's loss only
        log("".join(traceback.format_exception(err)))
        data = _failed(
            f"The autograder could not grade this submission ({type(err).__name__}); "
            "your instructor has the details",
            seed,
        )
        notes, errors, table = [], [], ""
    finally:  # nothing the student started or wrote outlives the grading
        batch.clean(started, folder)
    for text in [*notes, *errors]:  # the student's words: their lines indented, as one note
        log("\n    ".join(safe_text(text).splitlines()))
    if table:
        log(table)
    return data


def _write_results(path: Path, data: dict[str, Any], log: Callable[[str], None]) -> None:
    try:
        write_json_atomic(path, data)
    except Exception as err:  # noqa: BLE001 - a full disk, say: the next may fit
        log(f"error: could not write {path}: {err!r}")


COURSE_DISTRIBUTION = "m2l-nlp"


def installed_versions() -> str:
    """Python's version and the installed version of the course and of each of its direct
    dependencies, ``name==version`` (for the log: which set graded)."""
    import importlib.metadata as md

    found = [f"python=={platform.python_version()}"]
    try:
        names = [COURSE_DISTRIBUTION] + [
            re.match(r"[A-Za-z0-9_.-]+", r)[0]
            for r in md.requires(COURSE_DISTRIBUTION) or []
            if "extra ==" not in r
        ]
    except md.PackageNotFoundError:
        return found[0] + f" ({COURSE_DISTRIBUTION} is not installed as a package)"
    for name in names:
        try:
            found.append(f"{name}=={md.version(name)}")
        except md.PackageNotFoundError:
            continue  # a dependency for another Python (tomli)
    return " ".join(found)


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
    log = safe_log(log)
    log(f"versions: {installed_versions()}")
    become_subreaper()
    scratch = Path(tempfile.mkdtemp(prefix="m2l-grading-"))
    os.chmod(scratch, 0o755)
    batch = _Batch(root, scratch, log)
    written = []
    try:
        try:
            try:
                batch.exercises = load_exercises(root, hidden=True)  # for this grading only
                batch.settings = read_settings(root, batch.exercises)
            except SettingsError as err:
                raise GraderBroken(str(err)) from None
            except Exception as err:  # noqa: BLE001 - the hidden checks' own import
                raise GraderBroken(f"the hidden checks do not import: {err!r}") from None
            batch.practicals = _practicals(batch.exercises)
            batch.user = unprivileged_user()
            if batch.user is not None:  # said at once, not after the reference's checks
                check_workers_start(scratch, batch.user, LOAD_LIMIT_S)
                batch.shared = writable_folders(*batch.user)
            for practical in batch.practicals:
                batch.check_reference(practical)
        except (GraderBroken, WorkerUnavailable) as err:
            # The machine's problem is said to the student; the reference's (which may name a
            # hidden check and its inputs) only in the log, and main()'s line.
            said = err if isinstance(err, WorkerUnavailable) else "your instructor has the details"
            for _, results_path in jobs:
                write_json_atomic(results_path, _failed(f"The autograder could not grade: {said}"))
            log(f"error: {err}")
            raise
        budget = int(batch.settings.memory_budget_mb * 2**20)
        tmpfs = TmpfsGrowth(batch.user)
        uid = batch.user[0] if batch.user is not None else os.getuid()

        def held_by_the_kernel(pids: set[int]) -> int:
            return detached_shared_memory(uid) + tmpfs.grown() + memory_files_of(pids)

        def held_for_the_student(pids: set[int]) -> int:
            # Other processes on the machine write in the in-memory folders too: what their
            # files grew by is not the submission's. Without a user of its own, a
            # submission's files cannot be told from theirs, and none are counted.
            files = tmpfs.grown_by_student() if batch.user is not None else 0
            return detached_shared_memory(uid) + files + memory_files_of(pids)

        batch.watch = MemoryWatch(
            budget,
            pids=lambda: descendants(batch.keep()),
            kill=lambda: signal_descendants(batch.keep()),
            extra=held_by_the_kernel,
            exact=held_for_the_student,
        )
        with batch.watch:
            for number, (submission, results_path) in enumerate(jobs):
                this_seed = seed if seed is not None else secrets.randbits(62) + 1
                if len(jobs) > 1:
                    log(f"== submission {number + 1} of {len(jobs)}: {results_path}")
                again = f"python -m m2l_nlp.grading.trusted --seed {this_seed}"
                log(f"grading seed {this_seed} ({again})")
                batch.watch.reset()
                tmpfs.reset()  # what earlier submissions left is cleaned: count from here
                start = time.monotonic()
                if batch.tainted:
                    log(f"not graded: {batch.tainted}")
                    data = _failed(
                        "The autograder could not grade this submission in this batch; your "
                        "instructor has the details (grade it on its own)",
                        None,
                    )
                    _write_results(results_path, data, log)
                    written.append(data)
                    continue
                data = _grade_one(batch, number, submission, this_seed)
                log(f"submission graded in {time.monotonic() - start:.1f} s")
                _write_results(results_path, data, log)
                written.append(data)
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
        log(
            f"peak memory: the grader {peak:.0f} MB, a submission's processes together "
            f"{batch.watch.peak / 2**20:.0f} MB"
        )
    finally:
        for ref, _ in batch.references.values():
            ref.worker.kill()
        kill_descendants()
        remove_path(scratch)
    return written


_CAN_OPEN = (
    "import json, os, sys\n"
    "paths, mode = json.load(sys.stdin)\n"
    "can = (lambda p: os.access(p, os.W_OK)) if mode == 'w' else (\n"
    "    lambda p: os.access(p, os.R_OK) or os.access(p, os.X_OK))\n"
    "print(json.dumps([p for p in paths if can(p)]))\n"
)


def readable_by(user: tuple[int, int], paths: Sequence[Path], mode: str = "r") -> list[str]:
    """Those of ``paths`` that ``user`` can open (``mode`` "r") or write in ("w"), asked as
    that user."""
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-S", "-c", _CAN_OPEN],
            input=json.dumps([[os.path.abspath(p) for p in paths], mode]),
            capture_output=True,
            text=True,
            user=user[0],
            group=user[1],
            extra_groups=[],
            cwd="/",
            timeout=60,
        )
    except PermissionError as err:  # this Python is under a folder that user cannot enter
        raise WorkerUnavailable(
            f"user {user[0]} may not run {sys.executable} ({err.strerror}): {READABLE}"
        ) from None
    if done.returncode != 0:
        return [str(p) for p in paths]  # cannot tell: as if it could
    return json.loads(done.stdout)


def _hide_jobs(pairs: list[str], seed: int | None) -> None:
    """Run this grader again with ``pairs`` in a root-only file instead of its command line,
    which every user can read in /proc: a student's code must not learn where its
    classmates' folders are. Does not return."""
    fd, path = tempfile.mkstemp(prefix="m2l-jobs-", suffix=".json")  # mode 0600
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        json.dump({"pairs": pairs, "seed": seed}, handle)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(sys.executable, [sys.executable, "-m", "m2l_nlp.grading.trusted", JOBS_FLAG, path])


def _read_jobs(path: str) -> tuple[list[str], int | None]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(path)
    return [str(p) for p in data["pairs"]], data["seed"]


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
    parser.add_argument(JOBS_FLAG, help=argparse.SUPPRESS)
    parser.add_argument(
        "pairs",
        nargs="*",
        metavar="SUBMISSION RESULTS",
        help="a folder with the student's files, then where to write its results.json (more "
        "pairs grade more submissions against one check of the reference; their folders "
        "must be ones that only root can open)",
    )
    from_command_line = argv is None
    args = parser.parse_args(argv)
    pairs, seed = _read_jobs(args.jobs_file) if args.jobs_file else (args.pairs, args.seed)
    if not pairs or len(pairs) % 2:
        parser.error("give a results path after each submission folder")
    jobs = [(Path(s), Path(r)) for s, r in zip(pairs[::2], pairs[1::2], strict=True)]
    for submission, _ in jobs:
        if not os.path.lexists(submission):  # a link or a file is the submission's problem
            print(f"error: {safe_text(submission)} does not exist", file=sys.stderr)
            return 2
    if seed is not None and seed <= 0:
        parser.error("--seed: give a positive number (0 is the local checks' seed)")
    try:
        if len(jobs) > 1 and not args.jobs_file:
            user = unprivileged_user()
            # a classmate's folder must stay closed; a results folder, not writable (a
            # results file written there early would be renamed over, or kept)
            can_open = readable_by(user, [s for s, _ in jobs]) if user is not None else []
            can_open += readable_by(user, [r.parent for _, r in jobs], "w") if user else []
            if can_open:
                print(
                    f"error: the student's user can reach {safe_text(can_open[0])}"
                    + (f" and {len(can_open) - 1} more" if len(can_open) > 1 else "")
                    + ": a batch is graded from submission folders only root can open and "
                    "results folders only root can write to (chmod 700 the folder that "
                    "holds them)",
                    file=sys.stderr,
                )
                return 2
            if from_command_line:
                _hide_jobs(pairs, seed)
        grade(jobs, seed=seed)
    except (GraderBroken, WorkerUnavailable) as err:
        print(f"error: {safe_text(err)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
