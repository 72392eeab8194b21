"""Fixtures shared by the tests of m2l_nlp.grading: practical 2's reference solution, the
helpers that grade edited copies of it in-process (practicals/test_practical2.py,
local/test_notebook.py, local/test_pytest_plugin.py).

The fixtures keep the names the tests used when these were constants and functions of one
module (``P2``, ``SOLUTION``, ``_mutate``, ...), so that the tests read as they did."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import pytest

from m2l_nlp.impl import repo_root

P2 = "practical2_transformers"
SOLUTION = (repo_root() / "solutions" / f"{P2}.py").read_text(encoding="utf-8")
_counter = itertools.count()


def _module_from(source: str, tmp_path: Path):
    name = f"graded_copy_{next(_counter)}"
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _mutate(source: str, old: str, new: str) -> str:
    assert source.count(old) == 1, f"the solution changed: {old!r} is not there exactly once"
    return source.replace(old, new)


def _mutant_edits(exercise: str, slip: str) -> list[tuple[str, str]]:
    """The edits of practical 2's mutant ``slip`` of ``exercise`` (tests/mutants/)."""
    path = Path(__file__).parents[1] / "mutants" / f"{P2}.py"
    spec = importlib.util.spec_from_file_location(f"mutants_{P2}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    (edits,) = [m[1] for m in module.MUTANTS[exercise] if m[0] == slip]
    return edits


def _apply(edits: list[tuple[str, str]] | tuple[str, str]) -> str:
    if isinstance(edits, tuple):  # (exercise, slip): a mutant of tests/mutants/
        edits = _mutant_edits(*edits)
    source = SOLUTION
    for old, new in edits:
        source = _mutate(source, old, new)
    return source


@pytest.fixture(name="P2", scope="session")
def p2_name() -> str:
    """The name of practical 2 (transformers), whose reference solution the tests edit."""
    return P2


@pytest.fixture(name="SOLUTION", scope="session")
def p2_solution() -> str:
    """The source of practical 2's reference solution (solutions/practical2_transformers.py)."""
    return SOLUTION


@pytest.fixture(name="_module_from", scope="session")
def module_from() -> Callable[[str, Path], ModuleType]:
    """``_module_from(source, tmp_path)``: ``source`` imported as a new module (a file in
    ``tmp_path``, a name of its own in sys.modules)."""
    return _module_from


@pytest.fixture(name="_mutate", scope="session")
def mutate() -> Callable[[str, str, str], str]:
    """``_mutate(source, old, new)``: ``old``, which must be there exactly once, replaced."""
    return _mutate


@pytest.fixture(name="_apply", scope="session")
def apply_edits() -> Callable[[list[tuple[str, str]]], str]:
    """``_apply(edits)``: practical 2's reference with each ``(old, new)`` of ``edits`` made;
    ``edits`` may name a mutant of tests/mutants/practical2_transformers.py, ``(exercise,
    slip)``."""
    return _apply
