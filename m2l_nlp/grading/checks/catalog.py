"""The catalog of graded exercises that a front end (pytest plugin, notebook ``check()``,
trusted grader, bundle) grades: built for each caller from what it finds, never a global
registry filled by imports.

Practicals are found by convention: every package ``practical<N>`` under
``m2l_nlp/grading/practicals/`` (by number: practical10 after practical9), each module of it
searched for module-level :class:`~m2l_nlp.grading.checks.registry.Exercise` objects. Within a
practical, exercises follow the teaching order: where their first target is defined in the
practical's file (``solutions/<practical>.py``, else ``exercises/<practical>.py``). Two more
sources are read by name, as data: the modules of ``$M2L_GRADING_MODULES`` (comma-separated;
tests and practicals in development) and, for the autograder only (``hidden=True``), the
hidden checks ``solutions/hidden/*.py``, loaded from their files for that catalog alone.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import importlib
import importlib.util
import os
import pkgutil
import re
from pathlib import Path
from types import ModuleType

from m2l_nlp.grading.checks import settings as grading_settings
from m2l_nlp.grading.checks.registry import Exercise
from m2l_nlp.impl import repo_root

PRACTICALS = "m2l_nlp.grading.practicals"  # the package of the practicals' checks
PRACTICAL_PACKAGE = re.compile(r"practical(\d+)")
EXTRA_MODULES_ENV = "M2L_GRADING_MODULES"
HIDDEN_PREFIX = "m2l_nlp_hidden_"  # the hidden check modules' names (never in sys.modules)


def practical_packages() -> list[str]:
    """The packages of the practicals' checks, ``m2l_nlp.grading.practicals.practical<N>``,
    by number."""
    base = importlib.import_module(PRACTICALS)
    found = []
    for info in pkgutil.iter_modules(base.__path__):
        match = PRACTICAL_PACKAGE.fullmatch(info.name)
        if info.ispkg and match:
            found.append((int(match[1]), f"{PRACTICALS}.{info.name}"))
    return [name for _, name in sorted(found)]


def _modules_of(package: str) -> list[ModuleType]:
    """``package`` and every module in it, imported (by name: they are data to this one)."""
    top = importlib.import_module(package)
    names = sorted(info.name for info in pkgutil.iter_modules(top.__path__))
    return [top, *(importlib.import_module(f"{package}.{name}") for name in names)]


def extra_modules() -> list[str]:
    """The check modules named by ``$M2L_GRADING_MODULES`` (comma-separated importable names,
    used by tests and by practicals in development), after the course's own."""
    names = os.environ.get(EXTRA_MODULES_ENV, "").split(",")
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


def _exercises_in(modules: list[ModuleType]) -> list[Exercise]:
    """The module-level exercises of ``modules``, each once (a module may import another's)."""
    seen: dict[int, Exercise] = {}
    for module in modules:
        for value in vars(module).values():
            if isinstance(value, Exercise):
                seen.setdefault(id(value), value)
    return list(seen.values())


TOP_LEVEL_DEFINITION = re.compile(r"^(?:async\s+)?(?:def|class)\s+(\w+)", re.M)


@functools.cache
def _definition_order(path: Path, stamp: float) -> dict[str, int]:
    """``{name: position}`` of the top-level functions and classes of the file ``path``.

    A student's file may not parse (a handout orders by ``exercises/``): its definitions are
    then found line by line, so the catalog still loads and grading reports the error."""
    del stamp  # part of the cache key only: an edited file is read again
    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):  # ValueError: null bytes
        defined = iter(TOP_LEVEL_DEFINITION.findall(text))
    else:
        defined = (n.name for n in tree.body if isinstance(n, ast.FunctionDef | ast.ClassDef))
    order: dict[str, int] = {}
    for name in defined:
        order.setdefault(name, len(order))
    return order


