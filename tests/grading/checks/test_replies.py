"""Declared reply shapes: every reply of a student's code fits the reference's reply to the same
request before any check computes with it (:mod:`m2l_nlp.grading.checks.replies`), and the
trusted grader holds to it: two small replies that broadcast to gigabytes fail their check in
words, and a submission that answers every call with hostile replies leaves the grader small.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from m2l_nlp.grading.checks import replies, wire
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.registry import CheckFailure

ROOT = Path(__file__).resolve().parents[3]
P2, P3 = "practical2_transformers", "practical3_translation"
F32 = np.float32


def _fails(got, want, match: str, axes=None, about: str = "") -> None:
    with pytest.raises(CheckFailure, match=match):
        replies.fit(got, want, "split_heads", axes, about)


# ------------------------------------------------------------------------------- fit's rules


def test_an_array_needs_the_exact_shape_and_the_message_names_both_with_the_axes():
    want = np.zeros((2, 4, 7, 8), F32)
    assert replies.fit(np.ones((2, 4, 7, 8), F32), want, "split_heads").shape == want.shape
    with pytest.raises(CheckFailure) as failure:
        replies.fit(np.zeros((20000, 1), F32), want, "split_heads", "(B, h, S, D/h)", "Heads.")
    assert str(failure.value) == (
        "split_heads returned shape (20000, 1) float32; the check expects (B, h, S, D/h) = "
        "(2, 4, 7, 8) float32. This check: Heads"
    )
    _fails(np.zeros((1, 20000), F32), want, r"expects shape \(2, 4, 7, 8\) float32$")
    _fails(np.zeros((2, 4, 7, 0), F32), want, r"returned shape \(2, 4, 7, 0\)")
    _fails(np.zeros((2, 4, 56), F32), want, "(B, h, S, D/h)", axes="(B, h, S, D/h)")


def test_real_numbers_interchange_complex_only_where_the_reference_is_complex():
    want = np.zeros((2, 3), F32)
    for dtype in (bool, np.int8, np.int64, np.uint32, np.float16, np.float64):
        assert replies.fit(np.zeros((2, 3), dtype), want, "f").dtype == dtype
    _fails(np.zeros((2, 3), np.complex64), want, r"returned shape \(2, 3\) complex64")
    assert replies.fit(np.zeros(2, F32), np.zeros(2, np.int32), "f").dtype == F32
    complex_want = np.zeros(2, np.complex64)
    for dtype in (np.complex128, np.float32, np.int32):
        replies.fit(np.zeros(2, dtype), complex_want, "f")
    _fails(1j, 0.5, "a Python complex")


def test_tuples_and_lists_interchange_with_the_same_length():
    want = (np.zeros(2, F32), np.zeros((2, 2), F32))
    got = [np.ones(2, F32), np.ones((2, 2), F32)]
    assert isinstance(replies.fit(got, want, "f"), list)  # the student's kind, for the check
    assert isinstance(replies.fit(tuple(got), list(want), "f"), tuple)
    _fails(got[:1], want, r"returned a list of 1 items; the check expects a tuple of 2 items")
    _fails(
        (np.zeros(2, F32), np.zeros((3, 2), F32)),
        want,
        r"shape \(3, 2\) float32 as item 1 of 2; the check expects \(B, S\) = \(2, 2\)",
        axes=("(B,)", "(B, S)"),
    )
    _fails(
        np.zeros(2, F32),
        want,
        r"returned shape \(2,\) float32; the check expects a tuple of 2 items \(\(B,\), \(B, S\)\)",
        axes=("(B,)", "(B, S)"),
    )


def test_dicts_need_the_same_keys_and_say_which_are_missing_or_extra():
    want = {"mha/linear": {"w": np.zeros((4, 4), F32), "b": np.zeros(4, F32)}, "norm": {}}
    got = {"mha/linear": {"w": np.ones((4, 4), F32), "b": np.ones(4, F32)}, "norm": {}}
    assert replies.fit(got, want, "init")["mha/linear"]["w"].sum() == 16
    _fails({"mha/linear": got["mha/linear"], "extra": {}}, want, r"missing 'norm'; extra 'extra'")
    _fails(
        {"mha/linear": {"w": np.ones((4, 5), F32), "b": np.ones(4, F32)}, "norm": {}},
        want,
        r"shape \(4, 5\) float32 as \['mha/linear'\]\['w'\]",
    )
    many = {f"k{i}": 1.0 for i in range(9)}
    _fails({}, many, r"missing 'k0', 'k1', 'k2', 'k3' and 5 more")
    _fails([1.0], {"a": 1.0}, r"returned a list of 1 items; the check expects a dict of 1 keys")


def test_python_scalars_and_zero_d_arrays_interchange():
    assert replies.fit(1.5, np.array(2.0, F32), "f") == 1.5
    assert replies.fit(np.array(2, np.int64), 0.5, "f").shape == ()
    assert replies.fit(True, 1, "f") is True
    _fails(np.zeros(1, F32), 0.5, r"returned shape \(1,\) float32; .* one number \(shape \(\)\)")
    _fails(2**70, 1, r"the integer 11805916207174113034\.\.\., too large")


def test_none_strings_and_opaque_values():
    _fails(None, np.zeros(3, F32), r"None \(did you forget a `return`\?\); .* shape \(3,\)")
    _fails(None, (1.0, 2.0), r"None \(did you forget a `return`\?\); .* a tuple of 2 items")
    _fails("text", np.zeros(3, F32), "returned a string")
    _fails(np.zeros(3, F32), "text", "expects a string")
    assert replies.fit("other", "text", "f") == "other"
    made = replies.fit(np.zeros(3, F32), wire.Opaque("Linear"), "f")
    assert isinstance(made, wire.Opaque)  # nothing a check can compute with
    assert isinstance(replies.fit([1.0], None, "f"), wire.Opaque)
    assert replies.fit(None, None, "f") is None
    _fails(wire.Opaque("Linear"), np.zeros(3, F32), r"returned <a Linear object>")
    assert isinstance(replies.raised_instead(np.zeros(3)), wire.Opaque)


def test_the_practicals_declare_the_axes_of_their_main_replies():
    name, axes = replies.declared("scaled_dot_product")
    assert name is None and axes == ("(..., Sq, Dv)", "(..., Sq, Sk)")
    name, axes = replies.declared("translation._block")
    assert name == "TranslationBlock" and axes[0] == "(B, T, D)"
    assert replies.declared("no_such_function") == (None, None)


# ------------------------------------------------------------- the namespaces that use it


class _Worker:
    """Answers requests from a function of the request, and counts them (no process)."""

    def __init__(self, answer):
        self.answer, self.asked = answer, 0

    def request(self, message):
        self.asked += 1
        return self.answer(message)


def _namespaces(student_answer, reference_answer):
    from m2l_nlp.grading.trusted.remote import RemoteNamespace

    reference = RemoteNamespace(_Worker(reference_answer))
    return RemoteNamespace(_Worker(student_answer), declared_by=reference, about="Doc."), reference


def test_every_student_reply_is_fitted_and_the_checks_own_question_costs_nothing():
    from m2l_nlp.grading.checks.tools import BuildSpec

    student, reference = _namespaces(
        lambda m: np.zeros((20000, 1), F32), lambda m: np.zeros((2, 3), F32)
    )
    with pytest.raises(CheckFailure, match=r"^f returned shape \(20000, 1\) float32; .* Doc$"):
        student.f(np.ones(3))
    with pytest.raises(CheckFailure, match=r"^MLPClassifier returned shape \(20000, 1\)"):
        student.run_haiku(BuildSpec("m2l_nlp.grading.practicals.practical1.models", "_mlp"), {}, ())
    assert reference.worker.asked == 2
    reference.f(np.ones(3))  # the check's own question: answered from the memo
    got = reference.f(np.ones(3))
    got[:] = 7  # a check that writes into its reply changes nothing kept
    assert reference.f(np.ones(3)).sum() == 0 and reference.worker.asked == 2
    reference.f(np.zeros(3))
    assert reference.worker.asked == 3


def test_where_the_reference_raises_the_students_value_is_opaque_and_errors_are_kept():
    def refuses(message):
        raise ValueError("too long")

    student, reference = _namespaces(lambda m: np.zeros(3, F32), refuses)
    assert isinstance(student.f(1), wire.Opaque)  # "yours raised nothing", says the check
    with pytest.raises(ValueError, match="too long"):
        reference.f(1)
    assert reference.worker.asked == 1


def test_the_reference_keeps_nothing_in_its_own_timed_pass_and_a_bounded_memo_after():
    from m2l_nlp.grading.trusted.remote import MEMO_ENTRIES, RemoteNamespace

    reference = RemoteNamespace(_Worker(lambda m: np.zeros(2, F32)))
    reference.f(1)
    reference.f(1)
    assert reference.worker.asked == 2 and not reference._memo  # its pass sets the limits
    RemoteNamespace(_Worker(lambda m: None), declared_by=reference)
    for i in range(MEMO_ENTRIES + 10):
        reference.f(i)
    assert len(reference._memo) == MEMO_ENTRIES


# ------------------------------------------------------------------- in the trusted grader

# Practical 3's block answers (20000, 1) and (1, 20000) in turn: 80 kB each, within every
# bound on one reply, 1.6 GB once a check subtracts one from the other.
BROADCASTING_BLOCK = """

