"""Mutants of each practical's reference, by one convention: ``tests/mutants/<practical>.py``
defines ``MUTANTS = {exercise: [(slip, [(text in the solution, replacement), ...]), ...]}``.
Each mutant must fail its exercise's checks, every failing check with a message in words (no
traceback); each exercise has three mutants at least.

A mutant may add a third item, ``{"says": text, "not": text or tuple, "check": name, "hint":
id}`` (each key optional): the words its failure's messages must hold, those none of them may
hold, the one check whose message is read (else all that failed), and the id of the slip one
of them names (``registry.slip``: results.json carries it for the class report). Those are
asserted twice: graded against the reference module (the course repository), and (slow: the
answers are recorded first) against its recorded answers, as a student's handout grades,
where a hint can ask the reference only what was recorded and the student's earlier work is
called.

``VARIANTS = {exercise: [(name, edits), ...]}`` in the same file: correct code written another
way (a sampler by Gumbel-max rather than jax.random.categorical), which must pass every check
of its exercise, the hidden checks that cover its targets too, against the reference and
against its recorded answers. A variant may add ``{"slow": True}``: a whole model or stack,
whose checks take tens of seconds, runs with the slow tests."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import itertools
import json
import shutil
import sys
from pathlib import Path

import pytest

from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.expected import Replay
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    outcome,
    reference,
    run_check,
    stub_lines_of,
)
from m2l_nlp.grading.trusted.recording import record

ROOT = Path(__file__).resolve().parents[3]
_counter = itertools.count()


def _mutants(kind: str = "MUTANTS") -> list[tuple[str, str, str, list[tuple[str, str]], dict]]:
    found = []
    for path in sorted((ROOT / "tests" / "mutants").glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"mutants_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for exercise, cases in getattr(module, kind, {}).items():
            for slip, edits, *said in cases:
                found.append((path.stem, exercise, slip, edits, said[0] if said else {}))
    return found


MUTANTS, VARIANTS = _mutants(), _mutants("VARIANTS")


def _mutant(tmp_path: Path, practical: str, edits: list[tuple[str, str]]):
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
        return importlib.import_module(f"{package}.{practical}")
    finally:
        sys.path.remove(str(tmp_path))


@functools.cache
def _recorded(exercise: str) -> Replay:
    """The reference's answers to ``exercise``'s checks, recorded as ``make handout`` does,
    and read back through JSON as a handout reads them."""
    ex = load_exercises()[exercise]
    ref = reference(ex.practical)
    recorder = record({exercise: ex}, ex.practical, ref, stub_lines_of(ref))
    return Replay(json.loads(json.dumps(recorder.records)), recorder.stub_lines)


def _grade(module, exercise: str, ref, first_failure: bool = False) -> list[tuple[str, str]]:
    """(status, message) of each check, or up to the first that fails (``first_failure``);
    against recorded answers the student's own earlier work is called, as in a handout (no
    reference stands in for it)."""
    ex = load_exercises()[exercise]
    results = []
    for chk in ex.checks:
        try:
            run_check(ex, chk, module, ref, [vars(module)])
            err = None
        except Exception as caught:  # noqa: BLE001 - its status is what is tested
            err = caught
        results.append(outcome(err, {module.__file__}))
        if first_failure and results[-1][0] == "failed":
            break
    return results


def _expect_caught(
    results: list[tuple[str, str]], exercise: str, slip: str, said: dict, where: str
):
    statuses = [status for status, _ in results]
    assert any(s == "failed" for s in statuses), f"{slip!r} was not caught: {statuses}"
    failed = [message for status, message in results if status == "failed"]
    assert all(len(m) > 30 and "Traceback" not in m for m in failed), failed
    if "check" in said:
        checks = [chk.name for chk in load_exercises()[exercise].checks]
        graded = zip(checks, results, strict=True)
        failed = [m for name, (_, m) in graded if name == said["check"]]
    messages = "\n".join(failed)
    if "says" in said:
        assert said["says"] in messages, f"{slip!r} against {where}:\n{messages}"
    if "hint" in said:  # the slip's id, as results.json carries it for the class report
        hints = {CheckResult(exercise, "", "failed", m).hint for m in failed}
        assert said["hint"] in hints, f"{slip!r} against {where}: hint ids {hints}"
    nots = said.get("not", ())
    for words in (nots,) if isinstance(nots, str) else nots:
        assert words not in messages, f"{slip!r} against {where}:\n{messages}"


@pytest.mark.parametrize(
    ("practical", "exercise", "slip", "edits", "said"),
    MUTANTS,
    ids=[f"{m[1]}-{m[2]}" for m in MUTANTS] or None,
)
def test_a_mutant_fails_its_exercise(tmp_path, practical, exercise, slip, edits, said):
    module = _mutant(tmp_path, practical, edits)
    ref = reference(load_exercises()[exercise].practical)
    # Caught is one failing check; a message asserted (said) needs them all.
    results = _grade(module, exercise, ref, first_failure=not said)
    _expect_caught(results, exercise, slip, said, "the reference")


def test_every_exercise_of_a_practical_with_mutants_has_three():
    practicals = {m[0] for m in MUTANTS}
    counts = {
        name: sum(m[1] == name for m in MUTANTS)
        for name, ex in load_exercises().items()
        if ex.practical in practicals
    }
    assert all(n >= 3 for n in counts.values()), counts


def test_every_exercise_of_a_practical_with_mutants_has_a_correct_variant():
    """Each exercise's checks also run on correct code written another way: a check that
    refuses a correct answer fails there, where the reference alone would pass it."""
    practicals = {m[0] for m in MUTANTS}
    with_variant = {v[1] for v in VARIANTS}
    missing = [
        name
        for name, ex in load_exercises().items()
        if ex.practical in practicals and name not in with_variant
    ]
    assert missing == []


TOLD = [m for m in MUTANTS if m[4]]


@pytest.mark.slow  # records the reference's answers to the exercise first: 5 to 40 s
@pytest.mark.parametrize(
    ("practical", "exercise", "slip", "edits", "said"),
    TOLD,
    ids=[f"{m[1]}-{m[2]}" for m in TOLD] or None,
)
def test_a_mutant_is_told_its_slip_in_a_handout(tmp_path, practical, exercise, slip, edits, said):
    """As a handout grades: against recorded answers, the student's earlier work called."""
    module = _mutant(tmp_path, practical, edits)
    results = _grade(module, exercise, _recorded(exercise))
    _expect_caught(results, exercise, slip, said, "recorded answers")


