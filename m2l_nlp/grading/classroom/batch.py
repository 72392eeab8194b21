"""A whole class graded by the trusted grader: ``m2l-nlp class grade EXPORT``.

The export (Gradescope's Export Submissions, its zip or folder, or a plain folder of student
folders) is copied, or unpacked with no link, no path out of it and bounded sizes, into a
folder only root can open; the trusted grader grades every submission in one batch (one
reference pass, the sandbox per phase), and each results file is recorded in the gradebook as
it appears. A run killed midway resumes: the same command records what was written and grades
the rest, with the run's seed. ``--regrade`` grades every submission again with the last
run's seed and lists who gains and who loses points, per exercise.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import stat
import subprocess
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from m2l_nlp.grading.classroom.exports import ZIP_ERRORS, ExportError, Submission, parse_metadata
from m2l_nlp.grading.classroom.gradebook import Gradebook
from m2l_nlp.impl import repo_root

MAX_MEMBERS = 100_000
MAX_FILE_BYTES = 256 << 20
MAX_TOTAL_BYTES = 8 << 30
METADATA = "submission_metadata.yml"


class NotIsolated(RuntimeError):
    """Student code would run unisolated, and ``--local`` was not given."""


class GraderFailed(RuntimeError):
    """The grader stopped before writing any results (its last line says why)."""


def unpack(archive: Path, into: Path) -> Path:
    """Unpack the zip ``archive`` into the new folder ``into``: plain files and folders only,
    no path that leaves it, at most :data:`MAX_MEMBERS` members and :data:`MAX_TOTAL_BYTES`
    (each file :data:`MAX_FILE_BYTES`), counted as read, not as the zip declares."""
    into.parent.mkdir(parents=True, exist_ok=True)
    into.mkdir(mode=0o700)
    total = 0
    try:
        with zipfile.ZipFile(archive) as zf:
            members = zf.infolist()
            if len(members) > MAX_MEMBERS:
                raise ExportError(f"{archive} holds over {MAX_MEMBERS} files: is it an export?")
            for info in members:
                name = PurePosixPath(info.filename)
                if name.is_absolute() or ".." in name.parts or "\\" in info.filename:
                    raise ExportError(f"{archive}: {info.filename!r} leaves the export: refused")
                kind = stat.S_IFMT(info.external_attr >> 16)
                if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                    continue  # a link or a device: nothing a submission needs
                target = into.joinpath(*name.parts)
                if info.is_dir():
                    target.mkdir(parents=True, exist_ok=True)
                    continue
                target.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as src, open(target, "xb") as dst:
                    while chunk := src.read(1 << 20):
                        total += len(chunk)
                        if dst.tell() + len(chunk) > MAX_FILE_BYTES or total > MAX_TOTAL_BYTES:
                            raise ExportError(f"{archive}: {info.filename!r} is too large")
                        dst.write(chunk)
    except ZIP_ERRORS as err:
        raise ExportError(f"{archive} cannot be unpacked ({err}): download it again") from err
    return into


def class_folder(export: Path, work: Path) -> Path:
    """The folder that holds the export's submissions (a zip is unpacked into ``work``)."""
    if not export.exists():
        raise ExportError(f"{export} does not exist: give the export (zip or folder)")
    if export.is_file():
        if (work / "export").exists():  # unpacked by a run that was stopped: afresh
            shutil.rmtree(work / "export")
        folder = unpack(export, work / "export")
    else:
        folder = export
    tops = [p for p in folder.iterdir() if p.is_dir() and not p.is_symlink()]
    if not (folder / METADATA).exists() and len(tops) == 1 and (tops[0] / METADATA).exists():
        return tops[0]  # Gradescope zips the export under one folder
    return folder


def submissions_in(folder: Path) -> list[Submission]:
    """The export's metadata, else one submission per sub-folder (named by it)."""
    metadata = folder / METADATA
    if metadata.is_file() and not metadata.is_symlink():
        return parse_metadata(metadata.read_bytes(), str(metadata))
    found = [
        Submission(p.name, (), "")
        for p in sorted(folder.iterdir())
        if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
    ]
    if not found:
        raise ExportError(f"{folder} holds no submission folders and no {METADATA}")
    return found


def check_isolation(local: bool) -> None:
    """Raise :class:`NotIsolated` (or ``LookupError``) where the grader could not isolate
    student code, unless ``local``."""
    from m2l_nlp.grading.trusted.isolation import student_users

    if local:
        return
    if os.geteuid() != 0:
        raise NotIsolated(
            "grading would not be isolated: student code would run as you. Run as root (a "
            "sandbox per phase), or give --local to grade without isolation"
        )
    student_users()  # LookupError, in words, where no user can run student code


