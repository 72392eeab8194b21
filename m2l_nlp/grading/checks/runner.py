"""Run the checks of an exercise on a student's objects and turn the outcome into words.

Used by both front ends: the pytest plugin (student objects from ``exercises/<practical>.py``)
and :func:`m2l_nlp.grading.check` (objects defined in a notebook).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import re
import traceback
from collections.abc import Iterator, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

import jax
import numpy as np

from m2l_nlp import devices
from m2l_nlp.authoring.stubs import make_stub
from m2l_nlp.grading.checks import expected
from m2l_nlp.grading.checks.registry import Check, CheckFailure, Exercise, named_slip, slip
from m2l_nlp.grading.checks.tools import key_for, rng_for
from m2l_nlp.impl import load_practical, repo_root

_REFERENCES: dict[str, ModuleType] = {}


class PracticalError(Exception):
    """The student's practical file could not be imported (syntax error, bad import, ...)."""


class StudentError(Exception):
    """An exception raised by the student's code in another process, as plain data: its type
    name, message and traceback frames (``(file, line, function, text)``)."""

    def __init__(self, kind: str, message: str, frames: list[traceback.FrameSummary]):
        super().__init__(message)
        self.kind = kind
        self.frames = frames


class StudentNamespace:
    """Attribute access to the student's objects, with a clear message for a missing name."""

    def __init__(self, objects: Mapping[str, Any], label: str):
        self._objects = objects
        self._label = label

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        try:
            return self._objects[name]
        except KeyError:
            raise CheckFailure(
                f"{self._label} has no `{name}`: keep the names (and signatures) of the stub"
            ) from None


@dataclasses.dataclass
class Context:
    """What a check function receives.

    Attributes:
        student: the student's objects (``ctx.student.MultiheadAttention``).
        ref: the reference module (``solutions/<practical>.py``).
        exercise, check: what is being graded.
    """

    student: Any
    ref: ModuleType
    exercise: Exercise
    check: Check

    @property
    def recording(self) -> bool:
        """Whether the reference's answers are being recorded (``make handout``, the trusted
        grader): a check then also asks the questions its hints would ask on a failure, so
        that the recorded answers hold them when a student's code fails there."""
        return isinstance(self.ref, expected.Recorder)

    def rng(self, salt: str = "") -> np.random.Generator:
        """A generator that gives the same inputs on every run of this check (with the same
        grading seed, :func:`~m2l_nlp.grading.checks.tools.seeded`)."""
        return rng_for(self.exercise.name, self.check.name, salt)

    def key(self, seed: int = 0) -> jax.Array:
        return key_for(seed)


def reference(practical: str) -> Any:
    """The reference of ``practical`` (loaded once): the module ``solutions/<practical>.py``,
    or, in a student handout without ``solutions/``, the expected values recorded from it
    (:class:`~m2l_nlp.grading.checks.expected.Replay`)."""
    if practical not in _REFERENCES:
        if (repo_root() / "solutions" / f"{practical}.py").is_file():
            _REFERENCES[practical] = load_practical(practical, "solutions")
        else:
            _REFERENCES[practical] = expected.load(practical)
    return _REFERENCES[practical]


def import_error_message(err: BaseException, path: str) -> str:
    """Describe why a practical file could not be imported, with file and line, in words."""
    if isinstance(err, SyntaxError):
        where = f"{err.filename or path}, line {err.lineno}"
        text = (err.text or "").rstrip()
        caret = f"\n    {text}" if text else ""
        return f"{where}: syntax error: {err.msg}{caret}\nFix it, then run pytest again."
    frames = traceback.extract_tb(err.__traceback__)
    mine = [f for f in frames if os.path.abspath(f.filename) == os.path.abspath(path)]
    frame = mine[-1] if mine else (frames[-1] if frames else None)
    where = f"{frame.filename}, line {frame.lineno}" if frame else path
    line = f"\n    {frame.line}" if frame and frame.line else ""
    kind = type(err).__name__
    earlier = re.fullmatch(r"(?:.*\.)?(practical\d+_\w+)", getattr(err, "name", None) or "")
    if isinstance(err, ModuleNotFoundError) and earlier:
        advice = (
            f"this practical builds on your {earlier[1]}: keep {earlier[1]}.py (or its "
            "notebook) beside this file, and submit both"
        )
    elif isinstance(err, ImportError):
        advice = "an import in your file names something that does not exist"
    else:
        advice = "the file raised an error while being imported (code at module level runs then)"
    return f"{where}: {kind}: {err}{line}\n{advice}; fix it, then run pytest again."


