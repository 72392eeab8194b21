"""What a graded exercise is: :class:`Exercise`, its :class:`Check` s, :func:`exercise`.

A practical's check modules (``m2l_nlp/grading/practicals/practical<N>/``) create exercises
with :func:`exercise` at module level and attach checks with the ``@ex.check`` decorator;
:mod:`~m2l_nlp.grading.checks.catalog` finds them and builds the catalog each front end reads.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any


class CheckFailure(AssertionError):
    """A graded check found a mistake; the message says what is wrong, in words."""


_SLIPS: dict[str, str] = {}  # the words that name a typical slip -> its id


def slip(slip_id: str, words: str) -> str:
    """``words``, the words a check's message uses for one typical slip, named by the stable
    ``slip_id`` (``exercise/what-went-wrong``): a failed check whose message holds them
    carries that id (:func:`named_slip`), which an instructor's report counts."""
    if _SLIPS.setdefault(words, slip_id) != slip_id:
        raise ValueError(f"{words!r} already names the slip {_SLIPS[words]!r}")
    return words


def named_slip(message: str) -> str | None:
    """The id of the slip whose words ``message`` holds (the longest, where several do)."""
    found = [words for words in _SLIPS if words in message]
    return _SLIPS[max(found, key=len)] if found else None


@dataclasses.dataclass(frozen=True)
class Check:
    """One graded property of an exercise; ``func(ctx)`` raises :class:`CheckFailure`."""

    name: str
    func: Callable[[Any], None]
    doc: str
    gate: bool = False  # under partial credit, the exercise earns nothing unless it passes
    weight: float = 1.0  # its share of the exercise's points under partial credit
    covers: tuple[str, ...] = ()  # the targets it compares with the reference, on general inputs


@dataclasses.dataclass
class Exercise:
    """A graded exercise of one practical.

    Attributes:
        name: the marker and table name, e.g. ``"multihead_attention"``.
        practical: the module under ``solutions/`` and ``exercises/``, e.g.
            ``"practical2_transformers"``.
        points: points for passing every check (all or nothing), or spread over the
            checks by weight under partial credit (``grading.toml``).
        targets: the names the student writes for this exercise (functions, classes).
        uses: names from earlier exercises that the targets call; while this exercise is
            graded they are replaced by the reference ones, so a mistake is only counted once.
        title: one line shown by ``check()`` and in the score table's notes.
        partial: partial credit (from ``grading.toml``): see ``ExerciseResult.points``.
        hidden: graded only by the autograder (declared in ``solutions/hidden/``).
    """

    name: str
    practical: str
    points: float
    targets: tuple[str, ...]
    uses: tuple[str, ...] = ()
    title: str = ""
    checks: list[Check] = dataclasses.field(default_factory=list)
    partial: bool = False
    hidden: bool = False

    def check(
        self,
        func: Callable[[Any], None] | None = None,
        *,
        gate: bool = False,
        covers: tuple[str, ...] | None = None,
    ) -> Any:
        """Decorator: register ``func(ctx)`` as a check; its docstring is the description.
        ``@ex.check(gate=True)``: under partial credit, nothing is earned unless it passes
        (a comparison with the reference, so that trivial code earns nothing). ``covers``:
        the targets it compares with the reference on general inputs (a gate of a
        one-target exercise covers that target); every target needs a gate that covers it
        (:meth:`uncovered`)."""
        if func is None:
            return lambda f: self.check(f, gate=gate, covers=covers)
        name = func.__name__.removeprefix("check_")
        if any(c.name == name for c in self.checks):
            raise ValueError(f"exercise {self.name!r} already has a check named {name!r}")
        if covers is None:
            covers = self.targets if gate and len(self.targets) == 1 else ()
        unknown = [t for t in covers if t not in self.targets]
        if unknown:
            raise ValueError(
                f"check {name!r} of {self.name!r} covers {', '.join(unknown)}, not a target of "
                f"the exercise (its targets: {', '.join(self.targets)})"
            )
        doc = (func.__doc__ or name).strip().splitlines()[0]
        self.checks.append(Check(name, func, doc, gate, covers=tuple(covers)))
        return func

    def uncovered(self) -> list[str]:
        """The targets that no gate check compares with the reference: trivial code there
        (uniform attention, zeros, the input returned) could earn points."""
        covered = {t for c in self.checks if c.gate for t in c.covers}
        return [t for t in self.targets if t not in covered]


def exercise(
    name: str,
    practical: str,
    points: float,
    targets: tuple[str, ...],
    uses: tuple[str, ...] = (),
    title: str = "",
    hidden: bool = False,
) -> Exercise:
    """A new exercise, to be bound to a module-level name of a check module: the catalog
    (:mod:`~m2l_nlp.grading.checks.catalog`) finds it there."""
    return Exercise(name, practical, points, tuple(targets), tuple(uses), title, hidden=hidden)


# A row of a practical's table of exercises: name, points, targets, uses, title.
ExerciseRow = tuple[str, float, tuple[str, ...], tuple[str, ...], str]


def exercises(practical: str, rows: tuple[ExerciseRow, ...]) -> dict[str, Exercise]:
    """The exercises of one practical, by name, from its table (one row each, read by
    :func:`exercise`). A check module binds the ones it checks to module-level names, where
    the catalog finds them."""
    table = {}
    for name, points, targets, uses, title in rows:
        if name in table:
            raise ValueError(f"the table of {practical} has two rows named {name!r}")
        table[name] = exercise(name, practical, points, targets, uses, title)
    return table
