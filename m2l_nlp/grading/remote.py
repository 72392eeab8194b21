"""The grader's side of the process that runs a student's code (:mod:`~m2l_nlp.grading.worker`).

:class:`Worker` starts that process (as an unprivileged user when the grader is root, in its
own session so that everything it starts can be killed), sends requests and waits for each
reply until a deadline. :class:`RemoteNamespace` makes it look like the student's module to
the checks: ``ns.scaled_dot_product(q, k, v)`` and ``run_haiku(build, ns, ...)`` run there,
and only plain data comes back.
"""

from __future__ import annotations

import functools
import os
import pwd
import select
import signal
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import IO, Any

import numpy as np

from m2l_nlp.devices import checking_xla_flags
from m2l_nlp.grading import wire
from m2l_nlp.grading.registry import CheckFailure
from m2l_nlp.grading.runner import StudentError
from m2l_nlp.grading.tools import BuildSpec, Elsewhere, ElsewhereFunction

USER_ENV = "M2L_GRADER_USER"  # who runs student code when the grader is root
DEFAULT_USER = "nobody"


class WorkerStopped(Exception):
    """The student's code did not answer before the deadline; its process was killed."""


class WorkerUnavailable(Exception):
    """The worker process cannot be started (e.g. the unprivileged user cannot run Python)."""


class WorkerLost(Exception):
    """The process running the student's code ended (``sys.exit``, a crash, killed...)."""


def unprivileged_user() -> tuple[int, int] | None:
    """``(uid, gid)`` to run student code as, or None when the grader is not root."""
    if os.geteuid() != 0:
        return None
    entry = pwd.getpwnam(os.environ.get(USER_ENV) or DEFAULT_USER)
    if entry.pw_uid == 0:  # M2L_GRADER_USER=root: no separate user (local trials only)
        return None
    return entry.pw_uid, entry.pw_gid


_READABLE = (
    "install Python and the course where every user can read them (the autograder's setup.sh "
    f"does), or set {USER_ENV}=root to run student code as yourself (local trials only)"
)


def check_workers_start(cwd: Path, user: tuple[int, int] | None, limit: float) -> None:
    """Start one worker as ``user`` and wait for its first answer (at most ``limit`` s):
    raise :class:`WorkerUnavailable` now, not after minutes of the reference's checks, if
    student code cannot run as that user."""
    worker = Worker(cwd, user)
    worker.limit, worker.deadline = limit, time.monotonic() + limit
    try:
        worker.request({"op": "source", "name": "-"})  # no module loaded: answers None
    except (WorkerLost, WorkerStopped) as err:
        who = f"user {user[0]}" if user else "this user"
        raise WorkerUnavailable(
            f"{who} cannot start the process that runs student code ({err}): {_READABLE}"
        ) from None
    finally:
        worker.kill()


class Worker:
    """One process that runs student (or reference) code; see the module docstring.

    Args:
        cwd: its working directory (the only folder it needs to read, besides Python's).
        user: ``(uid, gid)`` to run as, or None for the grader's own user.
        env: extra environment variables (the rest is a small fixed set).
        log: where its stdout and stderr go (never into the results).
    """

    def __init__(
        self,
        cwd: Path,
        user: tuple[int, int] | None,
        env: dict[str, str] | None = None,
        log: IO[bytes] | int = subprocess.DEVNULL,
    ):
        to_worker_r, self._to_worker = os.pipe()
        self._from_worker, from_worker_w = os.pipe()
        environ = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(cwd),
            "LANG": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "JAX_PLATFORMS": os.environ.get("JAX_PLATFORMS", "cpu"),
            # the reference and the student compile alike, as quickly as the graded tests do
            "XLA_FLAGS": checking_xla_flags(os.environ.get("XLA_FLAGS", "")),
            **(env or {}),
        }
        extra: dict[str, Any] = {}
        if user is not None:
            extra = {"user": user[0], "group": user[1], "extra_groups": []}
        try:
            self.process = self._spawn(extra, to_worker_r, from_worker_w, log, cwd, environ)
        finally:
            os.close(to_worker_r)
            os.close(from_worker_w)
        self.deadline: float | None = None
        self.limit = 0.0
        self.busy = 0.0  # seconds spent waiting for replies

    @staticmethod
    def _spawn(extra, to_worker_r, from_worker_w, log, cwd, environ) -> subprocess.Popen:
        try:
            return subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "m2l_nlp.grading.worker",
                    str(to_worker_r),
                    str(from_worker_w),
                ],
                pass_fds=(to_worker_r, from_worker_w),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=cwd,
                env=environ,
                start_new_session=True,
                **extra,
            )
        except PermissionError as err:
            who = f"user {extra['user']}" if extra else "this user"
            raise WorkerUnavailable(
                f"{who} may not run {sys.executable} ({err.strerror}): {_READABLE}"
            ) from None

    def _wait(self) -> None:
        timeout = None if self.deadline is None else max(0.0, self.deadline - time.monotonic())
        ready, _, _ = select.select([self._from_worker], [], [], timeout)
        if not ready:
            self.kill()
            raise WorkerStopped(f"stopped after {self.limit:g} s")

    def request(self, message: dict[str, Any]) -> Any:
        """Send ``message``; return the reply's value, or raise what it describes."""
        start = time.monotonic()
        try:
            wire.send(self._to_worker, message)
            reply = wire.receive(self._from_worker, self._wait)
        except (EOFError, BrokenPipeError):
            code = self.process.wait()
            raise WorkerLost(f"exit status {code}") from None
        except wire.WireError as err:
            self.kill()
            raise WorkerLost(f"it sent a malformed reply ({err})") from None
        finally:
            self.busy += time.monotonic() - start
        if not isinstance(reply, dict) or not ({"ok", "error"} & set(reply)):
            self.kill()
            raise WorkerLost("it sent a malformed reply")
        if "error" in reply:
            raise _exception(reply["error"])
        return reply["ok"]

    def kill(self) -> None:
        """Kill the process and everything it started in its session."""
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.process.wait()
        for fd in (self._to_worker, self._from_worker):
            try:
                os.close(fd)
            except OSError:
                pass


