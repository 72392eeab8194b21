"""The registry of graded exercises: one package per practical declares its exercises.

A practical's package (``m2l_nlp/grading/practical<N>/``) holds its check modules, one per
group of exercises; each creates :class:`Exercise` objects with :func:`exercise` and attaches
checks to them with the ``@ex.check`` decorator. The package's ``__init__`` imports its
modules in teaching order (its ``MODULES``), which is the order of the exercises here, in the
tests and in the score table. The machinery (pytest plugin, notebook ``check``, score table)
only ever reads this registry, so a new practical needs no change outside its own package.
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import pkgutil
from collections.abc import Callable
from typing import Any

EXTRA_MODULES_ENV = "M2L_GRADING_MODULES"


class CheckFailure(AssertionError):
    """A graded check found a mistake; the message says what is wrong, in words."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One graded property of an exercise; ``func(ctx)`` raises :class:`CheckFailure`."""

    name: str
    func: Callable[[Any], None]
    doc: str


@dataclasses.dataclass
class Exercise:
    """A graded exercise of one practical.

    Attributes:
        name: the marker and table name, e.g. ``"multihead_attention"``.
        practical: the module under ``solutions/`` and ``exercises/``, e.g.
            ``"practical2_transformers"``.
        points: points for passing every check (all or nothing).
        targets: the names the student writes for this exercise (functions, classes).
        uses: names from earlier exercises that the targets call; while this exercise is
            graded they are replaced by the reference ones, so a mistake is only counted once.
        title: one line shown by ``check()`` and in the score table's notes.
    """

    name: str
    practical: str
    points: float
    targets: tuple[str, ...]
    uses: tuple[str, ...] = ()
    title: str = ""
    checks: list[Check] = dataclasses.field(default_factory=list)

    def check(self, func: Callable[[Any], None]) -> Callable[[Any], None]:
        """Decorator: register ``func(ctx)`` as a check; its docstring is the description."""
        name = func.__name__.removeprefix("check_")
        if any(c.name == name for c in self.checks):
            raise ValueError(f"exercise {self.name!r} already has a check named {name!r}")
        doc = (func.__doc__ or name).strip().splitlines()[0]
        self.checks.append(Check(name, func, doc))
        return func


_REGISTRY: dict[str, Exercise] = {}


def exercise(
    name: str,
    practical: str,
    points: float,
    targets: tuple[str, ...],
    uses: tuple[str, ...] = (),
    title: str = "",
) -> Exercise:
    """Create and register an exercise (names must be unique across practicals)."""
    if name in _REGISTRY and _REGISTRY[name].practical != practical:
        raise ValueError(
            f"exercise name {name!r} is used by both {_REGISTRY[name].practical} and "
            f"{practical}: exercise names are pytest markers and must be unique"
        )
    ex = Exercise(name, practical, points, tuple(targets), tuple(uses), title)
    _REGISTRY[name] = ex
    return ex


def check_modules() -> list[str]:
    """Modules that declare exercises: ``m2l_nlp.grading.practical*`` (packages or single
    modules, by name) plus ``$M2L_GRADING_MODULES`` (comma-separated importable names, used by
    tests and by practicals in development). Only the top level is listed: a package's own
    ``__init__`` imports its check modules, in teaching order."""
    package = importlib.import_module("m2l_nlp.grading")
    names = sorted(
        f"m2l_nlp.grading.{info.name}"
        for info in pkgutil.iter_modules(package.__path__)
        if info.name.startswith("practical")
    )
    extra = [n.strip() for n in os.environ.get(EXTRA_MODULES_ENV, "").split(",") if n.strip()]
    return names + [n for n in extra if n not in names]


def load_exercises() -> dict[str, Exercise]:
    """Import every check module and return ``{exercise name: Exercise}`` in teaching order."""
    for module in check_modules():
        importlib.import_module(module)
    return dict(_REGISTRY)


def get_exercise(name: str) -> Exercise:
    """The exercise called ``name``; a clear error listing the known names otherwise."""
    exercises = load_exercises()
    if name not in exercises:
        known = ", ".join(exercises)
        raise KeyError(f"no exercise called {name!r}; the exercises are: {known}")
    return exercises[name]
