"""The auto-grader: ``checks/`` (the graded checks per exercise and what runs them),
``local/`` (pytest plugin, a notebook's ``check()``) and ``trusted/`` (grading for credit).

- ``python -m m2l_nlp.authoring.stubs [--check]``: write (or check) ``exercises/``.
- ``python -m m2l_nlp.grading [pytest args]``: grade, same as ``pytest`` at the repo root.
- ``from m2l_nlp.grading import check``: run an exercise's checks in a notebook.
- ``from m2l_nlp.grading import use_practical``: a notebook's earlier practical, importable.

Imports are lazy so that the stub generator does not load JAX.
"""

from __future__ import annotations

from typing import Any

__all__ = ["check", "run_pytest", "use_practical"]


def __getattr__(name: str) -> Any:
    if name == "check":
        from m2l_nlp.grading.local.notebook import check

        return check
    if name == "use_practical":
        from m2l_nlp.grading.local.earlier import use_practical

        return use_practical
    if name == "run_pytest":
        from m2l_nlp.grading.local.cli import run_pytest

        return run_pytest
    raise AttributeError(f"module 'm2l_nlp.grading' has no attribute {name!r}")
