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
import importlib.util
import os
import pkgutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from m2l_nlp.grading import settings as grading_settings
from m2l_nlp.impl import repo_root

EXTRA_MODULES_ENV = "M2L_GRADING_MODULES"


class CheckFailure(AssertionError):
    """A graded check found a mistake; the message says what is wrong, in words."""


@dataclasses.dataclass(frozen=True)
class Check:
    """One graded property of an exercise; ``func(ctx)`` raises :class:`CheckFailure`."""

    name: str
    func: Callable[[Any], None]
    doc: str
    gate: bool = False  # under partial credit, the exercise earns nothing unless it passes
    weight: float = 1.0  # its share of the exercise's points under partial credit


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

    def check(self, func: Callable[[Any], None] | None = None, *, gate: bool = False) -> Any:
        """Decorator: register ``func(ctx)`` as a check; its docstring is the description.
        ``@ex.check(gate=True)``: under partial credit, nothing is earned unless it passes
        (a comparison with the reference, so that trivial code earns nothing)."""
        if func is None:
            return lambda f: self.check(f, gate=gate)
        name = func.__name__.removeprefix("check_")
        if any(c.name == name for c in self.checks):
            raise ValueError(f"exercise {self.name!r} already has a check named {name!r}")
        doc = (func.__doc__ or name).strip().splitlines()[0]
        self.checks.append(Check(name, func, doc, gate))
        return func


_REGISTRY: dict[str, Exercise] = {}


def exercise(
    name: str,
    practical: str,
    points: float,
    targets: tuple[str, ...],
    uses: tuple[str, ...] = (),
    title: str = "",
    hidden: bool = False,
) -> Exercise:
    """Create and register an exercise (names must be unique across practicals)."""
    if name in _REGISTRY and _REGISTRY[name].practical != practical:
        raise ValueError(
            f"exercise name {name!r} is used by both {_REGISTRY[name].practical} and "
            f"{practical}: exercise names are pytest markers and must be unique"
        )
    ex = Exercise(name, practical, points, tuple(targets), tuple(uses), title, hidden=hidden)
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


def load_hidden(root: Path | None = None) -> list[str]:
    """Import the hidden checks, ``solutions/hidden/*.py`` (the autograder's only: the local
    front ends never call this); returns the names of the exercises they declare."""
    folder = (root or repo_root()) / grading_settings.HIDDEN_DIR
    for module in check_modules():  # theirs first: a hidden module may import them
        importlib.import_module(module)
    before = set(_REGISTRY)
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        name = f"m2l_nlp_hidden_{path.stem}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            spec.loader.exec_module(module)
    return [name for name in _REGISTRY if name not in before]


def read_settings(root: Path | None = None) -> grading_settings.GradingSettings:
    """``grading.toml`` of ``root`` (the repository's by default), checked against the
    exercises registered so far. Raises :class:`~m2l_nlp.grading.settings.SettingsError`."""
    checks = {name: [c.name for c in ex.checks] for name, ex in _REGISTRY.items()}
    return grading_settings.read(root or repo_root(), checks)


def _with_settings(ex: Exercise, chosen: grading_settings.GradingSettings) -> Exercise:
    """``ex`` as ``grading.toml`` sets it: points, partial credit, weights and gates."""
    weights = chosen.weights.get(ex.name, {})
    gates = chosen.gates.get(ex.name)
    checks = [
        dataclasses.replace(
            c, weight=weights.get(c.name, 1.0), gate=c.gate if gates is None else c.name in gates
        )
        for c in ex.checks
    ]
    return dataclasses.replace(
        ex,
        points=chosen.points.get(ex.name, ex.points),
        checks=checks,
        partial=chosen.partial_credit,
    )


def load_exercises() -> dict[str, Exercise]:
    """Import every check module and return ``{exercise name: Exercise}`` in teaching order,
    as ``grading.toml`` sets them (the hidden ones too, once :func:`load_hidden` ran)."""
    for module in check_modules():
        importlib.import_module(module)
    chosen = read_settings()
    return {name: _with_settings(ex, chosen) for name, ex in _REGISTRY.items()}


def get_exercise(name: str) -> Exercise:
    """The exercise called ``name``; a clear error listing the known names otherwise."""
    exercises = load_exercises()
    if name not in exercises:
        known = ", ".join(exercises)
        raise KeyError(f"no exercise called {name!r}; the exercises are: {known}")
    return exercises[name]
