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
   capped), its practicals copied into a folder of their own. It is graded in phases (each
   practical's visible checks, then each one's hidden checks), each in a place of its own
   when this process is root: a bubblewrap sandbox, or a fresh user (:mod:`.isolation`).
   Student code runs in worker processes (:mod:`.worker`) with their resources bounded. The
   checks run here and ask the reference's process for its answers; the worker only
   computes the student's outputs for the inputs it is sent, as plain data, and a reply
   reaches a check only with the shape of the reference's reply to the same call.
4. Every request to a worker has a deadline; an exercise that runs past its limit is stopped
   (its worker killed) and the next one gets a fresh worker. A submission has one time budget
   and one memory budget for all its processes together (``grading.toml``), and each of its
   processes starts with its limits already set (:mod:`.limits`). Whatever a submission does,
   its processes (and only those: this process adopts orphans, :func:`remote.become_subreaper`),
   files and IPC objects are gone before the next phase starts, and its ``results.json`` is
   written, its own in a batch. This process keeps its own memory under a bound
   (:func:`supervise` grades the rest of a batch in a fresh one if it dies).
5. Whatever a student wrote is made safe before it is printed or logged (:func:`safe_text`).
   A batch is graded only from folders that the student's user cannot open, and no folder
   is named on the grader's command line (:func:`main` re-runs itself with the list in a
   root-only file).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import platform
import re
import resource
import secrets
import stat
import subprocess
import sys
import tempfile
import time
import traceback
import unicodedata
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from m2l_nlp.fileio import write_json_atomic
from m2l_nlp.grading.checks.catalog import load_exercises, read_settings
from m2l_nlp.grading.checks.registry import Check, CheckFailure, Exercise
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
from m2l_nlp.grading.trusted.cleanup import Cleaned, remove_path, writable_folders
from m2l_nlp.grading.trusted.isolation import (
    Isolation,
    NoPlaceLeft,
    Place,
    mounts_under,
    show_message_queues,
    student_users,
    unmount,
)
from m2l_nlp.grading.trusted.limits import (
    GRADER_MEMORY,
    GRADER_OOM_SCORE,
    GROUP_MARGIN,
    REFERENCE_OOM_SCORE,
    STUDENT_LIMITS,
    STUDENT_OOM_SCORE,
    MemoryGroup,
    MemoryWatch,
    TimeBudget,
    TmpfsGrowth,
    bound_own_memory,
    detached_shared_memory,
    ipc_namespaces,
    memory_files_of,
    set_oom_score,
)
from m2l_nlp.grading.trusted.recording import record
from m2l_nlp.grading.trusted.remote import (
    READABLE,
    USER_ENV,
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
)
from m2l_nlp.grading.trusted.submission import Found, SubmissionError, find_practicals
from m2l_nlp.impl import repo_root