def _exception(error: Any) -> BaseException:
    """The exception a reply describes, rebuilt from plain data (never unpickled)."""
    if not isinstance(error, dict):
        return StudentError("Error", str(error)[:300], [])
    kind = str(error.get("type", "Error"))
    message = str(error.get("message", ""))
    if kind == "NotImplementedError":
        return NotImplementedError(message)
    if kind in ("CheckFailure", "ImportFailed"):  # a missing name, or the file's import
        return CheckFailure(message)
    frames = []
    for frame in error.get("frames") or []:
        try:
            filename, lineno, name, line = frame
            frames.append(
                traceback.FrameSummary(str(filename), int(lineno), str(name), line=str(line))
            )
        except (TypeError, ValueError):
            continue
    bases = error.get("builtins") or []
    builtin = next((_REBUILT[b] for b in bases if isinstance(b, str) and b in _REBUILT), None)
    if builtin is None:
        return StudentError(kind, message, frames)
    return _student_error_class(builtin)(kind, message, frames)


# Built-in exceptions a check may catch (a ValueError for bad input, ...), rebuilt as such.
_REBUILT = {
    cls.__name__: cls
    for cls in (
        ValueError,
        TypeError,
        IndexError,
        KeyError,
        AssertionError,
        RuntimeError,
        AttributeError,
        ZeroDivisionError,
        ArithmeticError,
        LookupError,
        RecursionError,
    )
}


@functools.cache
def _student_error_class(builtin: type[Exception]) -> type[StudentError]:
    """A :class:`StudentError` that is also a ``builtin`` (``except ValueError`` sees it)."""
    return type(f"Student{builtin.__name__}", (StudentError, builtin), {})


class RemoteFunction(ElsewhereFunction):
    """A student's function called in the worker; arguments and result are plain data."""

    def __init__(self, worker: Worker, name: str, jit: list[int] | None = None):
        self.worker, self.name, self.jit = worker, name, jit

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.worker.request(
            {"op": "call", "name": self.name, "args": list(args), "kwargs": kwargs, "jit": self.jit}
        )

    def jitted(self, static_argnums: tuple[int, ...] = ()) -> RemoteFunction:
        return RemoteFunction(self.worker, self.name, jit=list(static_argnums))


class RemoteNamespace(Elsewhere):
    """The student's module as the checks see it, running in ``worker``."""

    def __init__(self, worker: Worker):
        self.worker = worker

    def __getattr__(self, name: str) -> RemoteFunction:
        if name.startswith("_"):
            raise AttributeError(name)
        return RemoteFunction(self.worker, name)

    def source(self, name: str) -> str | None:
        return self.worker.request({"op": "source", "name": name})

    def run_haiku(
        self, build: BuildSpec, params: Any, args: tuple, key: Any = None, jit: bool = False
    ) -> Any:
        return self.worker.request(
            {
                "op": "haiku",
                "build": build.plain(),
                "params": params,
                "args": list(args),
                "key": None if key is None else np.asarray(key),
                "jit": jit,
            }
        )
