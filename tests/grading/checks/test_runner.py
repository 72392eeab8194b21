"""Tests of m2l_nlp.grading.checks.runner.

Gates on every target: trivial code in place of any target of any exercise (hidden ones
included) earns nothing, all or nothing and under partial credit alike. The reference, in
the same namespace machinery, earns every point (so the variants, not the setup, fail).

Slow (about 25 s on 2 cores, most of it the reference's own pass): each variant is a new
function or class, compiled anew.

Then, quick: the engine's parts one by one (a check's context, the import errors in words,
the binding of earlier work, stubs not started, the verdicts and the points), the hints of
describe_error, and blame_earlier's notes on earlier exercises.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import os
import traceback
import types
from collections.abc import Callable
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from m2l_nlp.authoring.stubs import make_stub
from m2l_nlp.grading.checks import expected
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.registry import Check, CheckFailure, Exercise
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    Context,
    ExerciseResult,
    PracticalError,
    StudentError,
    StudentNamespace,
    blame_earlier,
    describe_error,
    globals_of,
    import_error_message,
    isolated,
    judge_check,
    outcome,
    reference,
    run_check,
    source_of,
    stub_lines_of,
    student_files_of,
    untouched,
)
from m2l_nlp.grading.checks.tools import key_for


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


# --------------------------------------------------------------------------------------------
# The engine's parts, quick


def _check(name: str, func: Callable = lambda ctx: None, *, gate: bool = False, weight=1.0):
    return Check(name, func, name, gate, weight)


def _exercise(*checks: Check, targets=("f",), uses=(), partial=False) -> Exercise:
    return Exercise("ex", "p", 6.0, targets, uses=uses, checks=list(checks), partial=partial)


def _file_module(tmp_path: Path, source: str, name: str = "submission") -> types.ModuleType:
    """``source`` imported from ``tmp_path/<name>.py`` (not kept in sys.modules)."""
    path = tmp_path / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_context_draws_the_same_inputs_each_run_and_knows_when_it_records():
    ex = _exercise(_check("c"), _check("d"))
    ref = types.ModuleType("ref")
    ctx = Context(None, ref, ex, ex.checks[0])
    first = ctx.rng().standard_normal(4)
    np.testing.assert_array_equal(ctx.rng().standard_normal(4), first)
    assert not np.allclose(ctx.rng("salt").standard_normal(4), first)
    other_check = Context(None, ref, ex, ex.checks[1])
    assert not np.allclose(other_check.rng().standard_normal(4), first)
    np.testing.assert_array_equal(ctx.key(3), key_for(3))
    assert not np.array_equal(ctx.key(3), ctx.key(4))
    assert ctx.recording is False
    assert Context(None, expected.Recorder(ref), ex, ex.checks[0]).recording is True


@pytest.mark.parametrize(
    ("source", "said"),
    [
        ("def f(:\n    pass\n", ["submission.py, line 1: syntax error:", "Fix it, then run"]),
        (
            "import practical1_baselines_elsewhere\n",
            ["line 1", "ModuleNotFoundError", "builds on your practical1_baselines_elsewhere"],
        ),
        ("from math import no_such_name\n", ["line 1", "ImportError", "does not exist"]),
        (
            "x = 1\ny = x / 0\n",
            ["submission.py, line 2: ZeroDivisionError", "    y = x / 0", "module level"],
        ),
    ],
    ids=["syntax", "an earlier practical", "a bad import", "an error at module level"],
)
def test_an_import_error_is_told_with_its_file_line_and_what_to_do(tmp_path, source, said):
    with pytest.raises(Exception) as caught:
        _file_module(tmp_path, source)
    message = import_error_message(caught.value, str(tmp_path / "submission.py"))
    for words in said:
        assert words in message, message
    assert message.endswith("then run pytest again.")


def test_isolated_binds_names_and_restores_them_even_on_an_error():
    mine, other = {"a": 1, "keep": 0}, {}
    with pytest.raises(KeyError), isolated([mine, other], {"a": 2, "b": 3}):
        assert mine == {"a": 2, "keep": 0, "b": 3} and other == {"a": 2, "b": 3}
        raise KeyError("inside")
    assert mine == {"a": 1, "keep": 0} and other == {}


def test_the_globals_and_files_of_a_students_objects_are_found(tmp_path):
    module = _file_module(
        tmp_path,
        "def f():\n    return 1\n\nclass C:\n    def m(self):\n        return 2\n\n"
        "class Empty:\n    pass\n",
    )
    found = vars(module)
    assert globals_of(module) is found
    assert globals_of(module.f) is found and globals_of(module.C) is found
    assert globals_of(module.C().m) is found  # a bound method, through its function
    assert globals_of(module.Empty) is None and globals_of(3) is None
    objects = {"f": module.f, "C": module.C, "n": 3, "abs": abs}
    assert student_files_of(objects) == {os.path.abspath(module.__file__)}


def test_the_stub_lines_come_from_the_reference_or_its_records():
    ref = reference("practical2_transformers")
    lines = stub_lines_of(ref)
    assert any(line.startswith('raise NotImplementedError("scaled_dot_product:') for line in lines)
    assert all(line.startswith('raise NotImplementedError("') for line in lines)
    recorded = types.SimpleNamespace(stub_lines=('raise NotImplementedError("f: write f")',))
    assert stub_lines_of(recorded) == recorded.stub_lines
    assert stub_lines_of(types.ModuleType("no_file")) == ()


def test_source_is_asked_of_the_process_that_runs_the_code_where_there_is_one(tmp_path):
    module = _file_module(tmp_path, "def f():\n    return 1\n")
    assert source_of(module, "f") == "def f():\n    return 1\n"

    class Remote:
        def source(self, name: str) -> str:
            return f"the worker's source of {name}"

    assert source_of(Remote(), "f") == "the worker's source of f"


def test_an_exercise_is_untouched_only_while_every_target_holds_its_stub(tmp_path, SOLUTION):
    ref = reference("practical2_transformers")
    ex = load_exercises()["scaled_dot_product"]
    stub = _file_module(tmp_path, make_stub(SOLUTION, "practical2_transformers.py"), "stub")
    said = untouched(ex, StudentNamespace(vars(stub), "stub.py"), ref)
    assert said is not None and said.startswith("scaled_dot_product:"), said
    solved = _file_module(tmp_path, SOLUTION, "solved")
    assert untouched(ex, StudentNamespace(vars(solved), "solved.py"), ref) is None
    # a stub with its target gone or without recorded stub lines: the checks run and say so
    assert untouched(ex, StudentNamespace({}, "empty.py"), ref) is None
    assert untouched(ex, StudentNamespace(vars(stub), "stub.py"), types.ModuleType("r")) is None


def test_run_check_binds_earlier_work_to_the_references_only_while_it_runs(tmp_path):
    student = _file_module(
        tmp_path, "def helper():\n    return 'mine'\n\ndef f():\n    return helper()\n"
    )
    ref = types.ModuleType("ref")
    ref.helper = lambda: "the reference's"
    seen = []

    def func(ctx):
        seen.append((ctx.student.f(), jax.config.jax_default_matmul_precision))

    ex = _exercise(_check("c", func), uses=("helper",))
    run_check(ex, ex.checks[0], student, ref, [vars(student)])
    assert seen == [("the reference's", "highest")]
    assert student.f() == "mine"
    # recorded answers (no reference module): the student's own earlier work runs
    run_check(ex, ex.checks[0], student, expected.Recorder(ref), [vars(student)])
    assert seen[-1] == ("mine", "highest")

    def asks_for_more(ctx):
        ctx.student.g()

    missing = _exercise(_check("c", asks_for_more))
    with pytest.raises(CheckFailure, match="has no `g`: keep the names"):
        run_check(missing, missing.checks[0], student, ref, [vars(student)])


def test_run_check_does_not_run_the_checks_of_an_exercise_not_started(tmp_path, SOLUTION):
    ref = reference("practical2_transformers")
    stub = _file_module(tmp_path, make_stub(SOLUTION, "practical2_transformers.py"), "stub")
    ran = []
    ex = dataclasses.replace(
        load_exercises()["scaled_dot_product"], checks=[_check("c", ran.append)]
    )
    with pytest.raises(NotImplementedError, match="^scaled_dot_product:"):
        run_check(ex, ex.checks[0], stub, ref, [vars(stub)])
    assert ran == []


def test_each_kind_of_outcome_has_its_status_and_words():
    assert outcome(None, set()) == ("passed", "")
    assert outcome(NotImplementedError("f: write f"), set()) == (
        "not started",
        "not started: f: write f",
    )
    assert outcome(PracticalError("x.py, line 1: bad"), set()) == ("error", "x.py, line 1: bad")
    assert outcome(CheckFailure("off by one"), set()) == ("failed", "off by one")
    status, said = outcome(ZeroDivisionError("division by zero"), set())
    assert status == "failed" and said.startswith("your code raised ZeroDivisionError: division")


def test_judge_check_turns_whatever_a_check_raises_into_a_verdict(tmp_path):
    student = _file_module(tmp_path, "def f():\n    return 1 / 0\n")
    ref = types.ModuleType("ref")

    def wrong(ctx):
        raise CheckFailure("f should be 2")

    def crashes(ctx):
        ctx.student.f()

    files = {os.path.abspath(student.__file__)}
    verdicts = [
        judge_check(_exercise(chk), chk, student, ref, [vars(student)], files)
        for chk in (_check("ok"), _check("wrong", wrong), _check("crashes", crashes))
    ]
    assert verdicts[:2] == [("passed", ""), ("failed", "f should be 2")]
    status, said = verdicts[2]
    assert status == "failed" and "ZeroDivisionError" in said
    assert f"({student.__file__}, line 2: `return 1 / 0`)" in said  # the student's line


def test_points_worth_and_messages_follow_the_weights_and_the_gate():
    gate, small, big = _check("g", gate=True), _check("a"), _check("b", weight=2.0)

    def result(partial: bool, **statuses: str) -> ExerciseResult:
        ex = _exercise(gate, small, big, partial=partial)
        checks = [
            CheckResult("ex", name, statuses.get(name, "passed"), f"{name} is wrong")
            for name in "gab"
        ]
        return ExerciseResult(ex, checks, note="note: first")

    assert result(True).points == 6.0 and result(False).points == 6.0
    assert result(False, b="failed").points == 0.0  # all or nothing
    assert result(True, b="failed").points == 3.0  # weights 1 + 1 of 4
    assert result(True, a="failed").points == 4.5
    assert result(True, g="failed").points == 0.0  # the gate: nothing without it

    partial = result(True, b="failed")
    assert partial.worth("b") == " (3 points)"
    assert partial.worth("g") == " (1.5 points; the exercise's other points need it)"
    assert result(False, b="failed").worth("b") == ""
    assert partial.messages() == ["note: first", "[b] (3 points) b is wrong"]
    assert str(partial).splitlines() == [
        "ex: failed (2/3 checks passed, 3/6 points)",
        "  note: first",
        "  [b] (3 points) b is wrong",
    ]
