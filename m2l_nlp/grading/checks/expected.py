"""Expected values: the reference's results recorded once, then replayed without the reference.

A check asks the reference two kinds of questions: ``ref.some_function(*args)`` and
``run_haiku(build, ref, params, *args)``. :class:`Recorder` answers them from a real
reference and keeps every answer under a hash of the question (its name or build, and the
exact bytes of its inputs); :class:`Replay` answers from those records alone. A student
handout (``make handout``) ships the records instead of ``solutions/``, and the trusted
grader records the reference once per run, then grades the submission against the records.

The checks draw their inputs from fixed seeds, so the questions asked of the reference are
the same on every run. A question that was never recorded (it would depend on the
student's own output) ends the check with a message rather than a wrong verdict.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

from m2l_nlp.fileio import atomic_file
from m2l_nlp.grading.checks import wire
from m2l_nlp.grading.checks.registry import CheckFailure
from m2l_nlp.grading.checks.tools import BuildSpec, Elsewhere, ElsewhereFunction, jitted, run_haiku

FORMAT = 1
EXPECTED_DIR = Path(__file__).with_name("expected")  # the handout's records live here


def _question(op: str, what: Any, args: Any, params: Any = None, key: Any = None) -> str:
    return wire.digest({"op": op, "what": what, "args": args, "params": params, "key": key})


class NotRecorded(CheckFailure):
    """The reference's answer to this question was not recorded."""


class Recorder(Elsewhere):
    """Asks ``inner`` (the reference module, or a reference in another process) and records.

    Answers are returned as plain data (NumPy arrays), exactly as :class:`Replay` will
    return them, so a check computes the same next questions in both.
    """

    def __init__(self, inner: Any, stub_lines: tuple[str, ...] = ()):
        self.inner = inner
        self.stub_lines = stub_lines
        self.records: dict[str, Any] = {}
        self.seconds: dict[str, float] = {}  # per exercise, filled by record()

    def _keep(self, question: str, answer: Any) -> Any:
        plain = wire.to_plain(answer)
        self.records[question] = plain
        return wire.from_plain(plain)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Question(self, name, getattr(self.inner, name))

    def run_haiku(
        self, build: BuildSpec, params: Any, args: tuple, key: Any = None, jit: bool = False
    ) -> Any:
        question = _question("haiku", build.plain(), list(args), params, key)
        return self._keep(question, run_haiku(build, self.inner, params, *args, key=key, jit=jit))


class Replay(Elsewhere):
    """Answers the reference's questions from records; :class:`NotRecorded` for the others."""

    def __init__(self, records: dict[str, Any], stub_lines: tuple[str, ...] = ()):
        self.records = records
        self.stub_lines = stub_lines

    def _answer(self, question: str, what: str) -> Any:
        if question in self.records:
            return wire.from_plain(self.records[question])
        raise NotRecorded(
            f"no expected value was recorded for this case ({what}); your output differs "
            "from the reference's earlier in this check, so fix the first mismatch reported"
        )

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return _Question(self, name, None)

    def run_haiku(
        self, build: BuildSpec, params: Any, args: tuple, key: Any = None, jit: bool = False
    ) -> Any:
        question = _question("haiku", build.plain(), list(args), params, key)
        return self._answer(question, build.name)


class _Question(ElsewhereFunction):
    """``ref.name(*args)`` asked of a :class:`Recorder` (which computes and keeps the answer)
    or a :class:`Replay` (which looks it up); jitted or not, the question is the same."""

    def __init__(self, owner: Recorder | Replay, name: str, func: Any):
        self.owner, self.name, self.func = owner, name, func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        question = _question("call", self.name, [list(args), kwargs])
        if isinstance(self.owner, Recorder):
            return self.owner._keep(question, self.func(*args, **kwargs))
        return self.owner._answer(question, self.name)

    def jitted(self, static_argnums: tuple[int, ...] = ()) -> _Question:
        if self.func is None:  # answers are looked up: nothing to compile
            return self
        return _Question(self.owner, self.name, jitted(self.func, *static_argnums))


def path_for(practical: str, folder: Path = EXPECTED_DIR) -> Path:
    return folder / f"{practical}.json.gz"


def save(recorder: Recorder, practical: str, folder: Path = EXPECTED_DIR) -> Path:
    """Write the records of ``recorder`` (atomically); returns the file written."""
    data = {
        "format": FORMAT,
        "practical": practical,
        "stub_lines": list(recorder.stub_lines),
        "records": recorder.records,
    }
    path = path_for(practical, folder)
    payload = gzip.compress(json.dumps(data, separators=(",", ":")).encode(), mtime=0)
    with atomic_file(path) as handle:
        handle.write(payload)
    return path


def load(practical: str, folder: Path = EXPECTED_DIR) -> Replay:
    """The recorded reference of ``practical`` (a handout has one per practical)."""
    path = path_for(practical, folder)
    if not path.is_file():
        raise FileNotFoundError(
            f"neither solutions/{practical}.py nor {path} exists: the checks need one of "
            "them (instructors: `make handout` writes the expected values)"
        )
    data = json.loads(gzip.decompress(path.read_bytes()))
    if data.get("format") != FORMAT:
        raise ValueError(f"{path} has format {data.get('format')}, this grader reads {FORMAT}")
    return Replay(data["records"], tuple(data["stub_lines"]))