_calls = [0]


class TranslationBlock(TranslationBlock):
    def __call__(self, *args, **kwargs):
        out, self_weights, cross_weights = super().__call__(*args, **kwargs)
        _calls[0] += 1
        wide = jnp.zeros((20000, 1)) if _calls[0] % 2 else jnp.zeros((1, 20000))
        return wide, self_weights, cross_weights
"""

# The same pair on its own, with nothing of the reference's computed: the sweep's block.
BROADCASTING_PAIR = """

_calls = [0]


class TranslationBlock(TranslationBlock):
    def __call__(self, *args, **kwargs):
        _calls[0] += 1
        wide = jnp.zeros((20000, 1)) if _calls[0] % 2 else jnp.zeros((1, 20000))
        return wide, wide, wide
"""

# A cycle of replies no check expects: each call of any target answers the next one.
HOSTILE = """

import numpy as _np

_TURN = [0]


def _hostile(*args, **kwargs):
    arrays = [a for a in (*args, *kwargs.values()) if hasattr(a, "shape")]
    shape = tuple(arrays[0].shape) if arrays else (2, 3)
    _TURN[0] += 1
    return _REPLIES[_TURN[0] % len(_REPLIES)](shape)


_REPLIES = (
    lambda s: _np.zeros((20000, 1), _np.float32),  # with the next: 1.6 GB once broadcast
    lambda s: _np.zeros((1, 20000), _np.float32),
    lambda s: _np.zeros((1 << 22, 0), _np.float32),  # zero-size, reduced to 16 MB
    lambda s: _np.zeros((0, *s), _np.float32),
    lambda s: _np.zeros((1 << 22,), _np.int8),  # as many elements as one reply may hold
    lambda s: _np.full(s, _np.nan, _np.float32),
    lambda s: _np.ones(s, _np.complex64),
    lambda s: _np.ones((*s, 2), _np.int32),  # never the right shape: ids would pass as ids
    lambda s: _np.full(s, 1e308, _np.float64),
    lambda s: (_np.zeros((20000, 1), _np.float32), _np.zeros((1, 20000), _np.float32)) * 2,
    lambda s: tuple(_np.full(s, _np.nan, _np.float32) for _ in range(4)),
    lambda s: [_np.zeros((1, 20000), _np.float32)] * 3,
    lambda s: None,
    lambda s: float("nan"),
    lambda s: "hostile",
    lambda s: {"a": _np.zeros((20000, 1), _np.float32)},
)
"""


def _hostile_file(practical: str, targets: list[str]) -> str:
    """The solution of ``practical`` with every target (and every method of a target class)
    answering :data:`HOSTILE`'s replies."""
    from m2l_nlp.impl import load_practical

    solution = load_practical(practical, "solutions")
    parts = [(ROOT / "solutions" / f"{practical}.py").read_text(), HOSTILE]
    for name in dict.fromkeys(targets):
        target = getattr(solution, name)
        if not isinstance(target, type):
            parts.append(f"def {name}(*args, **kwargs):\n    return _hostile(*args, **kwargs)\n")
            continue
        methods = ["__call__"] + [
            m for m, v in vars(target).items() if callable(v) and not m.startswith("_")
        ]
        body = "".join(
            f"    def {m}(self, *args, **kwargs):\n        return _hostile(*args, **kwargs)\n\n"
            for m in dict.fromkeys(methods)
        )
        parts.append(f"class {name}({name}):\n{body}")
    return "\n\n".join(parts)


