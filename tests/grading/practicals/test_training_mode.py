"""The training-mode checks against slips of dropout: each mutant of
``tests/mutants/training/<practical>.py`` (``MUTANTS``, as in test_mutants.py) must fail
its exercise's training-mode check, and each variant (``VARIANTS``: correct modules that draw
their dropout keys in another order) must pass every check of its exercise, against the
reference and against its recorded answers (a handout's). Slow: each compiles models in
training mode on thousands of copies of their inputs."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from test_mutants import _grade, _mutant, _recorded

from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.runner import outcome, reference, run_check

FOLDER = Path(__file__).resolve().parents[3] / "tests" / "mutants" / "training"
TRAINING_CHECK = "training_matches_reference"  # the end of every training-mode check's name


def _cases(kind: str) -> list[tuple[str, str, str, list[tuple[str, str]]]]:
    found = []
    for path in sorted(FOLDER.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"training_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for exercise, cases in getattr(module, kind).items():
            found += [(path.stem, exercise, name, edits) for name, edits in cases]
    return found


MUTANTS, VARIANTS = _cases("MUTANTS"), _cases("VARIANTS")


def test_every_exercise_with_dropout_has_its_cases():
    with_check = {
        name
        for name, ex in load_exercises().items()
        if any(chk.name.endswith(TRAINING_CHECK) for chk in ex.checks)
    }
    assert {m[1] for m in MUTANTS} == with_check
    assert {v[1] for v in VARIANTS} == with_check


@pytest.mark.slow
@pytest.mark.parametrize(
    ("practical", "exercise", "slip", "edits"), MUTANTS, ids=[f"{m[1]}-{m[2]}" for m in MUTANTS]
)
def test_a_dropout_slip_fails_the_training_check(tmp_path, practical, exercise, slip, edits):
    module = _mutant(tmp_path, practical, edits)
    ex = load_exercises()[exercise]
    (chk,) = (c for c in ex.checks if c.name.endswith(TRAINING_CHECK))
    try:
        run_check(ex, chk, module, reference(ex.practical), [vars(module)])
        err = None
    except Exception as caught:  # noqa: BLE001 - its status is what is tested
        err = caught
    status, message = outcome(err, {module.__file__})
    assert status == "failed", f"{slip!r} was not caught: {status}: {message}"
    assert "in training mode" in message


@pytest.mark.slow
@pytest.mark.parametrize(
    ("practical", "exercise", "variant", "edits"),
    VARIANTS,
    ids=[f"{v[1]}-{v[2]}" for v in VARIANTS],
)
def test_keys_drawn_in_another_order_pass(tmp_path, practical, exercise, variant, edits):
    module = _mutant(tmp_path, practical, edits)
    ex = load_exercises()[exercise]
    for where, ref in (
        ("the reference", reference(ex.practical)),
        ("the recorded answers", _recorded(exercise)),
    ):
        results = _grade(module, exercise, ref)
        failed = [
            f"{chk.name}: {message}"
            for chk, (status, message) in zip(ex.checks, results, strict=True)
            if status != "passed"
        ]
        assert not failed, f"{variant!r} against {where}: {failed}"


@pytest.mark.slow
def test_a_temperature_lost_under_top_k_is_caught(tmp_path):
    # each alone is right: the temperature without top_k, top_k at temperature 1
    module = _mutant(
        tmp_path,
        "practical3_translation",
        [
            (
                "scaled = jnp.where(scaled < kth, -jnp.inf, scaled)",
                "scaled = jnp.where(scaled < kth, -jnp.inf, logits)",
            )
        ],
    )
    results = dict(
        zip(
            (c.name for c in load_exercises()["sample_next"].checks),
            _grade(module, "sample_next", reference("practical3_translation")),
            strict=True,
        )
    )
    status, message = results.pop("sample_temperature_with_top_k")
    assert status == "failed"
    assert "the temperature is lost when top_k is set" in message
    assert {status for status, _ in results.values()} == {"passed"}


@pytest.mark.slow
def test_a_keep_probability_given_as_the_rate_is_caught(tmp_path):
    """At p=0.5 the rate and the keep probability are one number: the dropout check also
    compares a low rate where the student's masks are the reference's."""
    module = _mutant(
        tmp_path,
        "practical2_transformers",
        [
            (
                "            hidden = hk.dropout(hk.next_rng_key(), self.p_dropout, hidden)\n",
                "            hidden = hk.dropout(hk.next_rng_key(), 1 - self.p_dropout, hidden)\n",
            )
        ],
    )
    ex = load_exercises()["positionwise_feed_forward"]
    graded = _grade(module, ex.name, reference(ex.practical))
    results = dict(zip((c.name for c in ex.checks), graded, strict=True))
    status, message = results["ffn_dropout"]
    assert status == "failed" and "not the probability of keeping" in message, results