@contextlib.contextmanager
def isolated(globals_dicts: list[dict[str, Any]], replacements: Mapping[str, Any]) -> Iterator:
    """Temporarily bind ``replacements`` in each of ``globals_dicts`` (restored afterwards)."""
    saved: list[tuple[dict[str, Any], str, Any]] = []
    missing = object()
    try:
        for g in globals_dicts:
            for name, value in replacements.items():
                saved.append((g, name, g.get(name, missing)))
                g[name] = value
        yield
    finally:
        for g, name, old in reversed(saved):
            if old is missing:
                g.pop(name, None)
            else:
                g[name] = old


def globals_of(obj: Any) -> dict[str, Any] | None:
    """The module globals a function or class (via its methods) looks names up in."""
    if isinstance(obj, ModuleType):
        return vars(obj)
    func = getattr(obj, "__func__", obj)
    if hasattr(func, "__globals__"):
        return func.__globals__
    if isinstance(obj, type):
        for value in vars(obj).values():
            value = getattr(value, "__func__", value)
            if hasattr(value, "__globals__"):
                return value.__globals__
    return None


@functools.cache
def stub_lines_from(path: str) -> tuple[str, ...]:
    """The ``raise NotImplementedError(...)`` lines of the stub made from a solution file."""
    text = make_stub(Path(path).read_text(encoding="utf-8"), path)
    return tuple(m.group(0) for m in re.finditer(r'raise NotImplementedError\("[^"\n]*"\)', text))


def stub_lines_of(ref: Any) -> tuple[str, ...]:
    """The stub lines of the practical of ``ref`` (a module, or recorded expected values)."""
    if isinstance(ref, ModuleType):
        ref_file = getattr(ref, "__file__", None)
        return stub_lines_from(ref_file) if ref_file else ()
    return tuple(getattr(ref, "stub_lines", ()))


def source_of(student: Any, name: str) -> str:
    """The source code of the student's ``name`` (asked of the process that runs it, if any)."""
    if hasattr(type(student), "source"):
        return student.source(name)
    return inspect.getsource(getattr(student, name))


def untouched(exercise: Exercise, student: Any, ref: Any) -> str | None:
    """If every target of ``exercise`` still holds all of its stub lines, the message of the
    first one (the exercise is not started: no need to run the checks); otherwise None."""
    lines = stub_lines_of(ref)
    if not lines:
        return None
    first = None
    for target in exercise.targets:
        mine = [
            line
            for line in lines
            if line.startswith(
                (f'raise NotImplementedError("{target}:', f'raise NotImplementedError("{target}.')
            )
        ]
        try:
            source = source_of(student, target)
        except Exception:  # noqa: BLE001 - no source (or no object): just run the checks
            return None
        if not mine or not isinstance(source, str) or not all(line in source for line in mine):
            return None
        first = first or mine[0]
    return first[len('raise NotImplementedError("') : -2] if first else None


def run_check(
    exercise: Exercise,
    check: Check,
    student: Any,
    ref: Any,
    student_globals: list[dict[str, Any]],
) -> None:
    """Run one check; raises what the check raises (``CheckFailure``, ``NotImplementedError``,
    or an exception from the student's code). An exercise whose stubs are all untouched
    raises ``NotImplementedError`` at once, without running the check.

    With the reference module at hand, the names in ``exercise.uses`` are bound to the
    reference's in ``student_globals`` (a mistake counts once); with recorded expected
    values or in another process, the student's own earlier work is used."""
    if isinstance(student, ModuleType):
        student = StudentNamespace(vars(student), getattr(student, "__file__", student.__name__))
    stub = untouched(exercise, student, ref)
    if stub is not None:
        raise NotImplementedError(stub)
    uses = exercise.uses if isinstance(ref, ModuleType) else ()
    replacements = {name: getattr(ref, name) for name in uses}
    ctx = Context(student, ref, exercise, check)
    with (
        isolated(student_globals, replacements),
        jax.default_matmul_precision("highest"),
        # the random bits of jax 0.5 and newer (the default there) on every jax we support:
        # a handout's recorded answers hold them, and a same-key comparison then holds on
        # the oldest jax too, where a different stream sent checks to thousands of draws
        jax.threefry_partitionable(True),
        devices.on_checking_device(),
    ):
        check.func(ctx)


_RANDOM_KEY_ASKED = ("non-None PRNGKey", "next_rng_key")  # haiku's words for a missing key
_FLAG_DROPPED = slip(
    "any/is-train-not-passed-on",
    "this line calls a sub-module without is_train, so the sub-module runs with its default, "
    "is_train=True, even in evaluation mode, and its dropout asks for a random key: pass "
    "is_train on to every sub-module that has dropout",
)