MIN_LIMIT_S = 10.0
LOAD_LIMIT_S = 60.0  # importing a practical file (JAX included)
MESSAGE_CHARS = 2000
LOG_CHARS = 20_000  # one line of the log (a traceback of student code, say)
JOBS_FLAG = "--jobs-file"
ISOLATION_ENV = "M2L_ISOLATION"  # "users": the fallback path even where a sandbox would start

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
    place: Place | None,
    home: Path | None = None,
    env: dict[str, str] | None = None,
    budget: TimeBudget | None = None,
) -> Worker:
    """A worker with ``folder/<practical>.py`` imported (raises what the import raised);
    ``env``: more of its environment variables. ``home``: its HOME (the reference's, which
    runs as this process's user). A student's worker (``home`` None) runs in ``place`` (its
    sandbox or user; as this process's user where None, with a fresh HOME in ``folder``),
    its limits set before its interpreter starts, so that nothing planted earlier runs
    first."""
    student = home is None
    if student and place is None:
        home = Path(tempfile.mkdtemp(prefix="home-", dir=folder))  # removed with the folder
    worker = Worker(
        folder,
        place.user if place is not None else None,
        env={"HOME": place.home if place is not None else str(home), **(env or {})},
        limits=STUDENT_LIMITS if student else None,
        oom_score=STUDENT_OOM_SCORE if student else None,
        budget=budget,
        wrap=place.command if place is not None else None,
        group=place.group if place is not None else None,
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


def _group_message(place: Place | None) -> str | None:
    """What to say when the kernel killed a process of the phase's memory cgroup (else
    None): what its processes held, counted by the kernel, went past the group's limit."""
    group = place.group if place is not None else None
    if group is None or group.oom_kills() == 0:
        return None
    return (
        f"your code's processes held over {group.limit / 2**20:.0f} MB together, counted by "
        "the kernel (socket buffers and other kernel memory included): one was stopped"
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


@dataclasses.dataclass
class PhaseRun:
    """What grading one phase of a submission needs besides its exercises: the folder with
    the student's files, the reference's process, each exercise's limit, the place the
    student's code runs in (None: as this process's user), the submission's time budget and
    its memory watch."""

    folder: Path
    reference: RemoteNamespace
    limits: dict[str, float]
    place: Place | None = None
    budget: TimeBudget | None = None
    watch: MemoryWatch | None = None


class _StudentWorker:
    """The student's worker of one phase: started when first needed, and again after one
    was stopped."""

    def __init__(self, run: PhaseRun, practical: str):
        self.run, self.practical = run, practical
        self.current: Worker | None = None

    def get(self) -> Worker:
        if self.current is None:
            run = self.run
            self.current = _start(run.folder, self.practical, run.place, budget=run.budget)
        return self.current

    def close(self) -> None:
        if self.current is not None:
            self.current.kill()
            self.current = None


def grade_practical(
    exercises: Iterable[Exercise] | dict[str, Exercise],
    practical: str,
    found: Found,
    run: PhaseRun,
) -> list[ExerciseResult]:
    """Grade ``exercises`` of ``practical`` (its file already in ``run.folder``). The time
    the reference's process takes to answer does not count against the student's limit,
    nor against the submission's budget."""
    items = exercises.values() if isinstance(exercises, dict) else exercises
    exercises = [ex for ex in items if ex.practical == practical]
    if found.text is None:
        return _not_found(exercises, practical, found)
    student = _StudentWorker(run, practical)
    failed = _import_failure(student, found)
    if failed is not None:
        return _all_results(exercises, *failed)
    try:
        return [_grade_exercise(ex, student, found) for ex in exercises]
    finally:
        student.close()


def _not_found(exercises: list[Exercise], practical: str, found: Found) -> list[ExerciseResult]:
    """Every exercise of a practical the submission does not have, or has unreadable."""
    message = found.problem or (
        f"not started: the submission has no {practical}.py (nor a notebook of it)"
    )
    return _all_results(exercises, "error" if found.problem else "not started", message)


def _import_failure(student: _StudentWorker, found: Found) -> tuple[str, str] | None:
    """Start the phase's first worker: None, or ``(status, message)`` for every exercise
    when the student's file does not import."""
    run, practical = student.run, student.practical
    try:
        student.get()
    except CheckFailure as err:  # the file does not import: said once, for every exercise
        return "error", _own_words(err, run.folder, practical, found)
    except OutOfTime:
        return "failed", _out_of_time_message(run.budget)
    except WorkerStopped:
        return "error", f"importing {practical}.py took more than {LOAD_LIMIT_S:g} s"
    except WorkerLost as lost:
        return "error", _memory_message(run.watch) or (
            f"the process importing {practical}.py ended ({lost}): does it exit or crash?"
        )
    return None


def _grade_exercise(ex: Exercise, student: _StudentWorker, found: Found) -> ExerciseResult:
    """Run every check of ``ex`` within its limit; a stopped check fails the rest."""
    run = student.run
    started = time.monotonic()
    limit = run.limits[ex.name]
    deadline = started + limit
    checks: list[CheckResult] = []
    stopped = ""
    for chk in ex.checks:
        if not stopped and run.budget is not None and run.budget.left() <= 0:
            stopped = _out_of_time_message(run.budget)
        if stopped:
            checks.append(CheckResult(ex.name, chk.name, "failed", stopped))
            continue
        result, stopped, deadline = _run_one_check(ex, chk, student, found, limit, deadline)
        checks.append(result)
    return ExerciseResult(ex, checks, seconds=time.monotonic() - started)


def _run_one_check(
    ex: Exercise,
    chk: Check,
    student: _StudentWorker,
    found: Found,
    limit: float,
    deadline: float,
) -> tuple[CheckResult, str, float]:
    """One check's result, why the exercise's later checks are not run ("" if they are),
    and the exercise's deadline (moved on while the reference answered)."""
    run = student.run
    reference = run.reference
    err: BaseException | None = None
    try:
        worker = student.get()
        worker.limit, worker.deadline = limit, deadline
        reference.worker.pauses = worker
        about = chk.func.__doc__ or chk.doc
        student_ns = RemoteNamespace(worker, declared_by=reference, about=about)
        run_check(ex, chk, student_ns, reference, [])
    except WorkerGone as gone:
        if reference.worker.gone is not None:
            raise  # the reference's own process: no verdict on the student's code
        student.current = None
        message, stopped = _gone_verdict(gone, run, limit)
        return CheckResult(ex.name, chk.name, "failed", message), stopped, deadline
    except Exception as caught:  # noqa: BLE001 - classified by outcome()
        err = caught
    finally:
        reference.worker.pauses = None
        reap_orphans({w.process.pid for w in (student.current, reference.worker) if w})
    if student.current is not None:
        deadline = student.current.deadline  # the reference's answers moved it
    path = run.folder / f"{student.practical}.py"
    status, message = outcome(err, {str(path)})
    message = _own_words(message, run.folder, student.practical, found)
    if status == "not started":  # the student's own words, shown in the score table
        message = " ".join(message.split())
    return CheckResult(ex.name, chk.name, status, message), "", deadline


def _gone_verdict(gone: WorkerGone, run: PhaseRun, limit: float) -> tuple[str, str]:
    """A check whose worker was stopped or ended: its message, and why the exercise's later
    checks are not run ("" if they are, in a fresh worker)."""
    if isinstance(gone, OutOfTime):
        message = _out_of_time_message(run.budget)
        return message, message
    if isinstance(gone, WorkerStopped):
        return _stopped_message(limit), "not run: an earlier check of this exercise was stopped"
    if isinstance(gone, CheckFailure):  # pragma: no cover - never both
        raise gone
    message = (
        _memory_message(run.watch)
        or _group_message(run.place)
        or (
            "the process running your code ended "
            f"({gone}): does it call sys.exit() or os._exit(), or crash?"
        )
    )
    return message, ""


def submission_seconds(settings_limit: float, limits: dict[str, float], practicals: int) -> float:
    """One submission's whole time: what the reference's times allow (each exercise's limit
    and one import allowance per practical), at most ``settings_limit``."""
    return min(settings_limit, sum(limits.values()) + practicals * LOAD_LIMIT_S)


@dataclasses.dataclass
class Phase:
    """One practical's visible exercises, or its hidden ones: graded in a place of its own."""

    practical: str
    hidden: bool
    exercises: list[Exercise]


def phases(exercises: dict[str, Exercise], practicals: list[str]) -> list[Phase]:
    """Every practical's visible phase, then every hidden one: a hidden check's inputs never
    reach a place where a later visible check runs (and could show them in its messages)."""
    found = []
    for hidden in (False, True):
        for practical in practicals:
            chosen = [
                ex for ex in exercises.values() if ex.practical == practical and ex.hidden == hidden
            ]
            if chosen:
                found.append(Phase(practical, hidden, chosen))
    return found


def _grade_submission(
    batch: _Batch, found: dict[str, Found], folder: Path, budget: TimeBudget
) -> tuple[list[ExerciseResult], list[str]]:
    """The results of one submission (its practicals ``found``, in the current grading
    seed), in the catalog's order, and what to say first. Each phase runs in a place of its
    own (:meth:`_Batch.open_place`)."""
    exercises = batch.exercises
    notes = []
    for practical, item in found.items():
        if item.text is not None:
            _write_practical(folder / f"{practical}.py", item.text)
            notes.append(f"{practical}: graded {safe_text(item.name, 200)}")
        notes += [
            f"{practical}: {safe_text(note)}" for note in item.notes
        ]  # a problem: in its tests
    graded: dict[str, ExerciseResult] = {}
    for phase in phases(exercises, batch.practicals):
        for result in _grade_phase(batch, phase, found[phase.practical], folder, budget):
            graded[result.exercise.name] = result
    return [graded[name] for name in exercises if name in graded], notes


def _grade_phase(
    batch: _Batch, phase: Phase, found: Found, folder: Path, budget: TimeBudget | None
) -> list[ExerciseResult]:
    """One phase's results, graded in a fresh place that ends with it."""
    if found.text is None:  # nothing to run: no reference asked, no place opened
        return _not_found(phase.exercises, phase.practical, found)
    reference, limits = batch.references[phase.practical]
    place = batch.open_place()  # NoPlaceLeft: the submission is not graded in this batch
    try:
        run = PhaseRun(folder, reference, limits, place, budget, batch.watch)
        return grade_practical(phase.exercises, phase.practical, found, run)
    except WorkerGone as gone:  # the reference's own process: nothing to blame the student
        raise GraderBroken(f"the reference's process ended ({gone})") from None
    except Exception as err:  # noqa: BLE001 - one phase's loss, never another's
        batch.log("".join(traceback.format_exception(err)))
        message = f"the autograder could not grade {phase.practical} ({type(err).__name__})"
        return _all_results(phase.exercises, "error", message)
    finally:
        batch.end_place(place)


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
    """What every submission of one grading shares: the references, the settings, where
    student code runs (:class:`~.isolation.Isolation`), the memory watch, and the log."""

    def __init__(self, root: Path, scratch: Path, log: Callable[[str], None]):
        self.root, self.scratch, self.log = root, scratch, log
        self.references: dict[str, tuple[RemoteNamespace, dict[str, float]]] = {}
        self.reference_seconds: dict[str, float] = {}  # each reference's whole pass
        self.settings: Any = None
        self.exercises: dict[str, Exercise] = {}  # the catalog, the hidden checks included
        self.practicals: list[str] = []
        self.isolation: Isolation | None = None  # None: student code runs as this user
        self.place: Place | None = None  # the phase's place now
        self.watch: MemoryWatch | None = None
        self.tmpfs: TmpfsGrowth | None = None
        self._sandbox_shm = (0.0, 0)  # (when, bytes): a sandbox's segments, read once a second

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

    def budget(self, practicals: list[str]) -> TimeBudget:
        """One submission's time budget: what the references of its ``practicals`` allow."""
        limits = {n: t for p in practicals for n, t in self.references[p][1].items()}
        seconds = submission_seconds(self.settings.submission_time_limit, limits, len(practicals))
        # the reference's answers to one submission take less than its own pass over every
        # check: more than a few times that is the submission's doing (it slows the machine)
        spent = sum(self.reference_seconds[p] for p in practicals)
        return TimeBudget(seconds, REFERENCE_TIME_FACTOR * spent + 60)

    def open_place(self) -> Place | None:
        """A fresh place for the next phase (None where student code runs as this user)."""
        if self.isolation is None:
            return None
        self.place = self.isolation.open(time.time())
        if self.tmpfs is not None:  # what earlier phases left is gone: count from here
            self.tmpfs.student = self.place.user
            self.tmpfs.reset()
        return self.place

    def end_place(self, place: Place | None) -> None:
        """The phase's processes killed, and its place ended (:meth:`Isolation.close`)."""
        self._step("processes", lambda: kill_descendants(self.keep()))
        if place is not None and self.isolation is not None:
            self._step("place", lambda: self.isolation.close(place))
        self.place = None

    def clean(self, folder: Path) -> None:
        """Everything a submission started or left goes; each step's errors are logged,
        never raised."""
        self._step("processes", lambda: kill_descendants(self.keep()))
        done = self._step("folder", lambda: remove_path(folder))
        if isinstance(done, Cleaned) and done.left:
            self.log(f"cleanup (folder): {len(done.left)} left, e.g. {done.left[0]}")

    def _step(self, what: str, step: Callable[[], Any]) -> Any:
        try:
            return step()
        except Exception as err:  # noqa: BLE001 - logged; the next submission goes on
            self.log(f"cleanup ({what}) failed: {err!r}")
            return None

    def held_outside_processes(self, pids: set[int], exact: bool) -> int:
        """Bytes the kernel holds for the submission's processes ``pids`` outside them: its
        in-memory files, its detached System V segments, what its in-memory folders grew by.
        In a sandbox all of those are its own; otherwise ``exact`` leaves out what other
        users' files grew by (quick: the whole machine's growth)."""
        held = memory_files_of(pids)
        place = self.place
        if place is not None and place.mount is not None:
            when, shm = self._sandbox_shm
            if time.monotonic() - when >= 1.0:  # a process started per namespace: not often
                spaces = ipc_namespaces(pids).values()
                shm = sum(detached_shared_memory(None, pid) for pid in spaces)
                self._sandbox_shm = (time.monotonic(), shm)
            return held + shm + place.used()
        uid = place.user[0] if place is not None else os.getuid()
        held += detached_shared_memory(uid)
        if self.tmpfs is None:
            return held
        if not exact:
            return held + self.tmpfs.grown()
        # Without a user of its own, a submission's files cannot be told from others'
        return held + (self.tmpfs.grown_by_student() if place is not None else 0)


class _ReferenceFailed(Exception):
    """A reference's pass failed when first needed (``error``): no later grade would be
    right. (A reference's process that ends while it answers costs that submission only.)"""

    def __init__(self, error: GraderBroken | WorkerUnavailable):
        super().__init__(str(error))
        self.error = error


def _grade_one(batch: _Batch, number: int, submission: Path, seed: int) -> dict[str, Any]:
    """Grade one submission and return its results (always; anything it raised is its own
    error, but :class:`NoPlaceLeft`), its processes, files and IPC objects gone."""
    log = batch.log
    folder = batch.scratch / f"submission-{number}"
    notes: list[str] = []
    errors: list[str] = []
    table = ""
    try:
        try:
            found = find_practicals(submission, batch.practicals)
        except SubmissionError as err:
            message = f"error: {safe_text(err)}"
            results, notes = _all_results(list(batch.exercises.values()), "error", message), []
            found = {}
        # Each practical's reference is checked when the first submission that has it comes
        # (a class handing in practical 1 never waits for the others'), outside the seed.
        present = [p for p, item in found.items() if item.text is not None]
        try:
            for practical in present:
                batch.check_reference(practical)
        except (GraderBroken, WorkerUnavailable) as err:
            raise _ReferenceFailed(err) from None
        folder.mkdir(mode=0o755)
        if found:
            with seeded(seed):
                results, notes = _grade_submission(batch, found, folder, batch.budget(present))
        blame_earlier(results)
        failed_imports = (c.message for r in results for c in r.checks if c.status == "error")
        errors = list(dict.fromkeys(failed_imports))
        data = results_json(results, [*notes, *errors], batch.settings)
        data["extra_data"]["seed"] = seed
        table = score_table(results, len(batch.exercises))
    except (NoPlaceLeft, _ReferenceFailed):
        raise  # the batch's: grade() says so for this submission and every later one
    except (Exception, WorkerGone) as err:  # noqa: BLE001 - this submission's loss only
        log("".join(traceback.format_exception(err)))
        data = _failed(
            f"The autograder could not grade this submission ({type(err).__name__}); "
            "your instructor has the details",
            seed,
        )
        notes, errors, table = [], [], ""
    finally:  # nothing the student started or wrote outlives the grading
        batch.clean(folder)
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


SCRATCH_PREFIX = "m2l-grading-"
MARKER = ".m2l-grader"  # in a scratch folder: the pid and start time of the grader using it


def _process_start(pid: int) -> str:
    """When process ``pid`` started (clock ticks since boot), or "" if there is none."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return stat[stat.rfind(b")") + 2 :].split()[19].decode()
    except (OSError, IndexError):
        return ""


def remove_abandoned_scratch(log: Callable[[str], None], top: str | None = None) -> int:
    """Remove the scratch folders of graders that were killed (their marker names a process
    that is gone), their sandboxes' mounts first: found by a marker that this user owns,
    never through a link. Returns how many were removed."""
    top = top or tempfile.gettempdir()
    removed = 0
    try:
        entries = list(os.scandir(top))
    except OSError:
        return 0
    for entry in entries:
        if not entry.name.startswith(SCRATCH_PREFIX):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            marker = os.path.join(entry.path, MARKER)
            mark = os.stat(marker, follow_symlinks=False)
            if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid():
                continue
            if not stat.S_ISREG(mark.st_mode) or mark.st_uid != os.geteuid():
                continue
            fd = os.open(marker, os.O_RDONLY | os.O_NOFOLLOW)
            with os.fdopen(fd, encoding="ascii") as handle:
                pid, started = handle.read(100).split()
        except (OSError, ValueError):
            continue
        if _process_start(int(pid)) == started:
            continue  # its grader still runs
        for point in mounts_under(Path(entry.path)):
            unmount(point)
        left = remove_path(entry.path).left
        removed += 1
        log(f"removed what a killed grader left: {entry.path}" + (f" ({left[0]})" if left else ""))
    return removed


def _scratch(log: Callable[[str], None]) -> Path:
    """This grading's scratch folder, marked as this process's (the next grader removes it
    if this one is killed)."""
    remove_abandoned_scratch(log)
    scratch = Path(tempfile.mkdtemp(prefix=SCRATCH_PREFIX))
    os.chmod(scratch, 0o755)
    (scratch / MARKER).write_text(f"{os.getpid()} {_process_start(os.getpid())}\n")
    return scratch


def _student_users() -> list[tuple[int, int]] | None:
    try:
        return student_users(USER_ENV)
    except LookupError as err:
        raise WorkerUnavailable(str(err)) from None


def _isolation(batch: _Batch) -> Isolation | None:
    """Where student code runs: bubblewrap sandboxes where they start here, else a user of
    the pool per phase; None when this process is not root (it runs as this user)."""
    users = _student_users()
    if users is None:
        return None
    # said at once, not after the reference's checks
    check_workers_start(batch.scratch, users[0], LOAD_LIMIT_S)
    solutions = batch.root / "solutions"
    if readable_by(users[0], [solutions]):  # a sandbox sees the file system as the user does
        raise WorkerUnavailable(
            f"the student's user can read {solutions}: chmod -R go-rwx it (the autograder's "
            "setup.sh does)"
        )
    chosen = os.environ.get(ISOLATION_ENV, "")
    if chosen not in ("", "users"):
        raise WorkerUnavailable(f"{ISOLATION_ENV}={chosen}: the only choice it takes is users")
    why_not = f"{ISOLATION_ENV}=users" if chosen else Isolation.probe(users[0], batch.scratch)
    isolation = Isolation(users, batch.scratch, batch.log, sandbox=why_not is None)
    if why_not is None:
        batch.log("isolation: a bubblewrap sandbox per phase (practical, visible or hidden)")
    else:
        batch.log(f"isolation: a fresh user per phase, {len(users)} in the pool ({why_not})")
        isolation.queues_unseen = show_message_queues()  # before: it may add /dev/mqueue
        isolation.shared = writable_folders(*users[0])
        isolation.retire_unclean()
        batch.tmpfs = TmpfsGrowth(users[0])
    isolation.memory = _memory_groups(batch)
    return isolation


def _memory_groups(batch: _Batch) -> tuple[tuple[Path, bool], int] | None:
    """Where each phase's memory cgroup is made, and its limit: the submission's budget and
    a margin, so that the memory watch (which names what it counted) speaks first, and the
    group bounds what no watch sees (socket buffers, say); None, logged, where there are none."""
    budget = int(batch.settings.memory_budget_mb * 2**20)
    limit = budget + max(GROUP_MARGIN, budget // 4)
    parent = MemoryGroup.parent()
    if not isinstance(parent, str):
        for left in MemoryGroup.remove_abandoned(parent):
            batch.log(f"cleanup (memory group of a grader that is gone): {left}")
    why_not = parent if isinstance(parent, str) else MemoryGroup.probe(parent, limit)
    if why_not:
        batch.log(f"memory: no cgroup per phase, kernel memory is not bounded ({why_not})")
        return None
    batch.log(f"memory: a cgroup per phase, {limit / 2**20:.0f} MB, kernel memory included")
    return parent, limit


def _cannot_grade(
    jobs: Sequence[tuple[Path, Path]], err: Exception, log: Callable[[str], None]
) -> None:
    """Every results file of ``jobs`` says that no grade can be given on this machine: the
    machine's problem in words; the reference's (which may name a hidden check and its
    inputs) only in the log, and main()'s line."""
    said = err if isinstance(err, WorkerUnavailable) else "your instructor has the details"
    for _, results_path in jobs:
        write_json_atomic(results_path, _failed(f"The autograder could not grade: {said}"))
    log(f"error: {err}")


def grade(
    jobs: Sequence[tuple[Path, Path]],
    root: Path | None = None,
    log: Callable[[str], None] = print,
    seed: int | None = None,
    progress: int | None = None,
) -> list[dict[str, Any]]:
    """Grade each ``(submission folder, results.json path)`` of ``jobs`` (each practical's
    reference is checked once for all, when a submission first has it) and write each
    results file, whatever a submission does; returns
    their contents. ``seed``: the grading seed of every submission (a fresh one each
    otherwise). ``progress``: a file descriptor told ``start N`` and ``done N`` for each
    (:func:`supervise` reads it). Raises :class:`GraderBroken` or :class:`WorkerUnavailable`
    (each results file not yet written is, saying so) when no submission can be graded on
    this machine, and :class:`NoPlaceLeft` (the rest logged, unwritten) when the pool of users
    ran out."""
    root = root or repo_root()
    log = safe_log(log)
    log(f"versions: {installed_versions()}")
    become_subreaper()
    batch = _Batch(root, _scratch(log), log)
    written = []

    def tell(line: str) -> None:
        if progress is not None:
            os.write(progress, f"{line}\n".encode())

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
            batch.isolation = _isolation(batch)
        except (GraderBroken, WorkerUnavailable) as err:
            _cannot_grade(jobs, err, log)
            raise
        batch.watch = MemoryWatch(
            int(batch.settings.memory_budget_mb * 2**20),
            pids=lambda: descendants(batch.keep()),
            kill=lambda: signal_descendants(batch.keep()),
            outside=batch.held_outside_processes,
        )
        with batch.watch:
            for number, (submission, results_path) in enumerate(jobs):
                this_seed = seed if seed is not None else secrets.randbits(62) + 1
                tell(f"start {number}")
                if len(jobs) > 1:
                    log(f"== submission {number + 1} of {len(jobs)}: {results_path}")
                again = f"python -m m2l_nlp.grading.trusted --seed {this_seed}"
                log(f"grading seed {this_seed} ({again})")
                batch.watch.reset()
                start = time.monotonic()
                try:
                    data = _grade_one(batch, number, submission, this_seed)
                except _ReferenceFailed as failed:  # a reference, checked when first needed
                    _cannot_grade(jobs[number:], failed.error, log)
                    raise failed.error from None
                except NoPlaceLeft as err:
                    left = [str(p) for pair in jobs[number:] for p in pair]
                    log(
                        f"not graded: submissions {number + 1} to {len(jobs)} ({err}); grade "
                        f"them in a fresh invocation: python -m m2l_nlp.grading.trusted "
                        + " ".join(left)
                    )
                    raise
                log(f"submission graded in {time.monotonic() - start:.1f} s")
                _write_results(results_path, data, log)
                tell(f"done {number}")
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
        for point in mounts_under(batch.scratch):
            unmount(point)
        remove_path(batch.scratch)
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


CHILD_FLAG = "--grader-state"  # hidden: a supervised grader's jobs, in a root-only file
EXIT_OVER_MEMORY = 75  # a grader that crossed its own memory bound


def supervise(jobs: list[tuple[Path, Path]], seed: int | None) -> int:
    """Grade ``jobs`` in a grader process of their own; when that process dies (past its
    own memory bound, or killed by the kernel), the submission it was grading gets a
    results file that says it could not be graded, and the rest go on in a fresh grader.
    Returns the last grader's exit status."""
    set_oom_score(os.getpid(), GRADER_OOM_SCORE)
    become_subreaper()
    first = 0
    while True:
        fd, state = tempfile.mkstemp(prefix="m2l-grader-", suffix=".json")  # mode 0600
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            json.dump(
                {"pairs": [str(p) for pair in jobs[first:] for p in pair], "seed": seed}, handle
            )
        with tempfile.TemporaryFile() as progress:
            sys.stdout.flush()
            sys.stderr.flush()
            command = [sys.executable, "-m", "m2l_nlp.grading.trusted", CHILD_FLAG, state]
            code = subprocess.run(
                [*command, str(progress.fileno())], pass_fds=(progress.fileno(),)
            ).returncode
            progress.seek(0)
            told = [
                line.split() for line in progress.read().decode("ascii", "replace").splitlines()
            ]
        with contextlib.suppress(OSError):
            os.unlink(state)
        kill_descendants()  # what the dead grader started
        if code in (0, 1, 2, 3):  # it finished (or said, in its results files, why not)
            return code
        started = [int(line[1]) for line in told if line[:1] == ["start"]]
        done = {int(line[1]) for line in told if line[:1] == ["done"]}
        lost = [n for n in started if n not in done]
        why = (
            "its grader crossed its memory bound"
            if code == EXIT_OVER_MEMORY
            else (f"its grader was killed ({code})")
        )
        if not lost:  # it died before any submission (or between two): none is its fault
            for _, results_path in jobs[first + len(done) :]:
                write_json_atomic(results_path, _failed(f"The autograder could not grade: {why}"))
            print(f"error: the grader died outside any submission: {why}", file=sys.stderr)
            return 1
        number = first + lost[0]
        print(f"submission {number + 1}: not graded, {why}; the rest in a fresh grader", flush=True)
        write_json_atomic(
            jobs[number][1],
            _failed(
                f"The autograder could not grade this submission: {why} while it graded it; "
                "your instructor has the details"
            ),
        )
        first = number + 1
        if first >= len(jobs):
            return 0


def _graded_child(state: str, progress: int) -> int:
    """The supervised grader: its jobs from ``state`` (removed once read), its progress told
    to the file descriptor ``progress``, its own memory bounded."""
    pairs, seed = _read_jobs(state)
    jobs = [(Path(s), Path(r)) for s, r in zip(pairs[::2], pairs[1::2], strict=True)]
    problem = set_oom_score(os.getpid(), GRADER_OOM_SCORE)
    if problem:
        print(f"note: the grader's OOM score is left as it is: {problem}", flush=True)

    def over(held: int) -> None:
        print(
            f"error: the grader holds {held / 2**20:.0f} MB, over its bound of "
            f"{GRADER_MEMORY / 2**20:.0f} MB: this submission is abandoned",
            flush=True,
        )
        os._exit(EXIT_OVER_MEMORY)

    bound_own_memory(int(os.environ.get("M2L_GRADER_MEMORY_MB", 0)) << 20 or GRADER_MEMORY, over)
    try:
        grade(jobs, seed=seed, progress=progress)
    except (GraderBroken, WorkerUnavailable) as err:
        print(f"error: {safe_text(err)}", file=sys.stderr)
        return 1
    except NoPlaceLeft:
        return 3
    return 0


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
    parser.add_argument(CHILD_FLAG, nargs=2, help=argparse.SUPPRESS)
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
    if args.grader_state:
        return _graded_child(args.grader_state[0], int(args.grader_state[1]))
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
            users = _student_users()
            user = users[0] if users else None
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
    except WorkerUnavailable as err:
        print(f"error: {safe_text(err)}", file=sys.stderr)
        return 1
    return supervise(jobs, seed)


if __name__ == "__main__":
    sys.exit(main())
