"""Mutants of a practical's reference, found by convention: ``tests/mutants/<practical>.py``
defines ``MUTANTS = {exercise: [(slip, [(text in the solution, replacement), ...]), ...]}``.
Each mutant must fail its exercise's checks (practicals 1 and 2 keep theirs, with the
messages each slip must get, in tests/test_practical1.py and tests/test_grading.py)."""

from __future__ import annotations

import importlib
import importlib.util
import itertools
import shutil
import sys
from pathlib import Path

import pytest

from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.runner import outcome, reference, run_check

ROOT = Path(__file__).resolve().parent.parent
_counter = itertools.count()


def _mutants() -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    found = []
    for path in sorted((ROOT / "tests" / "mutants").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"mutants_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for exercise, cases in module.MUTANTS.items():
            found += [(path.stem, exercise, slip, edits) for slip, edits in cases]
    return found


MUTANTS = _mutants()


@pytest.mark.parametrize(
    ("practical", "exercise", "slip", "edits"),
    MUTANTS,
    ids=[f"{m[1]}-{m[2]}" for m in MUTANTS] or None,
)
def test_a_mutant_fails_its_exercise(tmp_path, practical, exercise, slip, edits):
    # The practical's folder, copied as a package of its own: a practical may import another
    # one beside it (`from .practical2_transformers import ...`).
    package = f"mutant_{next(_counter)}"
    shutil.copytree(ROOT / "solutions", tmp_path / package, ignore=shutil.ignore_patterns("hidden"))
    path = tmp_path / package / f"{practical}.py"
    text = path.read_text(encoding="utf-8")
    for old, new in edits:
        assert text.count(old) == 1, f"the solution changed: {old!r} is not there exactly once"
        text = text.replace(old, new)
    path.write_text(text, encoding="utf-8")
    sys.path.insert(0, str(tmp_path))
    try:
        module = importlib.import_module(f"{package}.{practical}")
    finally:
        sys.path.remove(str(tmp_path))
    ex = load_exercises()[exercise]
    statuses = []
    for chk in ex.checks:
        try:
            run_check(ex, chk, module, reference(ex.practical), [vars(module)])
            err = None
        except Exception as caught:  # noqa: BLE001 - its status is what is tested
            err = caught
        statuses.append(outcome(err, {module.__file__})[0])
    assert any(s == "failed" for s in statuses), f"{slip!r} was not caught: {statuses}"