def grading_version(root: Path | None = None) -> tuple[str | None, str]:
    """``(course commit, bundle hash)`` of what grades: the commit of the course's checkout
    (``+changes`` where tracked files differ from it; None outside a git checkout), and the
    SHA-256 of every Python file of the library that grades (this ``m2l_nlp``) and of the
    reference (``solutions/``), which a bundle unpacked from a zip has as well."""
    root = repo_root() if root is None else root
    digest = hashlib.sha256()
    package = Path(__file__).resolve().parents[2]
    files = [(f"m2l_nlp/{p.relative_to(package)}", p) for p in package.rglob("*.py")]
    files += [(f"solutions/{p.name}", p) for p in (root / "solutions").glob("*.py")]
    for name, path in sorted(files):
        digest.update(f"{name}\0{path.stat().st_size}\0".encode())
        digest.update(path.read_bytes())
    return _commit(root), digest.hexdigest()


def _commit(root: Path) -> str | None:
    if not (root / ".git").exists():
        return None
    try:
        head, changes = (
            subprocess.run(
                ["git", "-C", str(root), *command],
                capture_output=True,
                text=True,
                timeout=30,
                check=True,
            ).stdout.strip()
            for command in (["rev-parse", "HEAD"], ["status", "--porcelain", "-uno"])
        )
    except (OSError, subprocess.SubprocessError):  # no git here, or not a repository
        return None
    return head + ("+changes" if changes else "")