# (words that occur in the error, the hint): the first entry with a word found applies.
_HINTS = (
    (
        ("Unable to retrieve parameter",),
        slip(
            "any/parameter-the-reference-lacks",
            "your module asks for a parameter the reference does not create: build sub-modules "
            "only in __init__, with the names given in the stub",
        ),
    ),
    (
        _RANDOM_KEY_ASKED,
        slip(
            "any/dropout-in-evaluation-mode",
            "your code asked for a random key in evaluation mode (is_train=False): dropout must "
            "only run when is_train is True, and every sub-module with dropout must be given "
            "is_train (their default is True)",
        ),
    ),
    (
        ("TracerBoolConversionError", "ConcretizationTypeError"),
        slip(
            "any/python-if-on-an-array",
            "a Python `if` or `bool()` on an array fails under jax.jit: use jnp.where, or test a "
            "Python value (a shape, a flag) instead",
        ),
    ),
    (
        ("with retrieved shape",),
        slip(
            "any/layer-input-of-another-size",
            "a layer got inputs of another size than the reference's layer (its weights were "
            "made for that size): check what you feed it, e.g. the pooling or a concatenation",
        ),
    ),
    (
        ("Incompatible types for matmul", "Incompatible shapes for matmul"),  # jax 0.10, 0.7
        slip(
            "any/transpose-of-all-axes",
            "check the shapes you multiply (print x.shape); with leading axes, `.T` reverses all "
            "of them: swap only the last two, jnp.swapaxes(k, -1, -2)",
        ),
    ),
    (
        ("Incompatible shapes for broadcasting", "could not broadcast", "could not be broadcast"),
        slip("any/shapes-that-do-not-broadcast", "check the shapes you combine (print x.shape)"),
    ),
)


def _student_frame(err: BaseException, student_files: set[str]) -> traceback.FrameSummary | None:
    if isinstance(err, StudentError):
        frames = err.frames
    else:
        frames = traceback.extract_tb(err.__traceback__)
    for frame in reversed(frames):
        if _is_students(frame.filename, student_files):
            return frame
    for frame in reversed(frames):
        installed = "site-packages" in frame.filename or "dist-packages" in frame.filename
        if not installed and "/m2l_nlp/grading/" not in frame.filename:
            return frame
    return None


def _is_students(filename: str, student_files: set[str]) -> bool:
    return os.path.abspath(filename) in student_files or filename.startswith("<ipython-input")


def _flag_dropped_at(err: BaseException, student_files: set[str]) -> traceback.FrameSummary | None:
    """Where the student's code called a sub-module without its ``is_train``: the last of the
    student's frames with ``is_train`` False before a frame (theirs, or the reference's that
    stands in for their earlier work) with ``is_train`` True, read from the frames' variables.
    From another process only the lines come back: a student's ``__call__`` called by a line
    of theirs that does not say ``is_train``."""
    if isinstance(err, StudentError):
        mine = [f for f in err.frames if _is_students(f.filename, student_files)]
        for caller, callee in zip(mine, mine[1:], strict=False):
            if callee.name == "__call__" and "is_train" not in (caller.line or ""):
                return caller
        return None
    evaluating = None
    tb = err.__traceback__
    while tb is not None:
        flag = tb.tb_frame.f_locals.get("is_train")
        if flag is False and _is_students(tb.tb_frame.f_code.co_filename, student_files):
            evaluating = tb
        elif flag is True and evaluating is not None:
            return traceback.extract_tb(evaluating, limit=1)[0]
        tb = tb.tb_next
    return None


def describe_error(err: BaseException, student_files: set[str]) -> str:
    """An exception from the student's code, in words, with file and line."""
    full = f"{err.kind if isinstance(err, StudentError) else type(err).__name__} {err}"
    dropped = None
    if any(needle in full for needle in _RANDOM_KEY_ASKED):
        dropped = _flag_dropped_at(err, student_files)
    frame = dropped or _student_frame(err, student_files)
    where = f" ({frame.filename}, line {frame.lineno}: `{frame.line}`)" if frame else ""
    kind = err.kind if isinstance(err, StudentError) else type(err).__name__
    text = str(err).strip().splitlines()
    first = text[0][:300] if text else ""
    message = f"your code raised {kind}: {first}{where}"
    if dropped is not None:
        return f"{message}\nHint: {_FLAG_DROPPED}."
    for needles, hint in _HINTS:
        if any(needle in full for needle in needles):
            return f"{message}\nHint: {hint}."
    return message


@dataclasses.dataclass
class CheckResult:
    """The outcome of one check: ``status`` in passed / failed / not started / error;
    ``hint``: the id of the typical slip its message names (:func:`registry.slip`), if any."""

    exercise: str
    check: str
    status: str
    message: str = ""
    hint: str | None = None

    def __post_init__(self) -> None:
        if self.hint is None and self.status != "passed":
            self.hint = named_slip(self.message)


