"""Tests of m2l_nlp.grading.checks.runner.

Gates on every target: trivial code in place of any target of any exercise (hidden ones
included) earns nothing, all or nothing and under partial credit alike. The reference, in
the same namespace machinery, earns every point (so the variants, not the setup, fail).

Slow (about 25 s on 2 cores, most of it the reference's own pass): each variant is a new
function or class, compiled anew.

Then, quick: the hints of describe_error, and blame_earlier's notes on earlier exercises.
"""

from __future__ import annotations

import dataclasses
import inspect
import traceback
import types
from collections.abc import Callable

import jax
import jax.numpy as jnp
import pytest

from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.registry import Check, Exercise
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    ExerciseResult,
    StudentError,
    blame_earlier,
    describe_error,
    outcome,
    reference,
    run_check,
)


def _zeros(out):
    return jax.tree_util.tree_map(jnp.zeros_like, out)


def _function_variants(ref_fn: Callable) -> dict[str, Callable]:
    def zeros(*args, **kwargs):
        return _zeros(ref_fn(*args, **kwargs))

    def the_input(*args, **kwargs):
        return args[0]

    variants = {"zeros": zeros, "the input": the_input}
    if ref_fn.__name__ == "scaled_dot_product":

        def uniform(q, k, v, mask=None):  # every visible key weighted alike
            weights = jnp.ones((*q.shape[:-1], k.shape[-2]), q.dtype)
            if mask is not None:
                weights = weights * jnp.broadcast_to(mask, weights.shape)
            weights = weights / jnp.maximum(weights.sum(-1, keepdims=True), 1)
            return weights @ v, weights

        variants["uniform"] = uniform
    return variants


def _class_variants(ref_cls: type) -> dict[str, type]:
    class Zeros(ref_cls):
        def __call__(self, *args, **kwargs):
            return _zeros(super().__call__(*args, **kwargs))

    class TheInput(ref_cls):
        def __call__(self, *args, **kwargs):
            out = super().__call__(*args, **kwargs)
            first = out[0] if isinstance(out, tuple) else out
            x = args[0] if args[0].shape == first.shape else jnp.zeros_like(first)
            return (x, *out[1:]) if isinstance(out, tuple) else x

    variants = {"zeros": Zeros, "the input": TheInput}
    if ref_cls.__name__ == "MultiheadAttention":

        class Uniform(ref_cls):  # queries of zeros: every visible key weighted alike
            def __init__(self, *args, **kwargs):
                super().__init__(*args, **kwargs)
                projection = self.proj_q
                self.proj_q = lambda x: jnp.zeros_like(projection(x))

        variants["uniform"] = Uniform
    for variant in variants.values():
        variant.__name__ = ref_cls.__name__  # haiku names its parameters after the class
    return variants


def _variants(ref, target: str) -> dict[str, object]:
    value = getattr(ref, target)
    return _class_variants(value) if inspect.isclass(value) else _function_variants(value)


def _run(ex: Exercise, chk: Check, student, ref) -> CheckResult:
    try:
        run_check(ex, chk, student, ref, [vars(student)])
        err = None
    except Exception as caught:  # noqa: BLE001 - classified as the grader does
        err = caught
    status, message = outcome(err, {student.__file__})
    return CheckResult(ex.name, chk.name, status, message)


def _grade(ex: Exercise, student, ref, *, gates_first: bool = False) -> ExerciseResult:
    """``ex`` graded as the local front ends grade it. ``gates_first``: the gates run first,
    and once one fails the other checks count as passed without running (the most the
    submission could earn, so nothing earned then is nothing earned at all; and less time)."""
    results = {chk.name: _run(ex, chk, student, ref) for chk in ex.checks if chk.gate}
    a_gate_failed = any(r.status != "passed" for r in results.values())
    for chk in ex.checks:
        if chk.name in results:
            continue
        if gates_first and a_gate_failed:
            results[chk.name] = CheckResult(ex.name, chk.name, "passed", "not run: counted passed")
        else:
            results[chk.name] = _run(ex, chk, student, ref)
    return ExerciseResult(ex, [results[chk.name] for chk in ex.checks])


def _namespace(ref, **replaced) -> types.ModuleType:
    module = types.ModuleType("trivial_submission")
    module.__dict__.update({k: v for k, v in vars(ref).items() if not k.startswith("__")})
    module.__dict__.update(replaced)
    module.__file__ = "trivial_submission.py"
    return module