def _teaching_order(exercises: list[Exercise], root: Path) -> list[Exercise]:
    """``exercises`` of one practical in the order their first targets are defined in the
    practical's file (as found, where no file says)."""
    if not exercises:
        return exercises
    practical = exercises[0].practical
    for folder in ("solutions", "exercises"):
        path = root / folder / f"{practical}.py"
        try:
            order = _definition_order(path, path.stat().st_mtime) if path.is_file() else None
        except OSError:  # unreadable: the next file, or the order as found
            order = None
        if order is not None:
            return sorted(exercises, key=lambda ex: order.get(ex.targets[0], len(order)))
    return exercises


def _load_hidden(root: Path) -> list[Exercise]:
    """The exercises of ``solutions/hidden/*.py``, each file executed as a module of its own
    that no import can reach (it is not put in ``sys.modules``)."""
    folder = root / grading_settings.HIDDEN_DIR
    modules = []
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        spec = importlib.util.spec_from_file_location(f"{HIDDEN_PREFIX}{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        modules.append(module)
    return _exercises_in(modules)


def _add(found: dict[str, Exercise], exercises: list[Exercise]) -> None:
    for ex in exercises:
        other = found.get(ex.name)
        if other is ex:  # imported by a later module: the same exercise
            continue
        if other is not None and ex.hidden:  # it would silently stand in for the public one
            raise ValueError(
                f"the hidden exercise {ex.name!r} has the name of the exercise {ex.name!r} of "
                f"{other.practical}: give the hidden one a name of its own"
            )
        if other is not None:
            raise ValueError(
                f"exercise name {ex.name!r} is used by both {other.practical} and "
                f"{ex.practical}: exercise names are pytest markers and must be unique"
            )
        found[ex.name] = ex


def collect(root: Path | None = None, hidden: bool = False) -> dict[str, Exercise]:
    """``{name: Exercise}`` of every practical (:func:`practical_packages`), in teaching
    order, then of ``$M2L_GRADING_MODULES``, then (``hidden``) of ``solutions/hidden/``, as
    they are declared (before ``grading.toml``)."""
    root = root or repo_root()
    found: dict[str, Exercise] = {}
    for package in practical_packages():
        exercises = _exercises_in(_modules_of(package))
        by_practical: dict[str, list[Exercise]] = {}
        for ex in exercises:
            by_practical.setdefault(ex.practical, []).append(ex)
        for group in by_practical.values():
            _add(found, _teaching_order(group, root))
    extra = [importlib.import_module(name) for name in extra_modules()]
    _add(found, _exercises_in(extra))
    if hidden:
        _add(found, _load_hidden(root))
    return found


def read_settings(
    root: Path | None = None, exercises: dict[str, Exercise] | None = None
) -> grading_settings.GradingSettings:
    """``grading.toml`` of ``root`` (the repository's by default), checked against
    ``exercises`` (by default every public one). Raises
    :class:`~m2l_nlp.grading.checks.settings.SettingsError`."""
    exercises = collect(root) if exercises is None else exercises
    checks = {name: [c.name for c in ex.checks] for name, ex in exercises.items()}
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


def load_exercises(root: Path | None = None, hidden: bool = False) -> dict[str, Exercise]:
    """The catalog: ``{exercise name: Exercise}`` in teaching order (:func:`collect`), as
    ``grading.toml`` of ``root`` (the repository's by default) sets them; ``hidden``: with
    the autograder's hidden checks, which no other catalog holds."""
    found = collect(root, hidden)
    chosen = read_settings(root, found)
    return {name: _with_settings(ex, chosen) for name, ex in found.items()}


def load_hidden(root: Path | None = None) -> list[str]:
    """The names of the hidden exercises (``solutions/hidden/``)."""
    return [ex.name for ex in _load_hidden(root or repo_root())]


def get_exercise(name: str) -> Exercise:
    """The exercise called ``name``; a clear error listing the known names otherwise."""
    exercises = load_exercises()
    if name not in exercises:
        known = ", ".join(exercises)
        raise KeyError(f"no exercise called {name!r}; the exercises are: {known}")
    return exercises[name]
