"""Tests of what the student's worker process can reach (m2l_nlp.grading.trusted.worker): the
installed package defines no exercise."""

from __future__ import annotations

from pathlib import Path

from m2l_nlp.grading.checks.catalog import load_exercises

ROOT = Path(__file__).resolve().parents[3]


def test_no_module_of_the_library_defines_what_an_exercise_asks_for():
    """The installed package is readable by the student's process: none of its modules may
    define an exercise's function or class (the checks ask the reference's process instead,
    and the library takes the components from solutions/ or exercises/)."""
    import ast

    targets = {t for ex in load_exercises().values() for t in ex.targets}
    found = []
    for path in sorted((ROOT / "m2l_nlp").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            defined = isinstance(node, (ast.FunctionDef, ast.ClassDef))
            if defined and node.name.lstrip("_") in targets:
                found.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert targets and found == []
