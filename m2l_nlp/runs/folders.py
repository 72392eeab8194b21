"""Run folders: one unit each, never mixed, never deleting what we did not write.

``m2l-nlp train --out DIR`` works beside ``DIR``, in hidden siblings of its own:

- ``.DIR.lock``: held for the whole run, so a second run on ``DIR`` refuses at once, and
  removed with the run's end, Ctrl-C and SIGTERM included (a run killed outright leaves
  its lock, which the next one takes over);
- ``.DIR.partial/``: the last completed epoch (training state, history), written atomically
  after every epoch, read by ``--resume``, removed once the run is complete;
- ``.DIR.new-<id>/``: the finished run (checkpoint, ``metrics.json``, plots, and last of all
  ``run.json``, the marker that says a folder is one of our runs), then swapped in. On Linux
  the two folders trade names in one atomic step (``renameat2`` with ``RENAME_EXCHANGE``), so
  a reader sees the old run or the new one, never neither. Elsewhere it takes two renames,
  ``DIR -> .DIR.old`` and ``.DIR.new-<id> -> DIR``; if the process dies between them, the next
  start on ``DIR`` finishes the swap (or puts the old run back if the new one was not complete).

Every folder made here (``.DIR.partial/``, ``.DIR.new-<id>/``, and so the run itself) holds
the empty file ``.m2l-nlp-made`` from the instant it is created, before anything else goes in:
a folder is ours by that marker, never by its name, and a sibling with one of our names but
without the marker is the user's: it is left alone and the run is refused, naming it. A run
being replaced gets the marker before it is moved aside, so a kill mid-swap leaves it ours.

A non-empty ``DIR`` that is not one of our runs is refused. ``run.json`` lists the files the
run wrote; a run that holds any other file (``notes.txt``) is not replaced, and the refusal
names the file. Runs written before ``run.json`` existed are recognised by their files
(``checkpoint/``, ``metrics.json`` and the plots), and may hold only the files such a run
held.
``M2L_NLP_CRASH_AT=<point>`` kills the process at a named point (fault-injection tests).
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import math
import os
import shutil
import signal
import stat
import sys
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from m2l_nlp.fileio import atomic_file, write_json_atomic
from m2l_nlp.train.metrics import EvalResult
from m2l_nlp.train.progress import BestEpoch, Progress

MARKER = "run.json"
MADE = ".m2l-nlp-made"  # in every folder this module makes, from its first instant
PROGRESS = "progress.json"
CRASH_ENV = "M2L_NLP_CRASH_AT"
NO_EXCHANGE_ENV = "M2L_NLP_NO_EXCHANGE"  # tests: take the two-rename path


class RunFolderError(RuntimeError):
    """A run folder cannot be used as asked; the message says what to do."""


def _exchange(a: Path, b: Path) -> bool:
    """Swap the names of two folders atomically (Linux ``renameat2``); False where the
    system or the file system cannot, and nothing was changed."""
    if sys.platform != "linux" or os.environ.get(NO_EXCHANGE_ENV):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    done = renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange)
    return done == 0


def crash_point(name: str) -> None:
    """Die here, as a power cut would, if ``$M2L_NLP_CRASH_AT`` names this point."""
    if os.environ.get(CRASH_ENV) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def default_out(name: str, no_test: bool) -> Path:
    """``runs/<name>``, or ``runs/<name>-val`` for a ``--no-test`` run, so that trying a
    recipe never overwrites the metrics and checkpoint of a run that reported test accuracy."""
    return Path("runs") / (f"{name}-val" if no_test else name)


def unwritable(folder: Path, option: str) -> str | None:
    """Why files could not be written in ``folder``, or None if they could (nothing is
    created: the nearest folder that exists is checked, where the rest would be made)."""
    existing = folder.absolute()
    try:
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
    except OSError as error:  # e.g. a parent we may not look into
        return (
            f"cannot use {folder} ({error.strerror or error}): choose another folder with {option}"
        )
    if not existing.is_dir():
        return f"{existing} is a file, not a folder: choose another folder with {option}"
    if not os.access(existing, os.W_OK | os.X_OK):
        return (
            f"cannot write in {existing} (permission denied): choose another folder with {option}"
        )
    return None


def describe(folder: Path) -> str:
    """``"missing"``, ``"empty"``, ``"run"`` (ours: its ``run.json`` says so) or
    ``"foreign"`` (anything else: the user's files)."""
    if not folder.exists():
        return "missing"
    if not folder.is_dir():
        return "foreign"
    names = {p.name for p in folder.iterdir()}
    if not names:
        return "empty"
    if MARKER in names:
        with contextlib.suppress(OSError, ValueError):
            if json.loads((folder / MARKER).read_text()).get("m2l_nlp_run"):
                return "run"
        return "foreign"
    return "foreign"


def _make_folder(path: Path) -> None:
    """Create the folder ``path`` with the marker :data:`MADE` in it, before anything else."""
    path.mkdir(parents=True)
    _mark(path)


def _mark(path: Path) -> None:
    """Put the empty marker :data:`MADE` into the folder ``path``: the name appears whole at
    once, so a kill leaves the folder marked or not, never half."""
    with contextlib.suppress(FileExistsError):
        os.close(os.open(path / MADE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))


def made_here(path: Path) -> bool:
    """Whether ``path`` is a folder this module made (it holds the marker :data:`MADE`)."""
    return path.is_dir() and not path.is_symlink() and (path / MADE).is_file()


def _empty_folder(path: Path) -> bool:
    return path.is_dir() and not path.is_symlink() and not any(path.iterdir())


def files_in(folder: Path) -> set[str]:
    """Every file under ``folder`` (links included, not followed), as relative POSIX paths."""
    found = set()
    for root, dirs, files in os.walk(folder):
        base = Path(root).relative_to(folder)
        links = [d for d in dirs if os.path.islink(os.path.join(root, d))]
        found |= {(base / name).as_posix() for name in (*files, *links)}
    return found


def _recorded_files(folder: Path) -> set[str]:
    """The files ``run.json`` says the run wrote (itself only, where it lists none)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        files = json.loads((folder / MARKER).read_text()).get("files")
        if isinstance(files, list):
            return {str(f) for f in files}
    return {MARKER}


def foreign_files(folder: Path) -> list[str]:
    """The files in the run ``folder`` that its run did not write, sorted."""
    recorded = _recorded_files(folder)
    return sorted(f for f in files_in(folder) if f != MADE and f not in recorded)


def _shown_list(paths: list[str], most: int = 5) -> str:
    shown = ", ".join(paths[:most])
    return shown + (f" and {len(paths) - most} more" if paths[most:] else "")


def _remove(path: Path) -> None:
    """Delete a folder of ours, read-only parts included."""

    def writable_then_retry(function, target, _error):
        os.chmod(os.path.dirname(target), stat.S_IRWXU)
        with contextlib.suppress(FileNotFoundError):
            os.chmod(target, stat.S_IRWXU)
        function(target)

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, onerror=writable_then_retry)
    else:
        path.unlink(missing_ok=True)


class RunFolder:
    """The folder ``out`` of one run and its hidden siblings (see the module docstring).

    Open it with :func:`open_run`; then :meth:`save_progress` after each epoch,
    :meth:`load_progress` to resume, and :meth:`commit` to write and swap in the run.
    """

    def __init__(self, out: str | os.PathLike):
        self.shown = Path(out)  # as the user wrote it, for messages
        self.out = self.shown.absolute()
        hidden = self.out.parent / f".{self.out.name}"
        self.lock = Path(f"{hidden}.lock")
        self.partial = Path(f"{hidden}.partial")
        self.old = Path(f"{hidden}.old")
        self.new_prefix = f".{self.out.name}.new-"
        self.run_id = uuid.uuid4().hex[:12]

    def _siblings(self) -> list[Path]:
        """The hidden folders beside ``out`` named as ours (made here or not)."""
        news = sorted(self.out.parent.glob(self.new_prefix + "*"))
        return [p for p in (*news, self.old, self.partial) if p.exists() or p.is_symlink()]

    def strangers(self) -> list[Path]:
        """Siblings named as ours that this module did not make: the user's, never touched
        (an empty folder, as a kill between ``mkdir`` and the marker leaves, is not one)."""
        return [p for p in self._siblings() if not made_here(p) and not _empty_folder(p)]

    # --- start: repair, clean, check -------------------------------------------------------

    def repair(self) -> None:
        """Finish (or undo) a swap that a killed process left half done; remove our
        temporary folders that nothing can use any more (those with the marker :data:`MADE`
        only; an empty one, as a kill between ``mkdir`` and the marker leaves, goes too)."""
        for path in self._siblings():
            if not made_here(path) and _empty_folder(path):
                path.rmdir()  # nothing of the user's is lost
        news = [d for d in self.out.parent.glob(self.new_prefix + "*") if made_here(d)]
        complete = sorted(d for d in news if (d / MARKER).is_file())
        old = self.old if made_here(self.old) else None
        if old is not None and not self.out.exists():
            os.replace(complete[-1] if complete else old, self.out)
        for leftover in (*news, old):
            if leftover is not None and made_here(leftover):
                _remove(leftover)
        progress = self.read_progress() if made_here(self.partial) else None
        if progress is not None and describe(self.out) == "run":
            marker = json.loads((self.out / MARKER).read_text()) if self._marked() else {}
            if marker.get("run_id") == progress.get("run_id"):  # that run got swapped in
                _remove(self.partial)

    def _marked(self) -> bool:
        return (self.out / MARKER).is_file()

    def refuse_foreign(self) -> None:
        """Refuse a file, or a folder of files that are not an m2l-nlp run (reads only)."""
        if self.out.exists() and not self.out.is_dir():
            raise RunFolderError(
                f"--out {self.shown} is a file, not a folder: choose another folder with --out"
            )
        if describe(self.out) == "foreign":
            raise RunFolderError(
                f"--out {self.shown} holds files that are not an m2l-nlp run: choose a new or "
                "empty folder (nothing in it was touched)"
            )

    def refuse_strangers(self) -> None:
        """Refuse (reads only) while a folder beside ``out`` has one of our names but not
        our marker: it is the user's, and we would need its name."""
        strangers = self.strangers()
        if strangers:
            names = _shown_list([f"{p.name}/" if p.is_dir() else p.name for p in strangers])
            raise RunFolderError(
                f"--out {self.shown}: {names} beside it was not made by m2l-nlp (or by a "
                f"version before {MADE} markers), but has a name this run needs: move or "
                "delete it yourself, or choose another --out (nothing was touched)"
            )

    def refuse_foreign_files(self, then: str) -> None:
        """Refuse (reads only) to replace a run that holds files it did not write."""
        extra = foreign_files(self.out) if describe(self.out) == "run" else []
        if extra:
            raise RunFolderError(
                f"--out {self.shown} holds files that are not part of its run "
                f"({_shown_list(extra)}): move them out of the folder, then {then}"
            )

    def check(self, overwrite: bool, resume: bool) -> None:
        """Refuse, with what to do, a folder this run must not write to."""
        self.refuse_foreign()
        self.refuse_strangers()
        self.refuse_foreign_files("run again (nothing was touched)")
        kind = describe(self.out)
        shown = self.shown
        progress = self.read_progress()
        if resume:
            if progress is None:
                raise RunFolderError(
                    f"nothing to resume for --out {shown} (no interrupted run): drop --resume"
                )
            return
        if progress is not None and not overwrite:
            raise RunFolderError(
                f"--out {shown} has an interrupted run (epoch {progress['epoch']} of "
                f"{progress['epochs']} done): add --resume to continue it, or --overwrite to "
                "start again"
            )
        if kind == "run" and not overwrite:
            raise RunFolderError(
                f"--out {shown} already holds a run: add --overwrite to replace it (at the end "
                "of the new run), or choose another --out"
            )
        if progress is not None:
            _remove(self.partial)

    # --- after every epoch -----------------------------------------------------------------

    def read_progress(self) -> dict[str, Any] | None:
        """The interrupted run's ``progress.json``, or None."""
        path = self.partial / PROGRESS
        if not path.is_file():
            return None
        try:
            return json.loads(path.read_text())
        except (OSError, ValueError):
            return None

    def save_progress(self, info: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
        """Keep a completed epoch: ``arrays`` in ``epoch-<k>.npz``, then ``progress.json``
        (``info`` plus the run's id), each written atomically; older epochs are removed."""
        epoch = int(info["epoch"])
        name = f"epoch-{epoch}.npz"
        if not self.partial.is_dir():
            _make_folder(self.partial)
        with atomic_file(self.partial / name) as handle:
            np.savez(handle, **arrays)
        write_json_atomic(self.partial / PROGRESS, dict(info, run_id=self.run_id, arrays=name))
        for stale in self.partial.glob("epoch-*.npz"):
            if stale.name != name:
                stale.unlink(missing_ok=True)
        crash_point(f"epoch-{epoch}-saved")

    def load_progress(self, fingerprint: dict[str, Any]) -> tuple[dict, dict[str, np.ndarray]]:
        """The saved progress and arrays, if they were made with the same ``fingerprint``
        (the settings of the run); else :class:`RunFolderError` naming what changed."""
        progress = self.read_progress()
        if progress is None:
            raise RunFolderError(f"no interrupted run to resume beside {self.out}")
        saved = progress.get("fingerprint", {})
        changed = sorted(k for k in {*saved, *fingerprint} if saved.get(k) != fingerprint.get(k))
        if changed:
            raise RunFolderError(
                f"--resume needs the settings of the interrupted run; these differ: "
                f"{', '.join(changed)} (run again with the same options, or --overwrite)"
            )
        self.run_id = progress["run_id"]
        with np.load(self.partial / progress["arrays"]) as arrays:
            return progress, {key: arrays[key] for key in arrays.files}

    def keep_epoch(self, done: Progress, epochs: int, fingerprint: dict[str, Any]) -> None:
        """Keep the loop's state after an epoch (``done``) as the run's progress."""
        info, arrays = progress_to_save(done)
        self.save_progress(dict(info, epochs=epochs, fingerprint=fingerprint), arrays)

    def resume_from(self, fingerprint: dict[str, Any]) -> Progress:
        """The kept progress of an interrupted run with the same ``fingerprint``."""
        return progress_from_saved(*self.load_progress(fingerprint))

    # --- at the end --------------------------------------------------------------------------

    def commit(self, write: Callable[[Path], None], marker: dict[str, Any]) -> None:
        """Write the run into a new hidden folder (``write(folder)``, then ``run.json`` with
        the list of files) and swap it in for ``out``; the partial state goes once the new
        run is in place. A file that appeared in the old run meanwhile stops the swap."""
        new = self.out.parent / f"{self.new_prefix}{self.run_id}"
        _make_folder(new)
        write(new)
        files = sorted(files_in(new) | {MARKER})
        marker = dict(marker, m2l_nlp_run=1, run_id=self.run_id, files=files)
        write_json_atomic(new / MARKER, marker)
        crash_point("run-written")
        try:  # the user may have put a file into the old run while this one trained
            self.refuse_foreign_files("run the same command with --resume to write this run")
        except RunFolderError:
            _remove(new)
            raise
        if self.out.exists():
            with contextlib.suppress(OSError):  # unmarked, a stranded old run is only refused
                _mark(self.out)  # the old run is ours wherever a kill leaves it
        if self.out.exists() and _exchange(new, self.out):
            crash_point("new-moved-in")
            _remove(new)  # the old run, under the new one's temporary name
        else:
            if self.out.exists():
                os.replace(self.out, self.old)
                crash_point("old-moved-aside")
            os.replace(new, self.out)
            crash_point("new-moved-in")
        if made_here(self.old):
            _remove(self.old)
        if made_here(self.partial):
            _remove(self.partial)


def _cannot_create(lock: Path, error: OSError) -> str:
    return (
        f"cannot create files in {lock.parent} ({error.strerror or error}): choose another "
        "folder with --out"
    )


def _busy(out: str | os.PathLike) -> str:
    return (
        f"another run is writing to {out} right now: wait for it to finish, or choose another --out"
    )


def _lock_problem(lock: Path, out: str | os.PathLike) -> str:
    """Why ``filelock`` could not take the lock of the run folder ``out`` (it only times
    out): a probe tells a folder that takes no file from a lock that another run holds."""
    try:
        os.close(os.open(lock, os.O_WRONLY | os.O_CREAT, 0o644))
    except OSError as error:  # e.g. a read-only file system, where even root cannot write
        return _cannot_create(lock, error)
    return _busy(out)


@contextlib.contextmanager
def open_run(
    out: str | os.PathLike, *, overwrite: bool = False, resume: bool = False
) -> Iterator[RunFolder]:
    """Lock the run folder ``out`` for this process, repair what an interrupted run left,
    and check that this run may write there (:class:`RunFolderError` says why not)."""
    folder = RunFolder(out)
    folder.refuse_foreign()  # before the lock file is made beside it
    folder.refuse_strangers()
    folder.out.parent.mkdir(parents=True, exist_ok=True)
    with _terminate_as_interrupt(), _locked(folder.lock, out):
        folder.repair()
        folder.check(overwrite, resume)
        yield folder


@contextlib.contextmanager
def _terminate_as_interrupt() -> Iterator[None]:
    """SIGTERM (``timeout``, ``kill``, a batch scheduler) taken as Ctrl-C while a run holds
    its folder: the same clean-up runs (the lock removed, the last epoch kept), where it
    would otherwise end the process on the spot. A handler someone else set is kept."""
    if threading.current_thread() is not threading.main_thread():  # signals go to main
        yield
        return
    previous = signal.getsignal(signal.SIGTERM)
    if previous is not signal.SIG_DFL:
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@contextlib.contextmanager
def _locked(lock: Path, out: str | os.PathLike) -> Iterator[None]:
    """Hold the lock file ``lock`` (never waiting) and remove it with the run's end, so that
    locks do not pile up beside the runs. Where ``flock`` exists, the file is removed while
    still held, and a lock taken on a file that a finishing run had just removed is let go
    and taken again on the new one; elsewhere ``filelock`` keeps its file."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - Windows
        from filelock import FileLock, Timeout

        held = FileLock(str(lock), timeout=0)
        try:
            held.acquire()
        except (Timeout, OSError):
            raise RunFolderError(_lock_problem(lock, out)) from None
        try:
            yield
        finally:
            held.release()
        return
    for _ in range(10):
        try:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as error:  # e.g. a read-only file system, where even root cannot write
            raise RunFolderError(_cannot_create(lock, error)) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # another run holds it; no probe: the file may be gone by now, and
            os.close(fd)  # a probe would make a new one that nobody removes
            raise RunFolderError(_busy(out)) from None
        if _names(lock, fd):
            break
        os.close(fd)  # the file was removed by the run that held it: lock the new one
    else:  # pragma: no cover - ten runs ending in a row
        raise RunFolderError(_busy(out))
    try:
        yield
    finally:
        if _names(lock, fd):  # not when someone removed ours and another run locked a new one
            with contextlib.suppress(OSError):
                os.unlink(lock)
        os.close(fd)


def _names(path: Path, fd: int) -> bool:
    """Whether ``path`` is still the file open as ``fd`` (not removed, not replaced)."""
    try:
        named, held = os.stat(path), os.fstat(fd)
    except FileNotFoundError:
        return False
    return (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino)


def _result_to_json(result: Any) -> dict[str, Any] | None:
    if result is None:
        return None
    confusion = None if result.confusion is None else np.asarray(result.confusion).tolist()
    return dict(accuracy=result.accuracy, loss=result.loss, confusion=confusion, count=result.count)


def _result_from_json(saved: dict[str, Any] | None) -> EvalResult | None:
    if saved is None:
        return None
    confusion = None if saved["confusion"] is None else np.asarray(saved["confusion"])
    loss = math.nan if saved["loss"] is None else saved["loss"]
    return EvalResult(saved["accuracy"], loss, confusion, saved["count"])


def fingerprint(**settings: Any) -> dict[str, Any]:
    """The settings a resumed run must share with the interrupted one, as JSON reads them
    back (tuples become lists)."""
    return json.loads(json.dumps(settings))


def progress_to_save(progress: Progress) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """A :class:`Progress` as JSON-able ``info`` and named arrays."""
    arrays = {f"state_{i}": x for i, x in enumerate(progress.state)}
    best = None
    if progress.best is not None:
        score, epoch, leaves, result = progress.best  # a BestEpoch
        arrays.update({f"best_{i}": x for i, x in enumerate(leaves)})
        best = dict(score=list(score), epoch=epoch, count=len(leaves))
        best["result"] = _result_to_json(result)
    info = dict(
        epoch=progress.epoch,
        history=progress.history,
        best=best,
        result=_result_to_json(progress.result),
        state_count=len(progress.state),
    )
    return info, arrays


def progress_from_saved(info: dict[str, Any], arrays: dict[str, np.ndarray]) -> Progress:
    """The :class:`Progress` that :func:`progress_to_save` saved."""
    state = [arrays[f"state_{i}"] for i in range(info["state_count"])]
    best = info["best"]
    if best is not None:
        leaves = [arrays[f"best_{i}"] for i in range(best["count"])]
        score = tuple(_nan_for_null(best["score"]))
        best = BestEpoch(score, best["epoch"], leaves, _result_from_json(best["result"]))
    history = {name: _nan_for_null(values) for name, values in info["history"].items()}
    return Progress(info["epoch"], state, history, best, _result_from_json(info["result"]))


def _nan_for_null(values: list[float | None]) -> list[float]:
    """Numbers as saved in JSON, ``null`` (a value that was not finite) back to NaN."""
    return [math.nan if v is None else v for v in values]