def default_jobs() -> int:
    """Graders side by side by default: one per 2 cores (the checks' and the student's
    processes) and per 4 GB of memory (docs/grading.md's budget for one grading)."""
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):  # not on this system: the cores decide
        memory = 1 << 62
    return max(1, min((os.cpu_count() or 1) // 2, memory // (4 << 30)))


def jobs_allowed(jobs: int, asked: bool, local: bool, work: Path) -> int:
    """How many graders may run side by side: more than one only in bubblewrap's sandboxes
    (with a user per phase they would share /tmp and the users). ``asked``: the instructor
    chose ``jobs``, which is then refused in words where it cannot be had."""
    if jobs <= 1:
        return 1
    why = "--local grades without sandboxes" if local else None
    if why is None:
        from m2l_nlp.grading.trusted.isolation import Isolation, student_users

        users = student_users()
        why = "no user to run student code" if not users else Isolation.probe(users[0], work)
    if why is None:
        return jobs
    if asked:
        raise NotIsolated(
            f"--jobs {jobs} needs bubblewrap's sandboxes ({why}): graders side by side "
            "would share /tmp and the student's users; give --jobs 1"
        )
    return 1


@dataclass
class ClassRun:
    run: int
    seed: int
    todo: list[Submission]
    resumed: bool


def plan(book: Gradebook, submissions: list[Submission], regrade: bool) -> ClassRun:
    """The run to grade in, its seed and what it grades: an unfinished run resumes, the
    others' submissions are not graded twice unless ``regrade`` (with the last seed)."""
    last = book.last_run("grade")
    commit, bundle = grading_version()
    if regrade:
        seed = last[1] if last and last[1] else _new_seed()
        run = book.start_run("grade", seed=seed, course_commit=commit, bundle_hash=bundle)
        return ClassRun(run, seed, submissions, False)
    done = book.graded("grade")
    todo = [s for s in submissions if s.id not in done]
    if last and not last[2] and last[1]:
        if book.run_version(last[0])[1] in (None, bundle):
            return ClassRun(last[0], last[1], todo, True)
        book.finish_run(last[0])  # graded by other code: a run holds one version's results
    seed = _new_seed()
    run = book.start_run("grade", seed=seed, course_commit=commit, bundle_hash=bundle)
    return ClassRun(run, seed, todo, False)


def _new_seed() -> int:
    return secrets.randbelow(2**62) + 1


def grade_class(
    export: Path,
    book: Gradebook,
    work: Path,
    regrade: bool = False,
    local: bool = False,
    say: Callable[[str], None] = print,
    jobs: int | None = None,
) -> ClassRun:
    """Grade the export's submissions into ``book`` (``work``: a folder of this run's
    copies, results and logs), ``jobs`` graders side by side (None: :func:`default_jobs`,
    where the sandboxes allow it); returns the run."""
    check_isolation(local)
    work.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(work, 0o700)  # the grader grades only from folders no student can open
    jobs = jobs_allowed(default_jobs() if jobs is None else jobs, jobs is not None, local, work)
    folder = class_folder(export, work)
    submissions = submissions_in(folder)
    job = plan(book, submissions, regrade)
    commit, bundle = book.run_version(job.run)
    say(
        f"{'resuming' if job.resumed else 'grading'} run {job.run} (seed {job.seed}, course "
        f"{(commit or 'not a git checkout')[:12]}, bundle {(bundle or '?')[:12]}): "
        f"{len(job.todo)} of {len(submissions)} submissions to grade"
    )
    here = work / f"run-{job.run}"
    copies, results = here / "submissions", here / "results"
    for path in (here, copies, results):
        path.mkdir(mode=0o700, exist_ok=True)
    pairs: list[tuple[Submission, Path, Path]] = []
    for submission in job.todo:
        if not _plain_name(submission.id):  # its folder would be another's, or outside
            book.record(job.run, submission, None, "its id is not a folder's name")
            continue
        written = results / f"{submission.id}.json"
        source = folder / submission.id
        if written.is_file():  # graded before the run was stopped: recorded below
            pairs.append((submission, source, written))
            continue
        if not source.is_dir() or source.is_symlink():
            book.record(job.run, submission, None, "no folder in the export")
            continue
        copy = copies / submission.id
        if copy.exists():
            shutil.rmtree(copy)
        shutil.copytree(source, copy, symlinks=True)  # a link is copied as a link, never followed
        pairs.append((submission, copy, written))
    _run_grader(job, pairs, here, book, local, say, jobs)
    book.finish_run(job.run)
    return job


def _run_grader(
    job: ClassRun,
    pairs: list[tuple[Submission, Path, Path]],
    here: Path,
    book: Gradebook,
    local: bool,
    say: Callable[[str], None],
    jobs: int = 1,
) -> None:
    """Grade the pairs whose results are not yet written, in ``jobs`` graders side by side
    (each its share of the pairs, in turn; the same seed); record each results file as it
    appears, with a line of progress."""
    waiting = [(copy, written) for _, copy, written in pairs if not written.is_file()]
    shares = [waiting[i::jobs] for i in range(jobs) if waiting[i::jobs]]
    env = {**os.environ, "M2L_GRADER_USER": "root"} if local and os.geteuid() == 0 else None
    start, total = time.monotonic(), len(pairs)
    pending = {s.id: (s, written) for s, _, written in pairs}
    logs = [here / ("grader.log" if i == 0 else f"grader-{i + 1}.log") for i in range(len(shares))]
    if len(shares) > 1:
        say(f"{len(shares)} graders side by side (their logs: {here}/grader*.log)")

    first: list[float] = []  # when the first result came: the references' passes came before it

    def sweep() -> None:
        for sid, (submission, written) in list(pending.items()):
            if written.is_file():
                data = _results(written)
                book.record(job.run, submission, data, "its results file cannot be read")
                del pending[sid]
                now, done = time.monotonic(), total - len(pending)
                first[:] = first or [now]
                # the pace of the submissions after the first (whose wait held the reference's
                # passes, paid once), where there are any
                since, each = (first[0], done - 1) if done > 1 else (start, done)
                left = (now - since) / max(each, 1) * len(pending)
                say(f"graded {done}/{total}: {sid}, about {left / 60:.0f} min left")

    graders: list[subprocess.Popen] = []
    try:
        for share, log in zip(shares, logs, strict=True):
            command = grader_command(job.seed, share)
            with open(log, "ab") as out:  # the grader keeps its own copy of the file
                graders.append(
                    subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=env)
                )
        while pending:
            ended = all(grader.poll() is not None for grader in graders)
            sweep()
            if ended:
                break
            time.sleep(0.5)
    except BaseException:
        for grader in graders:
            grader.terminate()
        for grader in graders:
            grader.wait()
        raise
    failed = [log for grader, log in zip(graders, logs, strict=True) if grader.returncode]
    if pending and len(pending) == len(waiting) and len(failed) == len(graders) > 0:
        # nothing graded: the grader could not start (a Python the student's user cannot
        # run, say); the run stays open, to resume once that is mended
        said = failed[0].read_text(encoding="utf-8", errors="replace").strip().splitlines()
        last = said[-1].removeprefix("error: ") if said else "no output"
        raise GraderFailed(f"the grader stopped: {last} ({failed[0]})")
    for submission, _ in pending.values():  # the grader ended without them
        why = f"the grader wrote no results (its log: {', '.join(map(str, logs)) or '-'})"
        book.record(job.run, submission, None, why)


def grader_command(seed: int, pairs: list[tuple[Path, Path]]) -> list[str]:
    """The trusted grader's command line for ``(submission, results file)`` pairs."""
    command = [sys.executable, "-m", "m2l_nlp.grading.trusted", "--seed", str(seed)]
    return command + [str(p) for pair in pairs for p in pair]


def _plain_name(name: str) -> bool:
    """A folder's name of one part: no separator, not ``.`` or ``..``, not hidden."""
    return bool(name) and "/" not in name and "\\" not in name and not name.startswith(".")


def _results(path: Path) -> dict | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def score_changes(
    before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]
) -> dict[str, list[tuple[str, float]]]:
    """``{exercise: [(submission, points gained, negative if lost), ...]}`` between two runs'
    scores, the submissions graded in both; unchanged ones left out."""
    changes: dict[str, list[tuple[str, float]]] = {}
    for submission, scores in after.items():
        old = before.get(submission)
        if old is None:
            continue
        for exercise in dict.fromkeys([*old, *scores]):
            delta = scores.get(exercise, 0.0) - old.get(exercise, 0.0)
            if abs(delta) > 1e-9:
                changes.setdefault(exercise, []).append((submission, delta))
    return changes