@pytest.mark.parametrize(
    ("practical", "exercise", "variant", "edits"),
    [
        pytest.param(
            *v[:4], id=f"{v[1]}-{v[2]}", marks=[pytest.mark.slow] if v[4].get("slow") else []
        )
        for v in VARIANTS
    ],
)
def test_a_correct_variant_passes_its_exercise(tmp_path, practical, exercise, variant, edits):
    module = _mutant(tmp_path, practical, edits)
    ex = load_exercises()[exercise]
    for where, ref in (
        ("the reference", reference(ex.practical)),
        ("recorded answers", _recorded(exercise)),
    ):
        graded = zip(ex.checks, _grade(module, exercise, ref), strict=True)
        failed = [
            f"{chk.name}: {message}" for chk, (status, message) in graded if status != "passed"
        ]
        assert not failed, f"{variant!r} against {where}: {failed}"
    # and the autograder's hidden checks that cover its targets (solutions/hidden/)
    for hidden in load_exercises(hidden=True).values():
        for chk in hidden.checks:
            if hidden.hidden and set(chk.covers) & set(ex.targets):
                try:
                    run_check(hidden, chk, module, reference(ex.practical), [vars(module)])
                except Exception as err:  # noqa: BLE001 - its message is the assertion's
                    pytest.fail(f"{variant!r}: hidden {hidden.name}/{chk.name}: {err}")