def outcome(err: BaseException | None, student_files: set[str]) -> tuple[str, str]:
    """Classify an exception raised by :func:`run_check` as ``(status, message)``."""
    if err is None:
        return "passed", ""
    if isinstance(err, NotImplementedError):
        text = str(err) or "NotImplementedError"
        return "not started", f"not started: {text}"
    if isinstance(err, PracticalError):
        return "error", str(err)
    if isinstance(err, CheckFailure):
        return "failed", str(err)
    return "failed", describe_error(err, student_files)


def judge_check(
    exercise: Exercise,
    check: Check,
    student: Any,
    ref: Any,
    student_globals: list[dict[str, Any]],
    student_files: set[str],
) -> tuple[str, str]:
    """Run one check (:func:`run_check`) and give its verdict, ``(status, message)``
    (:func:`outcome`): whatever the check raises becomes the verdict."""
    try:
        run_check(exercise, check, student, ref, student_globals)
    except Exception as caught:  # noqa: BLE001 - every failure becomes a verdict
        return outcome(caught, student_files)
    return outcome(None, student_files)


@dataclasses.dataclass
class ExerciseResult:
    """The verdict of one exercise: the results of its checks and the points earned."""

    exercise: Exercise
    checks: list[CheckResult]
    note: str = ""  # e.g. an earlier exercise it depends on that fails too
    seconds: float = 0.0  # the time its checks took (the autograder's results show it)

    @property
    def status(self) -> str:
        return aggregate([c.status for c in self.checks])

    @property
    def points(self) -> float:
        """All or nothing; under partial credit, the weights of the passed checks' share of
        the points, and nothing while a gate check (a comparison with the reference) fails."""
        ex = self.exercise
        if not ex.partial:
            return ex.points if self.status == "passed" else 0.0
        passed = {c.check for c in self.checks if c.status == "passed"}
        if any(c.gate and c.name not in passed for c in ex.checks):
            return 0.0
        total = sum(c.weight for c in ex.checks)
        return round(ex.points * sum(c.weight for c in ex.checks if c.name in passed) / total, 2)

    def worth(self, check: str) -> str:
        """What a check is worth, said under partial credit ("" otherwise)."""
        ex = self.exercise
        chk = next((c for c in ex.checks if c.name == check), None)
        if not ex.partial or chk is None:
            return ""
        share = ex.points * chk.weight / sum(c.weight for c in ex.checks)
        gate = "; the exercise's other points need it" if chk.gate else ""
        return f" ({share:.3g} points{gate})"

    def messages(self) -> list[str]:
        notes = [self.note] if self.note else []
        return notes + [
            f"[{c.check}]{self.worth(c.check)} {c.message}"
            for c in self.checks
            if c.status != "passed"
        ]

    def __str__(self) -> str:
        passed = sum(c.status == "passed" for c in self.checks)
        head = (
            f"{self.exercise.name}: {self.status} ({passed}/{len(self.checks)} checks passed, "
            f"{self.points:g}/{self.exercise.points:g} points)"
        )
        return "\n".join([head, *("  " + m.replace("\n", "\n    ") for m in self.messages())])

    def __repr__(self) -> str:  # short: check() has already printed the details
        return (
            f"<{self.exercise.name}: {self.status}, {self.points:g}/{self.exercise.points:g} "
            "points>"
        )


def blame_earlier(results: list[ExerciseResult]) -> None:
    """Where a failed exercise ran the student's own earlier work (no reference stood in for
    it), set its note to name the earlier exercise that fails too: fix that one first. A
    hidden exercise is never named: a visible note must not tell how a hidden one went."""
    failing: dict[str, str] = {}  # target name -> the failed exercise that defines it
    for r in results:
        culprits = {n: failing[n] for n in r.exercise.uses if n in failing}
        if r.status == "failed" and culprits:
            names = ", ".join(culprits)
            failed = list(dict.fromkeys(culprits.values()))
            where = ", ".join(failed) + (" fails" if len(failed) == 1 else " fail")
            r.note = (
                f"note: this exercise calls your {names}, and {where}: fix that first, "
                "then this one may pass as it is"
            )
        if r.status != "passed" and not r.exercise.hidden:
            failing.update(dict.fromkeys(r.exercise.targets, r.exercise.name))


def aggregate(statuses: list[str]) -> str:
    """One status for an exercise from the statuses of its checks: ``"incomplete"`` when
    some checks ran and passed but others met a stub (a method still to write)."""
    if not statuses:
        return "not started"
    if "error" in statuses:
        return "error"
    if "failed" in statuses:
        return "failed"
    if "not started" in statuses:
        return "incomplete" if "passed" in statuses else "not started"
    return "passed"


def student_files_of(objects: Mapping[str, Any]) -> set[str]:
    """Source files of the student's objects (for locating errors)."""
    files = set()
    for obj in objects.values():
        g = globals_of(obj)
        if g and g.get("__file__"):
            files.add(os.path.abspath(g["__file__"]))
    return files