def _points(result: ExerciseResult) -> tuple[float, float]:
    """(all or nothing, partial credit)."""
    ex = result.exercise
    return tuple(
        ExerciseResult(dataclasses.replace(ex, partial=partial), result.checks).points
        for partial in (False, True)
    )


def _cases() -> list[tuple[str, str, str]]:
    exercises = load_exercises(hidden=True)
    return [
        (ex.name, target, variant)
        for ex in exercises.values()
        for target in ex.targets
        for variant in _variants(reference(ex.practical), target)
    ]


@pytest.fixture(scope="module")
def exercises():
    return load_exercises(hidden=True)


@pytest.mark.slow
def test_the_reference_in_the_same_machinery_earns_every_point(exercises):
    for ex in exercises.values():
        ref = reference(ex.practical)
        assert _points(_grade(ex, _namespace(ref), ref)) == (ex.points, ex.points), ex.name


@pytest.mark.slow
@pytest.mark.parametrize(("name", "target", "variant"), _cases())
def test_trivial_code_for_any_target_earns_nothing(exercises, name, target, variant):
    ex = exercises[name]
    ref = reference(ex.practical)
    student = _namespace(ref, **{target: _variants(ref, target)[variant]})
    result = _grade(ex, student, ref, gates_first=True)
    said = [(c.check, c.status) for c in result.checks]
    assert _points(result) == (0.0, 0.0), said
    # Each gate that says it compares this target rejects it: its covers are honest.
    failed = {c.check for c in result.checks if c.status != "passed"}
    covering = {c.name for c in ex.checks if c.gate and target in c.covers}
    assert covering and covering <= failed, said


@pytest.mark.parametrize(
    "said",
    [
        "Incompatible types for matmul arguments: float32[2,3,4,8] and float32[8,6,3,2]",
        "Incompatible shapes for matmul arguments: (2, 3, 4, 8) and (8, 6, 3, 2)",  # Colab's jax
    ],
    ids=["jax 0.10", "jax 0.7.2"],
)
def test_the_hint_for_k_T_does_not_depend_on_the_jax_version(said):
    """Each JAX words a matmul of mismatched shapes its own way; the hint must follow both."""
    message = describe_error(ValueError(said), set())
    assert message.endswith("swap only the last two, jnp.swapaxes(k, -1, -2).")


def test_a_dropped_is_train_is_named_from_another_process_too():
    """The trusted grader's worker sends back the frames' lines only: the student's line that
    calls a ``__call__`` of theirs without is_train is named, not the dropout it reaches."""
    path = "/submission/practical2_transformers.py"
    call = "x = self.norm_2(x + dropout(self.feed_forward(x)))"
    frames = [
        traceback.FrameSummary(path, 333, "__call__", line=call),
        traceback.FrameSummary("/venv/site-packages/haiku/module.py", 9, "wrapped", line="f()"),
        traceback.FrameSummary(
            path, 272, "__call__", line="h = hk.dropout(hk.next_rng_key(), p, h)"
        ),
    ]
    said = (
        "You must pass a non-None PRNGKey to init and/or apply if you make use of random numbers."
    )
    message = describe_error(StudentError("MissingRNGError", said, frames), {path})
    assert f"line 333: `{call}`)\nHint: this line calls a sub-module without is_train" in message


def test_a_note_names_a_failing_earlier_exercise_but_never_a_hidden_one():
    """A failed exercise that calls earlier work is told which earlier exercise fails; a
    hidden one failing says nothing (a visible note would tell how the hidden one went)."""
    earlier = Exercise("attention", "p", 10, ("attend",))
    hidden = Exercise("attention_beyond", "p", 10, ("attend",), hidden=True)
    later = Exercise("decoder", "p", 10, ("Decoder",), uses=("attend",))

    def graded(ex: Exercise, status: str) -> ExerciseResult:
        return ExerciseResult(ex, [CheckResult(ex.name, "c", status)])

    for first, named in ((earlier, True), (hidden, False)):
        results = [graded(first, "failed"), graded(later, "failed")]
        blame_earlier(results)
        assert ("attention" in results[1].note) is named, results[1].note
        if named:
            assert results[1].note.startswith("note: this exercise calls your attend")