def _grade(submission: Path, results: Path) -> tuple[dict, str, float]:
    """Grade ``submission`` as the autograder does (every practical, hidden checks included,
    student code as this user): its results, the grader's log and its peak memory in MB."""
    run = subprocess.run(
        [sys.executable, "-m", "m2l_nlp.grading.trusted", str(submission), str(results)],
        env={**os.environ, "M2L_GRADER_USER": "root"},  # no other user to run as here
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    found = re.search(r"peak memory: the grader (\d+) MB", run.stdout)
    assert run.returncode == 0 and found, run.stdout[-3000:] + run.stderr[-3000:]
    return json.loads(results.read_text()), run.stdout, float(found[1])


def _tests(data: dict) -> dict[str, dict]:
    return {t["name"]: t for t in data["tests"]}


@pytest.mark.slow
def test_hostile_replies_to_every_check_fail_cleanly_and_the_grader_stays_small(tmp_path):
    """Every target of every practical, hidden exercises' included, answers each call with the
    next of a cycle of hostile replies (huge within the wire's bounds, broadcasting pairs,
    zero-size, complex and integer dtypes, NaN, tuples, None, strings): every check of every
    exercise fails in words, and the root grader's own peak memory stays under 1 GiB."""
    exercises = load_exercises(ROOT, hidden=True)
    submission = tmp_path / "hostile"
    submission.mkdir()
    targets: dict[str, list[str]] = {}
    for ex in exercises.values():
        targets.setdefault(ex.practical, []).extend(ex.targets)
    for practical, names in targets.items():
        (submission / f"{practical}.py").write_text(_hostile_file(practical, names))
    with open(submission / f"{P3}.py", "a") as handle:  # round three's attack, as it came
        handle.write(BROADCASTING_PAIR)
    start = time.monotonic()
    data, log, peak = _grade(submission, tmp_path / "results.json")
    print(f"hostile sweep: the grader's peak {peak:.0f} MB in {time.monotonic() - start:.0f} s")
    assert "could not grade" not in json.dumps(data), log[-3000:]
    shown = _tests(data)
    for ex in exercises.values():
        test = shown[ex.name + (" (hidden)" if ex.hidden else "")]
        head = test["output"].splitlines()[0]
        assert test["score"] == 0, (ex.name, test["output"])
        assert re.fullmatch(rf"\*\*(failed|error)\*\*: 0/{len(ex.checks)} checks passed.*", head), (
            ex.name,
            test["output"],
        )
        for chk in ex.checks:  # each check named, with a message of its own or shared
            assert chk.name in test["output"], (ex.name, chk.name, test["output"])
        assert "```text\n\n```" not in test["output"], (ex.name, test["output"])
    # before round three, the root grader subtracted the pair's two replies (3.3 GB)
    assert re.search(
        r"TranslationBlock returned shape \((20000, 1|1, 20000)\) float32 as item 0 of 3; the "
        r"check expects \(B, T, D\) = \(2, 5, 12\) float32\.",
        shown["translation_block"]["output"],
    ), shown["translation_block"]["output"]
    assert peak < 1024, log[-2000:]


def _worker(folder: Path, practical: str):
    from m2l_nlp.grading.trusted.remote import Worker

    worker = Worker(folder, None)
    worker.limit, worker.deadline = 120.0, time.monotonic() + 120
    worker.request({"op": "load", "path": str(folder / f"{practical}.py"), "name": practical})
    worker.deadline = None
    return worker


def test_the_broadcasting_pair_fails_its_check_before_any_arithmetic(tmp_path):
    """The check that subtracts two replies of the block gets neither: the first that does
    not fit the reference's reply fails it, in words, and nothing large is allocated here."""
    import tracemalloc

    from m2l_nlp.grading.checks.runner import run_check
    from m2l_nlp.grading.trusted.remote import RemoteNamespace

    for practical in (P2, P3):
        (tmp_path / f"{practical}.py").write_text(
            (ROOT / "solutions" / f"{practical}.py").read_text()
        )
    with open(tmp_path / f"{P3}.py", "a") as handle:
        handle.write(BROADCASTING_BLOCK)
    exercise = load_exercises(ROOT)["translation_block"]
    check = next(c for c in exercise.checks if c.name == "translation_block_ignores_source_padding")
    reference = RemoteNamespace(_worker(ROOT / "solutions", P3))
    reference.stub_lines = ()  # as the grader's: the solution is no stub
    student = _worker(tmp_path, P3)
    try:
        declared = RemoteNamespace(student, declared_by=reference, about=check.func.__doc__)
        tracemalloc.start()
        with pytest.raises(CheckFailure) as failure:
            run_check(exercise, check, declared, reference, [])
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert re.fullmatch(
            r"TranslationBlock returned shape \((20000, 1|1, 20000)\) float32 as item 0 of 3; the "
            r"check expects \(B, T, D\) = \(2, 5, 12\) float32\. This check: Changing the "
            r"encoder's output at the source's padding changes nothing, and every "
            r"cross-attention row sums to 1 over the source",
            str(failure.value),
        ), str(failure.value)
        assert peak < 64 << 20, peak  # NumPy's arrays are traced: 1.6 GB each, unchecked
        # the reference's memo: the check's own question was answered once
        assert 0 < len(reference._memo) <= 8
    finally:
        student.kill()
        reference.worker.kill()
