"""Every graded exercise, in teaching order, as ``grading.toml`` sets it: what the front ends
(pytest plugin, notebook ``check()``, trusted grader, bundle) load.

The course's check packages are imported here, practical 1 then practical 2; each imports its
own modules in teaching order, and importing a module registers its exercises
(:mod:`~m2l_nlp.grading.checks.registry`), so that order is the order of the tests and of the
score table. Two imports are by name, as data: the modules of ``$M2L_GRADING_MODULES``
(comma-separated; tests and practicals in development) and the hidden checks
(``solutions/hidden/*.py``, read by the trusted grader only).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.util
import os
import sys
from collections.abc import Iterator
from pathlib import Path

# isort: off
# Importing a practical registers its exercises: this order is the teaching order.
from m2l_nlp.grading.checks import practical1  # noqa: F401
from m2l_nlp.grading.checks import practical2  # noqa: F401

# isort: on
from m2l_nlp.grading.checks import settings as grading_settings
from m2l_nlp.grading.checks.registry import Exercise, registered, unregister
from m2l_nlp.impl import repo_root

EXTRA_MODULES_ENV = "M2L_GRADING_MODULES"
HIDDEN_PREFIX = "m2l_nlp_hidden_"  # the hidden check modules' names in sys.modules


def extra_modules() -> list[str]:
    """The check modules named by ``$M2L_GRADING_MODULES`` (comma-separated importable names,
    used by tests and by practicals in development), after the course's own."""
    names = os.environ.get(EXTRA_MODULES_ENV, "").split(",")
    return list(dict.fromkeys(n.strip() for n in names if n.strip()))


def _import_extra_modules() -> None:
    # By name, as data: these modules are not known when this one is written.
    for module in extra_modules():
        importlib.import_module(module)


def load_hidden(root: Path | None = None) -> list[str]:
    """Import the hidden checks, ``solutions/hidden/*.py`` (the autograder's only: the local
    front ends never call this); returns the names of the exercises they declare."""
    folder = (root or repo_root()) / grading_settings.HIDDEN_DIR
    _import_extra_modules()  # theirs first: a hidden module may import them
    before = set(registered())
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else []:
        name = f"{HIDDEN_PREFIX}{path.stem}"
        if name not in sys.modules:
            spec = importlib.util.spec_from_file_location(name, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:  # half imported: forgotten, so that a later load tries again
                del sys.modules[name]
                unregister([n for n in registered() if n not in before])
                raise
    return [name for name, ex in registered().items() if ex.hidden or name not in before]


@contextlib.contextmanager
def hidden_checks(root: Path | None = None) -> Iterator[list[str]]:
    """The hidden checks registered for the block only (:func:`load_hidden`): a process that
    also grades locally or records answers (``make handout``) must not keep them."""
    names = load_hidden(root)
    try:
        yield names
    finally:
        unregister(names)
        for module in [m for m in sys.modules if m.startswith(HIDDEN_PREFIX)]:
            del sys.modules[module]


def read_settings(root: Path | None = None) -> grading_settings.GradingSettings:
    """``grading.toml`` of ``root`` (the repository's by default), checked against the
    exercises registered so far. Raises :class:`~m2l_nlp.grading.checks.settings.SettingsError`."""
    checks = {name: [c.name for c in ex.checks] for name, ex in registered().items()}
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


def load_exercises(root: Path | None = None) -> dict[str, Exercise]:
    """Import every check module and return ``{exercise name: Exercise}`` in teaching order,
    as ``grading.toml`` (of ``root``, the repository's by default) sets them (the hidden
    ones too, once :func:`load_hidden` ran)."""
    _import_extra_modules()
    chosen = read_settings(root)
    return {name: _with_settings(ex, chosen) for name, ex in registered().items()}


def get_exercise(name: str) -> Exercise:
    """The exercise called ``name``; a clear error listing the known names otherwise."""
    exercises = load_exercises()
    if name not in exercises:
        known = ", ".join(exercises)
        raise KeyError(f"no exercise called {name!r}; the exercises are: {known}")
    return exercises[name]
