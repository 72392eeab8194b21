"""Tests of the auto-grader: stub generator, checks (on mutated solutions), plugin, check().

Mutation tests grade in-process copies of the reference solution with one realistic student
mistake each, and require that some check of the exercise fails; correct alternatives must
pass every check. A few subprocess runs cover what only a real ``pytest`` run shows: the
score table, exit codes, ``results.json``, import errors and timeouts.
"""

from __future__ import annotations

import importlib.util
import itertools
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import traceback
from pathlib import Path

import numpy as np
import pytest

import m2l_nlp
from m2l_nlp.authoring import stubs
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.registry import CheckFailure, Exercise, exercise
from m2l_nlp.grading.checks.report import score_table
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
from m2l_nlp.grading.checks.tools import expect_array, expect_close, expect_rows_sum_to_one
from m2l_nlp.impl import repo_root

ROOT = repo_root()
P2 = "practical2_transformers"
SOLUTION = (ROOT / "solutions" / f"{P2}.py").read_text(encoding="utf-8")
_counter = itertools.count()


# ------------------------------------------------------------------------------------------
# stub generator


def test_stub_replaces_regions_at_their_indentation():
    source = textwrap.dedent(
        '''\
        import math


        def area(r: float) -> float:
            """Area of a circle."""
            # BEGIN SOLUTION
            return math.pi * r**2
            # END SOLUTION


        class Model:
            def __init__(self):
                self.size = 3  # kept: fixes the parameter names

            def __call__(self, x):
                # BEGIN SOLUTION
                def helper(y):
                    return y + 1

                return helper(x)
                # END SOLUTION

            def extra(self):
                # BEGIN SOLUTION
                return 1
                # END SOLUTION
        '''
    )
    stub = stubs.make_stub(source, "demo.py")
    assert '    """Area of a circle."""\n    # YOUR CODE HERE\n' in stub
    assert '    raise NotImplementedError("area: not implemented yet")\n' in stub
    assert '        raise NotImplementedError("Model: not implemented yet")\n' in stub
    assert '        raise NotImplementedError("Model.extra: not implemented yet")\n' in stub
    assert "self.size = 3  # kept" in stub
    assert "math.pi" not in stub and "helper" not in stub and "SOLUTION" not in stub
    namespace: dict = {}
    exec(compile(stub, "demo.py", "exec"), namespace)  # the stub imports cleanly
    with pytest.raises(NotImplementedError, match="Model.extra: not implemented yet"):
        namespace["Model"]().extra()


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n    # END SOLUTION\n", 3, "nested"),
        ("    # BEGIN SOLUTION\n    return 1\n", 2, "never closed"),
        ("    return 1\n    # END SOLUTION\n", 3, "without a matching"),
    ],
)
def test_bad_markers_fail_with_file_and_line(body, line, words):
    source = "def f():\n" + body
    with pytest.raises(stubs.MarkerError, match=rf"^bad\.py:{line}: .*{words}"):
        stubs.make_stub(source, "bad.py")


def test_marker_outside_a_function_is_an_error():
    with pytest.raises(stubs.MarkerError, match=r"bad\.py:1: .*outside any function"):
        stubs.make_stub("# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n", "bad.py")


def test_stub_cli_writes_then_check_detects_drift(tmp_path, capsys):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "__init__.py").write_text("")
    (sol / "p.py").write_text("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n")
    args = ["--solutions", str(sol), "--exercises", str(ex)]
    assert stubs.main([*args, "--check"]) == 1  # nothing written yet
    assert stubs.main(args) == 0
    assert (ex / "__init__.py").read_text() == ""
    assert "NotImplementedError" in (ex / "p.py").read_text()
    assert stubs.main([*args, "--check"]) == 0
    (sol / "p.py").write_text("def f():\n    # BEGIN SOLUTION\n    return 2\n    # END SOLUTION\n")
    assert stubs.main([*args, "--check"]) == 0  # same stub: the solution body is hidden
    (sol / "p.py").write_text("def g():\n    # BEGIN SOLUTION\n    return 2\n    # END SOLUTION\n")
    capsys.readouterr()
    assert stubs.main([*args, "--check"]) == 1
    assert "p.py" in capsys.readouterr().err
    (sol / "p.py").write_text("def g():\n    # BEGIN SOLUTION\n    return 2\n")
    assert stubs.main(args) == 2
    assert "p.py:2" in capsys.readouterr().err


def test_the_generator_never_overwrites_a_students_work(tmp_path, capsys):
    """A stub edited by hand is refused, named; --force saves it as .bak first; a stub that
    is still what the generator wrote is regenerated as usual (the instructor's case)."""
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    for name in ("p", "q"):
        (sol / f"{name}.py").write_text(
            f"def {name}():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"
        )
    args = ["--solutions", str(sol), "--exercises", str(ex)]
    assert stubs.main(args) == 0
    student = (ex / "p.py").read_text().replace("raise NotImplementedError", "return 1  #")
    (ex / "p.py").write_text(student)
    for name in ("p", "q"):  # the instructor changes both solutions
        (sol / f"{name}.py").write_text(
            f"def {name}(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
        )
    capsys.readouterr()
    assert stubs.main(args) == 1
    err = capsys.readouterr().err
    assert "p.py" in err and "q.py" not in err and "FORCE=1" in err
    assert (ex / "p.py").read_text() == student  # nothing was written, q.py neither
    assert "def q():" in (ex / "q.py").read_text()
    assert stubs.main([*args, "--force"]) == 0
    assert (ex / "p.py.bak").read_text() == student
    assert "def p(x):" in (ex / "p.py").read_text() and "def q(x):" in (ex / "q.py").read_text()
    assert stubs.main(args) == 0  # regenerated stubs are the generator's again


def test_committed_exercises_match_the_solutions():
    plan = stubs.planned_stubs(ROOT / "solutions", ROOT / "exercises")
    assert stubs.drifted(plan) == [], "run `make exercises` and commit exercises/"


# ------------------------------------------------------------------------------------------
# assertions: messages in words


def test_messages_say_what_is_wrong():
    with pytest.raises(CheckFailure, match=r"sum to 1\.37 at index \(0, 1\)"):
        w = np.array([[0.5, 0.5], [1.0, 0.37]])
        expect_rows_sum_to_one(w[None], "attention weights")
    with pytest.raises(CheckFailure, match=r"should have shape \(2, 3\) \(B, S\); yours has"):
        expect_array(np.zeros((3, 2)), "x", shape=(2, 3), axes="(B, S)")
    with pytest.raises(CheckFailure, match="should have dtype float32; yours has dtype int32"):
        expect_array(np.zeros(2, np.int32), "x", dtype=np.float32)
    with pytest.raises(CheckFailure, match=r"x: NaN values \(1 of 2\), the first at index \(1,\)"):
        expect_array(np.array([0.0, np.nan]), "x")
    with pytest.raises(
        CheckFailure,
        match=r"x: mismatch with the reference: at index \(1,\) yours is 2\.5, the reference has 2",
    ):
        expect_close(np.array([1.0, 2.5]), np.array([1.0, 2.0]), "x")
    with pytest.raises(
        CheckFailure, match=r"mismatch with your first run: .* your first run has 2"
    ):
        expect_close(np.array([1.0, 2.5]), np.array([1.0, 2.0]), "x", versus="your first run")
    with pytest.raises(CheckFailure, match=r"x: NaN at index \(1,\), where the reference has 2"):
        expect_close(np.array([1.0, np.nan]), np.array([1.0, 2.0]), "x")
    with pytest.raises(CheckFailure, match="did you forget a `return`"):
        expect_array(None, "x")
    expect_close(np.array([1.0, 2.0 + 1e-7]), np.array([1.0, 2.0]), "x")  # within tolerance


def test_the_catalog_rejects_duplicate_names():
    from m2l_nlp.grading.checks import catalog

    ex = exercise("demo_registry_dup", "practical_demo_a", 1, targets=("f",))
    ex.check(lambda ctx: None)
    with pytest.raises(ValueError, match="already has a check"):
        ex.check(lambda ctx: None)
    found = {}
    catalog._add(found, [ex, ex])  # the same exercise twice (imported by a second module)
    with pytest.raises(ValueError, match="unique"):
        catalog._add(found, [exercise("demo_registry_dup", "practical_demo_b", 1, ("f",))])
    hidden = exercise("demo_registry_dup", "practical_demo_a", 1, ("f",), hidden=True)
    with pytest.raises(ValueError, match="give the hidden one a name of its own"):
        catalog._add(found, [hidden])


def test_a_gate_covers_the_targets_it_names_and_one_target_by_default():
    def check_a(ctx):
        """a"""

    def check_b(ctx):
        """b"""

    def check_c(ctx):
        """c"""

    one = Exercise("one_target", "p", 1, ("f",))
    one.check(gate=True)(check_a)
    one.check(check_b)  # not a gate: covers nothing unless it says so
    assert [c.covers for c in one.checks] == [("f",), ()]
    assert one.uncovered() == []
    two = Exercise("two_targets", "p", 1, ("f", "G"))
    two.check(gate=True)(check_a)  # which of the two it compares is not guessed
    two.check(gate=True, covers=("f",))(check_b)
    assert two.uncovered() == ["G"]
    with pytest.raises(ValueError, match=r"'c' of 'two_targets' covers H, not a target .*: f, G"):
        two.check(gate=True, covers=("H",))(check_c)


def test_score_table_totals_and_statuses():
    ex1 = Exercise("alpha", "p", 10, ("a",))
    ex2 = Exercise("beta", "p", 5, ("b",))
    results = [
        ExerciseResult(ex1, [CheckResult("alpha", "c", "passed")]),
        ExerciseResult(
            ex2, [CheckResult("beta", "c", "passed"), CheckResult("beta", "d", "failed")]
        ),
    ]
    table = score_table(results)
    assert "alpha" in table and "passed" in table and "10 / 10" in table
    assert "beta" in table and "failed" in table and "1/2" in table and "0 / 5" in table
    assert "10 / 15" in table.splitlines()[-2]


# ------------------------------------------------------------------------------------------
# graded checks on mutated solutions


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


def grade(module, name: str, stop_at_failure: bool = False) -> ExerciseResult:
    """Run the checks of ``name`` on ``module`` in-process, as the plugin does."""
    ex = load_exercises()[name]
    ref = reference(ex.practical)
    results = []
    for chk in ex.checks:
        try:
            run_check(ex, chk, module, ref, [vars(module)])
            err = None
        except Exception as caught:  # noqa: BLE001
            err = caught
        status, message = outcome(err, {module.__file__})
        results.append(CheckResult(name, chk.name, status, message))
        if stop_at_failure and status != "passed":
            break
    return ExerciseResult(ex, results)


# The reference's softmax, written out and normalised after the product with v; the
# alternatives replace it whole by the usual jax.nn.softmax form.
SOFTMAX_WRITTEN_OUT = (
    "shifted = scores - jax.lax.stop_gradient(scores.max(axis=-1, keepdims=True))\n"
    "    unnormalised = jnp.exp(shifted)\n"
    "    total = unnormalised.sum(axis=-1, keepdims=True)\n"
    "    values = jnp.matmul(unnormalised, v) / total\n"
    "    return values, unnormalised / total"
)
WEIGHTS_V = "    return jnp.matmul(weights, v), weights"

MUTATIONS = {
    "scaled_dot_product": [
        ("no 1/sqrt(d_k)", [("/ math.sqrt(d_k)", "")]),
        ("scaled by d_k", [("/ math.sqrt(d_k)", "/ d_k")]),
        (
            "softmax over the queries",
            [
                ("scores.max(axis=-1, keepdims=True)", "scores.max(axis=-2, keepdims=True)"),
                (
                    "unnormalised.sum(axis=-1, keepdims=True)",
                    "unnormalised.sum(axis=-2, keepdims=True)",
                ),
                ("jnp.matmul(unnormalised, v) / total", "jnp.matmul(unnormalised / total, v)"),
            ],
        ),
        (
            "exp without subtracting the maximum",
            [("scores - jax.lax.stop_gradient(scores.max(axis=-1, keepdims=True))", "scores")],
        ),
        ("inverted mask", [("jnp.asarray(mask) != 0", "jnp.asarray(mask) == 0")]),
        (
            "transpose of all axes",
            [("jnp.matmul(q, jnp.swapaxes(k, -1, -2))", "jnp.matmul(q, k.T)")],
        ),
    ],
    "masked_embedding": [
        (
            "mask ignored",
            [
                (
                    "return vectors * jnp.asarray(mask)[..., None].astype(vectors.dtype)",
                    "return vectors",
                )
            ],
        ),
        (
            "inverted mask",
            [("* jnp.asarray(mask)[..., None]", "* (1 - jnp.asarray(mask))[..., None]")],
        ),
        (
            "mask applied to the ids",
            [
                ("vectors = self.embed(inputs)\n", "vectors = self.embed(inputs * mask)\n"),
                (
                    "return vectors * jnp.asarray(mask)[..., None].astype(vectors.dtype)",
                    "return vectors",
                ),
            ],
        ),
        (
            "mask without a trailing axis",
            [
                (
                    "jnp.asarray(mask)[..., None].astype(vectors.dtype)",
                    "jnp.asarray(mask).astype(vectors.dtype)",
                )
            ],
        ),
    ],
    "multihead_attention": [
        (
            "heads split as (d_head, h)",
            [
                (
                    "x = x.reshape(*x.shape[:-1], self.num_heads, self.d_head)\n"
                    "            return jnp.swapaxes(x, -2, -3)",
                    "x = x.reshape(*x.shape[:-1], self.d_head, self.num_heads)\n"
                    "            return jnp.moveaxis(x, -1, -3)",
                )
            ],
        ),
        (
            "reshape straight to (B, h, S, d_head)",
            [
                (
                    "x = x.reshape(*x.shape[:-1], self.num_heads, self.d_head)\n"
                    "            return jnp.swapaxes(x, -2, -3)",
                    "return x.reshape(x.shape[0], self.num_heads, x.shape[1], self.d_head)",
                )
            ],
        ),
        ("no output projection", [("return self.proj_o(out), weights", "return out, weights")]),
        (
            "mask without a head axis",
            [("mask = mask[:, None, None, :]", "mask = mask[:, None, :]")],
        ),
        ("keys projected from q", [("split_heads(self.proj_k(k))", "split_heads(self.proj_k(q))")]),
    ],
    "positionwise_feed_forward": [
        ("no ReLU", [("jax.nn.relu(self.linear_1(x))", "self.linear_1(x)")]),
        (
            "dropout in evaluation",
            [
                (
                    "        if is_train and self.p_dropout > 0:\n            hidden",
                    "        if self.p_dropout > 0:\n            hidden",
                )
            ],
        ),
        (
            "no dropout in training",
            [("hidden = hk.dropout(hk.next_rng_key(), self.p_dropout, hidden)", "hidden = hidden")],
        ),
        ("GELU instead of ReLU", [("jax.nn.relu", "jax.nn.gelu")]),
    ],
    "encoder_block": [
        (
            "no residual",
            [("x = self.norm_1(x + dropout(attended))", "x = self.norm_1(dropout(attended))")],
        ),
        (
            "pre-LayerNorm",
            [
                (
                    "attended, weights = self.attention(x, x, x, mask)",
                    "h = self.norm_1(x)\n        attended, weights = self.attention(h, h, h, mask)",
                ),
                ("x = self.norm_1(x + dropout(attended))", "x = x + dropout(attended)"),
                (
                    "x = self.norm_2(x + dropout(self.feed_forward(x, is_train)))",
                    "x = x + dropout(self.feed_forward(self.norm_2(x), is_train))",
                ),
            ],
        ),
        (
            "norms swapped",
            [
                (
                    "x = self.norm_1(x + dropout(attended))",
                    "x = self.norm_2(x + dropout(attended))",
                ),
                (
                    "x = self.norm_2(x + dropout(self.feed_forward(x, is_train)))",
                    "x = self.norm_1(x + dropout(self.feed_forward(x, is_train)))",
                ),
            ],
        ),
        (
            "dropout in evaluation",
            [
                (
                    "            if is_train and self.p_dropout > 0:\n                return",
                    "            if self.p_dropout > 0:\n                return",
                )
            ],
        ),
        ("mask not passed", [("self.attention(x, x, x, mask)", "self.attention(x, x, x)")]),
        (
            "is_train not passed to the feed-forward",
            [("self.feed_forward(x, is_train)", "self.feed_forward(x)")],
        ),
    ],
    "transformer_encoder": [
        ("mask not passed", [("x = block(x, mask, is_train)", "x = block(x, None, is_train)")]),
        ("is_train not passed", [("x = block(x, mask, is_train)", "x = block(x, mask)")]),
        (
            "maps not chained",
            [
                (
                    "x, weights = block(x, mask, is_train, return_attention=True)",
                    "_, weights = block(x, mask, is_train, return_attention=True)",
                )
            ],
        ),
        (
            "only the first block",
            [
                (
                    "for block in self.blocks:\n            x = block(x, mask, is_train)",
                    "for block in self.blocks[:1]:\n            x = block(x, mask, is_train)",
                )
            ],
        ),
    ],
    "positional_encoding": [
        (
            "sin and cos swapped",
            [
                ("table[:, 0::2] = np.sin(angles)", "table[:, 0::2] = np.cos(angles)"),
                ("table[:, 1::2] = np.cos(", "table[:, 1::2] = np.sin("),
            ],
        ),
        ("base 1000", [("np.power(10000.0,", "np.power(1000.0,")]),
        (
            "i instead of 2i",
            [
                (
                    "-np.arange(0, d_model, 2, dtype=np.float64) / d_model",
                    "-np.arange((d_model + 1) // 2, dtype=np.float64) / d_model",
                )
            ],
        ),
        (
            "JAX .at result discarded (all zeros)",
            [
                (
                    "table = np.zeros((max_len, d_model), dtype=np.float64)",
                    "table = jnp.zeros((max_len, d_model))",
                ),
                ("table[:, 0::2] = np.sin(angles)", "table.at[:, 0::2].set(np.sin(angles))"),
                (
                    "table[:, 1::2] = np.cos(angles[:, : d_model // 2])",
                    "table.at[:, 1::2].set(np.cos(angles[:, : d_model // 2]))",
                ),
                ("return table.astype(np.float32)", "return np.asarray(table, np.float32)"),
            ],
        ),
        (
            "table not added",
            [("x = x + jnp.asarray(self.table[:seq_len], dtype=x.dtype)", "x = x")],
        ),
        (
            "dropout in evaluation",
            [
                (
                    "        if is_train and self.p_dropout > 0:\n            x = hk.dropout",
                    "        if self.p_dropout > 0:\n            x = hk.dropout",
                )
            ],
        ),
    ],
    "classifier": [
        (
            "mean over padding",
            [("mean = jnp.where(valid, x, 0).sum(axis=-2) / count", "mean = x.mean(axis=-2)")],
        ),
        ("max over padding", [("jnp.where(valid, x, -jnp.inf).max(axis=-2)", "x.max(axis=-2)")]),
        ("logits not squeezed", [("return self.head(pooled)[..., 0]", "return self.head(pooled)")]),
        ("no positional encoding", [("x = self.positional(x, is_train)\n", "x = x\n")]),
        (
            "mask not passed to the encoder",
            [("x = self.encoder(x, mask, is_train)", "x = self.encoder(x, None, is_train)")],
        ),
        (
            "config.pooling ignored",
            [("masked_pool(x, mask, self.config.pooling)", "masked_pool(x, mask)")],
        ),
    ],
}

# Slips whose message must name them, each also a mutant of its exercise:
# (exercise, label, edits, the check whose message is read, words of its hint).
NAMED_SLIPS = [
    (
        "multihead_attention",
        "keys projected with proj_q",
        [("split_heads(self.proj_k(k))", "split_heads(self.proj_q(k))")],
        "mha_matches_reference",
        "Your keys are projected with proj_q",
    ),
    (
        "multihead_attention",
        "output projection left out",
        [("return self.proj_o(out), weights", "return out, weights")],
        "mha_matches_reference",
        "leaves out the output projection",
    ),
    (
        "multihead_attention",
        "a (B, 1, S_k) mask handled as (B, S_k)",
        [("if mask.ndim == 2:", "if mask.ndim >= 2:")],
        "mha_masks",
        "a (B, 1, S_k) mask must become (B, 1, 1, S_k)",
    ),
    (
        "scaled_dot_product",
        "mask applied after the softmax",
        [
            (
                "        scores = jnp.where(jnp.asarray(mask) != 0, scores, "
                "jnp.finfo(scores.dtype).min)\n",
                "        pass\n",
            ),
            (
                "    return values, unnormalised / total",
                "    weights = unnormalised / total\n"
                "    if mask is not None:\n"
                "        weights = jnp.where(jnp.asarray(mask) != 0, weights, 0.0)\n"
                "    return jnp.matmul(weights, v), weights",
            ),
        ],
        "masked_keys_get_zero_weight",
        "the mask is applied after the softmax",
    ),
    (
        "positional_encoding",
        "the result of pe.at[...].set thrown away",
        [
            ("    table[:, 0::2] = np.sin(angles)", "    jnp.asarray(table).at[:, 0::2].set(1.0)"),
            (
                "    table[:, 1::2] = np.cos(angles[:, : d_model // 2])",
                "    jnp.asarray(table).at[:, 1::2].set(1.0)",
            ),
        ],
        "table_closed_form",
        "`pe = pe.at[...].set(...)`",
    ),
]
for _exercise, _label, _edits, _check, _hint in NAMED_SLIPS:
    MUTATIONS[_exercise].append((_label, _edits))


ALTERNATIVES = {
    "scaled_dot_product": [
        (
            "einsum",
            [
                (
                    "jnp.matmul(q, jnp.swapaxes(k, -1, -2))",
                    "jnp.einsum('...qd,...kd->...qk', q, k)",
                ),
                (
                    "jnp.matmul(unnormalised, v)",
                    "jnp.einsum('...qk,...kd->...qd', unnormalised, v)",
                ),
            ],
        ),
        ("-1e9", [("jnp.finfo(scores.dtype).min", "-1e9")]),
        ("-inf", [("jnp.finfo(scores.dtype).min", "-jnp.inf")]),
        (
            "jax.nn.softmax, then weights @ v",
            [(SOFTMAX_WRITTEN_OUT, "weights = jax.nn.softmax(scores, axis=-1)\n" + WEIGHTS_V)],
        ),
        (
            "softmax(where=)",
            [
                (
                    "scores = jnp.where(jnp.asarray(mask) != 0, scores, "
                    "jnp.finfo(scores.dtype).min)",
                    "pass",
                ),
                (
                    SOFTMAX_WRITTEN_OUT,
                    "weights = jax.nn.softmax(scores, axis=-1, "
                    "where=None if mask is None else jnp.asarray(mask) != 0)\n" + WEIGHTS_V,
                ),
            ],
        ),
        (
            "-inf with a guard for hidden rows",
            [
                ("jnp.finfo(scores.dtype).min", "-jnp.inf"),
                (
                    SOFTMAX_WRITTEN_OUT,
                    "weights = jnp.nan_to_num(jax.nn.softmax(scores, axis=-1))\n" + WEIGHTS_V,
                ),
            ],
        ),
    ],
    "multihead_attention": [
        (
            "transpose instead of swapaxes",
            [("return jnp.swapaxes(x, -2, -3)", "return jnp.transpose(x, (0, 2, 1, 3))")],
        ),
    ],
    "positional_encoding": [
        (
            "JAX .at, result kept",
            [
                (
                    "table = np.zeros((max_len, d_model), dtype=np.float64)",
                    "table = jnp.zeros((max_len, d_model))",
                ),
                (
                    "table[:, 0::2] = np.sin(angles)",
                    "table = table.at[:, 0::2].set(np.sin(angles))",
                ),
                (
                    "table[:, 1::2] = np.cos(angles[:, : d_model // 2])",
                    "table = table.at[:, 1::2].set(np.cos(angles[:, : d_model // 2]))",
                ),
                ("return table.astype(np.float32)", "return table"),
            ],
        ),
    ],
}


def _apply(edits) -> str:
    source = SOLUTION
    for old, new in edits:
        source = _mutate(source, old, new)
    return source


@pytest.mark.parametrize(
    ("name", "label", "edits"),
    [(name, label, edits) for name, cases in MUTATIONS.items() for label, edits in cases],
    ids=[f"{name}-{label}" for name, cases in MUTATIONS.items() for label, _ in cases],
)
def test_mutation_is_caught(tmp_path, name, label, edits):
    module = _module_from(_apply(edits), tmp_path)
    result = grade(module, name, stop_at_failure=True)
    assert result.status == "failed", f"{label!r} was not caught:\n{result}"
    message = result.messages()[0]
    assert "Traceback" not in message and len(message) > 30


MASKED_SCORE = "jnp.finfo(scores.dtype).min)"


@pytest.mark.parametrize(
    ("edits", "hint"),
    [
        ([("/ math.sqrt(d_k)", "")], "softmax of Q K^T without dividing the scores"),
        ([("/ math.sqrt(d_k)", "/ d_k")], "softmax of Q K^T dividing them by d_k"),
        (dict(MUTATIONS["scaled_dot_product"])["softmax over the queries"], "do not sum to 1"),
        ([(MASKED_SCORE, "0.0)")], "Without a mask yours match, so look at the masking"),
        (
            [("scores - jax.lax.stop_gradient(scores.max(axis=-1, keepdims=True))", "scores")],
            "overflows float32",
        ),
        (
            [("jnp.matmul(q, jnp.swapaxes(k, -1, -2))", "jnp.matmul(q, k.T)")],
            "jnp.swapaxes(k, -1, -2)",
        ),
    ],
    ids=["no scaling", "scaled by d_k", "softmax over queries", "masked with 0", "no max", "k.T"],
)
def test_attention_hints_name_the_slip(tmp_path, edits, hint):
    """The first failure's hint fits the mistake made (not a fixed list of suspects)."""
    result = grade(_module_from(_apply(edits), tmp_path), "scaled_dot_product", True)
    message = result.messages()[0]
    assert hint in message, message
    if hint != "overflows float32":
        assert "overflows" not in message
    if "masking" in hint:
        assert "sqrt" not in message


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


@pytest.mark.parametrize(
    ("edits", "hint"),
    [
        (dict(MUTATIONS["positional_encoding"])["sin and cos swapped"], "sine and cosine swapped"),
        (
            [
                (
                    "np.arange(max_len, dtype=np.float64)",
                    "np.arange(1, max_len + 1, dtype=np.float64)",
                )
            ],
            "counts positions from 1",
        ),
        (dict(MUTATIONS["positional_encoding"])["i instead of 2i"], "the exponent is 2i / d_model"),
        (dict(MUTATIONS["positional_encoding"])["base 1000"], "Even features (0, 2, ...)"),
    ],
    ids=["sin/cos swapped", "positions from 1", "i instead of 2i", "other base"],
)
def test_positional_encoding_hints_name_the_slip(tmp_path, edits, hint):
    result = grade(_module_from(_apply(edits), tmp_path), "positional_encoding", True)
    message = result.messages()[0]
    assert "table_closed_form" in message and hint in message, message


@pytest.mark.parametrize(
    ("edits", "hint", "not_hint"),
    [
        (
            [
                (
                    "        if is_train and self.p_dropout > 0:\n            hidden = hk.dropout("
                    "hk.next_rng_key(),",
                    "        if self.p_dropout > 0:\n            hidden = hk.dropout("
                    "jax.random.PRNGKey(0),",
                ),
            ],
            "dropout acts in evaluation mode",
            "Is the ReLU there?",
        ),
        (
            dict(MUTATIONS["positionwise_feed_forward"])["no ReLU"],
            "Is the ReLU there?",
            "dropout acts",
        ),
    ],
    ids=["dropout with a fixed key", "no ReLU"],
)
def test_feed_forward_hints_name_the_slip(tmp_path, edits, hint, not_hint):
    result = grade(_module_from(_apply(edits), tmp_path), "positionwise_feed_forward", True)
    message = result.messages()[0]
    assert hint in message and not_hint not in message, message


def test_a_mask_on_the_query_axis_is_told_the_shape_to_use(tmp_path):
    edits = [("mask = mask[:, None, None, :]", "mask = mask[:, None, :, None]")]
    result = grade(_module_from(_apply(edits), tmp_path), "multihead_attention", True)
    message = result.messages()[0]
    assert "(B, S_k) mask must become (B, 1, 1, S_k)" in message and "never queries" in message


def test_every_exercise_has_three_mutations():
    p2 = [ex.name for ex in load_exercises().values() if ex.practical == P2]
    assert sorted(MUTATIONS) == sorted(p2)
    assert all(len(cases) >= 3 for cases in MUTATIONS.values())


@pytest.mark.parametrize(
    ("name", "label", "edits"),
    [(name, label, edits) for name, cases in ALTERNATIVES.items() for label, edits in cases],
    ids=[f"{name}-{label}" for name, cases in ALTERNATIVES.items() for label, _ in cases],
)
def test_correct_alternative_passes(tmp_path, name, label, edits):
    module = _module_from(_apply(edits), tmp_path)
    result = grade(module, name)
    assert result.status == "passed", f"{label!r} is correct but was not accepted:\n{result}"
    assert result.points == result.exercise.points


def test_mistake_in_a_dependency_is_counted_once(tmp_path):
    """A broken scaled_dot_product does not cost the multi-head attention its points."""
    module = _module_from(_mutate(SOLUTION, "/ math.sqrt(d_k)", ""), tmp_path)
    assert grade(module, "scaled_dot_product", stop_at_failure=True).status == "failed"
    assert grade(module, "multihead_attention").status == "passed"
    assert module.scaled_dot_product is not reference(P2).scaled_dot_product  # restored


@pytest.mark.slow  # over 3 s here
def test_partial_progress_is_graded_check_by_check(tmp_path):
    """Only get_attention_maps left as a stub: __call__'s checks pass, the maps' do not."""
    stub = stubs.make_stub(SOLUTION)
    start = SOLUTION.index("    def get_attention_maps(\n        self, x: jax.Array, mask")
    body = SOLUTION[start:].split("# END SOLUTION\n", 1)[0] + "# END SOLUTION\n"
    partial = SOLUTION.replace(
        body,
        body.split("# BEGIN SOLUTION")[0]
        + "# YOUR CODE HERE\n        raise NotImplementedError("
        + "'TransformerEncoder.get_attention_maps: not implemented yet')\n",
    )
    assert partial != SOLUTION and "NotImplementedError" in stub
    result = grade(_module_from(partial, tmp_path), "transformer_encoder")
    statuses = {c.check: c.status for c in result.checks}
    assert statuses["encoder_matches_reference"] == "passed"
    assert statuses["attention_maps"] == "not started"
    assert result.status == "incomplete" and result.points == 0
    table = score_table([result])
    # __call__'s three checks (output, dropout, training mode) pass; the maps' one does not
    assert re.search(r"transformer_encoder +incomplete +3/4 +0 / 10", table), table
    assert "still to write: TransformerEncoder.get_attention_maps: not implemented" in table


def test_missing_name_is_reported_in_words(tmp_path):
    module = _module_from(
        SOLUTION.replace("class MaskedEmbedding(", "class MyEmbedding("), tmp_path
    )
    result = grade(module, "masked_embedding", stop_at_failure=True)
    assert result.status == "failed"
    assert "has no `MaskedEmbedding`" in result.messages()[0]


# ------------------------------------------------------------------------------------------
# check() on notebook objects


def _notebook(source: str) -> dict:
    namespace = {"__name__": "__main__"}
    exec(compile(source, "<ipython-input-1>", "exec"), namespace)
    exec("from m2l_nlp.grading import check", namespace)
    return namespace


def test_check_in_a_notebook(capsys):
    edits = dict(MUTATIONS["scaled_dot_product"])["softmax over the queries"]
    nb = _notebook(_apply(edits))
    exec("result = check('scaled_dot_product', scaled_dot_product)", nb)
    result = nb["result"]
    assert result.status == "failed" and result.points == 0
    out = capsys.readouterr().out
    assert "scaled_dot_product: failed (1/5 checks passed" in out and "last axis" in out
    # sinusoidal_encoding is found in the notebook's namespace
    exec("result = check('positional_encoding', PositionalEncoding)", nb)
    assert (
        nb["result"].status == "passed" and "positional_encoding: passed" in capsys.readouterr().out
    )
    with pytest.raises(TypeError, match="not one of EncoderBlock"):
        exec("check('encoder_block', MultiheadAttention)", nb)
    with pytest.raises(KeyError, match="no exercise called 'attention'"):
        exec("check('attention', MultiheadAttention)", nb)


def test_check_in_a_notebook_gives_its_programs_the_checking_flags(monkeypatch):
    """A notebook's kernel starts without the checking flags (it trains too), so check()
    compiles its programs with them as per-program options (devices.checking_compiler_options;
    under pytest XLA_FLAGS has them and there are none). A made-up option, which XLA refuses
    by name, shows which programs receive them: the checks that compile fail on it."""
    from m2l_nlp import devices

    made_up = "xla_m2l_nlp_no_such_option"
    monkeypatch.setattr(devices, "checking_compiler_options", lambda: {made_up: 1})
    nb = _notebook((ROOT / "solutions" / "practical2_transformers.py").read_text())
    exec("result = check('multihead_attention', MultiheadAttention, verbose=False)", nb)
    checks = nb["result"].checks
    assert all(c.status != "passed" and made_up in c.message for c in checks), checks
    monkeypatch.setattr(devices, "checking_compiler_options", lambda: {})
    exec("result = check('multihead_attention', MultiheadAttention, verbose=False)", nb)
    assert nb["result"].status == "passed"


def test_check_runs_the_students_code_on_the_cpu_beside_an_accelerator(monkeypatch):
    """In a GPU kernel (pretended here) check() runs the checks on the CPU: the student's
    code sees the CPU as its default device, and passes as it would there."""
    import jax

    nb = _notebook((ROOT / "solutions" / "practical2_transformers.py").read_text())
    exec(
        "seen = []\ndef scaled_dot_product(*a, _f=scaled_dot_product, **k):\n"
        "    seen.append(jax.config.jax_default_device)\n    return _f(*a, **k)",
        nb,
    )
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    exec("result = check('scaled_dot_product', scaled_dot_product, verbose=False)", nb)
    assert nb["result"].status == "passed", nb["result"].checks
    assert nb["seen"] and set(nb["seen"]) == {jax.devices("cpu")[0]}


def test_check_in_a_notebook_keeps_every_program_on_disk(tmp_path):
    """In a kernel whose setup cell named a compilation cache (threshold: JAX's default 1 s),
    check() keeps every program it compiles, so the same cell run again compiles nothing
    new; the kernel's threshold comes back afterwards. A fresh interpreter, as a kernel."""
    script = textwrap.dedent(
        """
        import json, os
        from pathlib import Path
        import jax
        from m2l_nlp.grading import check
        from m2l_nlp.grading.checks.catalog import get_exercise
        from m2l_nlp.grading.checks.runner import reference

        ref = reference("practical2_transformers")
        parts = [getattr(ref, t) for t in get_exercise("scaled_dot_product").targets]
        folder = Path(os.environ["JAX_COMPILATION_CACHE_DIR"])
        files = []
        for _ in range(2):
            assert check("scaled_dot_product", *parts, verbose=False).status == "passed"
            files.append(len(list(folder.iterdir())))
        after = jax.config.values["jax_persistent_cache_min_compile_time_secs"]
        print(json.dumps({"files": files, "after": after}))
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_PERSISTENT_CACHE")}
    env["JAX_COMPILATION_CACHE_DIR"] = str(tmp_path / "programs")
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["files"][0] >= 5 and found["files"][1] == found["files"][0], found
    assert found["after"] == 1.0


# ------------------------------------------------------------------------------------------
# end to end: pytest in a subprocess on a copy of the repository


def _copy_repo(tmp_path: Path, exercises_from_solutions: bool) -> Path:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(ROOT / "tests" / "conftest.py", root / "tests" / "conftest.py")
    shutil.copytree(ROOT / "tests" / "graded", root / "tests" / "graded")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    if exercises_from_solutions:
        shutil.copytree(ROOT / "solutions", root / "exercises")
    else:
        args = ["--solutions", str(root / "solutions"), "--exercises", str(root / "exercises")]
        assert stubs.main(args) == 0
    return root


def _pytest(
    root: Path, *args: str, extra_modules: str = "", impl: str = "", runner: str = "pytest"
) -> subprocess.CompletedProcess:
    package_home = Path(m2l_nlp.__file__).resolve().parent.parent  # the code under test
    path = os.pathsep.join([str(root), str(package_home), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, M2L_ROOT=str(root), PYTHONPATH=path)
    env.pop("M2L_IMPL", None)
    if impl:
        env["M2L_IMPL"] = impl
    if extra_modules:
        env["M2L_GRADING_MODULES"] = extra_modules
    cmd = [sys.executable, "-m", runner, "-q", "-p", "no:cacheprovider", *args]
    cwd = root if runner == "pytest" else root.parent  # the grading entry point finds the root
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_fresh_stubs_are_all_not_started(tmp_path):
    root = _copy_repo(tmp_path, exercises_from_solutions=False)
    run = _pytest(root, "--results-json", "results.json")
    assert run.returncode != 0, run.stdout
    table = run.stdout.split("score (exercises/)")[1]
    for name in load_exercises():
        row = next(line for line in table.splitlines() if line.strip().startswith(name + " "))
        assert "not started" in row, row
    data = json.loads((root / "results.json").read_text())
    assert data["score"] == 0
    assert {t["name"] for t in data["tests"]} == set(load_exercises())
    assert all(t["status"] == "failed" and t["score"] == 0 for t in data["tests"])


@pytest.mark.slow
def test_solutions_as_exercises_get_full_points(tmp_path):
    root = _copy_repo(tmp_path, exercises_from_solutions=True)
    cheap = "scaled_dot_product or positional_encoding"
    run = _pytest(root, "-m", cheap, "--results-json", "r.json")
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads((root / "r.json").read_text())
    assert data["score"] == 15 + 15
    assert all(t["status"] == "passed" and t["score"] == t["max_score"] for t in data["tests"])
    n = len(load_exercises())
    assert f"scaled_dot_product, positional_encoding passed; {n - 2} exercises not graded" in (
        run.stdout
    )
    # again, over the file it wrote, named the other way (an absolute path)
    again = _pytest(root, "-m", "scaled_dot_product", "--results-json", str(root / "r.json"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((root / "r.json").read_text())["score"] == 15


@pytest.mark.slow
def test_import_error_and_timeout_are_reported(tmp_path):
    root = _copy_repo(tmp_path, exercises_from_solutions=True)
    (root / "fake_checks.py").write_text(
        textwrap.dedent(
            """\
            from m2l_nlp.grading.checks.registry import exercise
            from m2l_nlp.grading.checks.tools import expect_close

            spin = exercise("spin", "practical8_spin", 3, targets=("spin",))
            fine = exercise("fine", "practical8_spin", 1, targets=("fine",))
            broken = exercise("broken", "practical9_broken", 2, targets=("ok",))


            @spin.check
            def check_spin(ctx):
                expect_close(ctx.student.spin(1.0), 1.0, "spin(1.0)")


            @spin.check
            def check_spin_again(ctx):
                expect_close(ctx.student.spin(2.0), 1.0, "spin(2.0)")


            @fine.check
            def check_fine(ctx):
                expect_close(ctx.student.fine(), 1.0, "fine()")


            @broken.check
            def check_ok(ctx):
                expect_close(ctx.student.ok(), 1.0, "ok()")
            """
        )
    )
    solution = "def {f}(*args):\n    # BEGIN SOLUTION\n    return 1.0\n    # END SOLUTION\n"
    (root / "solutions" / "practical8_spin.py").write_text(
        solution.format(f="spin") + "\n\n" + solution.format(f="fine")
    )
    (root / "solutions" / "practical9_broken.py").write_text(solution.format(f="ok"))
    (root / "exercises" / "practical8_spin.py").write_text(
        "def spin(x):\n    while True:\n        x = x + 1\n\n\ndef fine():\n    return 1.0\n"
    )
    (root / "exercises" / "practical9_broken.py").write_text("def ok():\n    return (1.0\n")
    run = _pytest(
        root,
        "-m",
        "spin or fine or broken",
        "--grade-timeout",
        "2",
        "--results-json",
        "r.json",
        extra_modules="fake_checks",
    )
    out = run.stdout
    assert run.returncode != 0, out
    assert out.count("syntax error") == 1, out
    assert "practical9_broken.py, line 2: syntax error" in out
    assert "stopped after 2 s" in out
    tests = {t["name"]: t for t in json.loads((root / "r.json").read_text())["tests"]}
    assert tests["fine"]["status"] == "passed"  # the other practical is still graded
    assert tests["spin"]["status"] == "failed" and "stopped after 2 s" in tests["spin"]["output"]
    # the exercise's second check is not run at all: one hang costs its time once
    assert "not run: an earlier check of this exercise was stopped" in tests["spin"]["output"]
    assert tests["spin"]["output"].count("stopped after 2 s") == 1
    assert tests["broken"]["status"] == "failed" and tests["broken"]["output"].startswith(
        "**error**"
    )


def test_grading_entry_point_and_impl_env(tmp_path):
    """`python -m m2l_nlp.grading` (what `m2l-nlp grade` calls) with M2L_IMPL=solutions."""
    root = _copy_repo(tmp_path, exercises_from_solutions=False)
    run = _pytest(root, "-m", "scaled_dot_product", impl="solutions", runner="m2l_nlp.grading")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "score (solutions/)" in run.stdout and "15 / 15" in run.stdout


def test_graded_checks_refuse_parallel_workers(tmp_path):
    """Under pytest-xdist an undone exercise (a skip in a worker) would not fail the run: a
    run of graded checks alone is refused in one line before any worker starts."""
    pytest.importorskip("xdist")
    root = _copy_repo(tmp_path, exercises_from_solutions=False)
    run = _pytest(root, "-m", "scaled_dot_product", "-n", "2")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "graded checks cannot run in parallel workers" in run.stderr
    assert "bringing up nodes" not in run.stdout + run.stderr  # no worker was started


@pytest.mark.slow
def test_graded_checks_among_other_tests_refuse_parallel_workers(tmp_path):
    """Other tests beside them: the workers start, and each graded check fails in them."""
    pytest.importorskip("xdist")
    root = _copy_repo(tmp_path, exercises_from_solutions=True)
    (root / "tests" / "test_other.py").write_text("def test_other():\n    pass\n")
    run = _pytest(root, "tests", "-m", "scaled_dot_product or not graded", "-n", "2")
    assert run.returncode != 0
    assert "1 passed" in run.stdout and "graded checks cannot run in parallel" in run.stdout


@pytest.mark.parametrize(
    ("where", "args", "advice"),
    [
        ("exercises", [], "run pytest from the repository root"),
        (".", ["-m", "multihead"], "nothing matched your selection"),
    ],
)
def test_a_run_that_grades_nothing_says_how_to_select(where, args, advice):
    """Run from exercises/ (no tests there) or with a marker typo: say why, list the names."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=ROOT / where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, proc.stdout[-2000:]
    assert f"no graded check ran: {advice}" in proc.stdout, proc.stdout[-2000:]
    assert "multihead_attention" in proc.stdout


@pytest.mark.parametrize(
    ("flags", "status"),
    [
        ("--xla_m2l_nlp_no_such_flag=1", pytest.ExitCode.USAGE_ERROR),
        ("--xla_force_host_platform_device_count=1", pytest.ExitCode.OK),
    ],
)
def test_a_flag_that_xla_does_not_know_is_named_in_one_line(flags, status):
    """XLA ends a process at a flag it does not know, and pytest's capture would hide its
    message: a student's run names the flag in one line before any check starts. A flag XLA
    knows changes nothing."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "tfidf", "--co", "-q"],
        cwd=ROOT,
        env=dict(os.environ, XLA_FLAGS=flags),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == status, out[-2000:]
    assert ("ERROR: XLA_FLAGS names --xla_m2l_nlp_no_such_flag=1," in proc.stderr) == bool(status)
    assert "Traceback" not in out


def test_a_graded_run_keeps_its_programs_on_disk_for_the_next_run(tmp_path, monkeypatch):
    """A student's `pytest -m <exercise>` stores its compiled programs in the data cache, so
    that the next run loads them; the library tests' own temporary folder does not take over."""
    root = _copy_repo(tmp_path, exercises_from_solutions=True)
    cache = tmp_path / "cache"
    monkeypatch.setenv("M2L_NLP_CACHE", str(cache))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)  # as a student has it
    run = _pytest(root, "-m", "scaled_dot_product")
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(list((cache / "jax").glob("*"))) >= 5  # the checks' programs, each a file


@pytest.mark.parametrize(
    ("name", "edits", "check", "hint"),
    [(name, edits, check, hint) for name, _, edits, check, hint in NAMED_SLIPS],
    ids=[label for _, label, *_ in NAMED_SLIPS],
)
def test_a_named_slip_gets_a_hint_that_names_it(tmp_path, name, edits, check, hint):
    result = grade(_module_from(_apply(edits), tmp_path), name)
    messages = {c.check: c.message for c in result.checks}
    assert hint in messages[check], messages[check]
    assert "Is the softmax taken over the last axis?" not in messages[check]


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


@pytest.mark.slow  # records the reference's answers to two exercises first
def test_a_note_names_a_failing_earlier_exercise_the_run_did_not_select(tmp_path, monkeypatch):
    """As in a handout (recorded answers; the student's own scaled_dot_product called),
    `pytest -m multihead_attention` alone, with a wrong scaled_dot_product, is told to fix
    that first: scaled_dot_product is graded quietly, and stays out of the score table."""
    from m2l_nlp.grading.checks.expected import Replay
    from m2l_nlp.grading.local import pytest_plugin
    from m2l_nlp.grading.trusted.recording import record

    module = _module_from(_mutate(SOLUTION, "/ math.sqrt(d_k)", ""), tmp_path)
    catalog = load_exercises()
    graded = {name: catalog[name] for name in ("scaled_dot_product", "multihead_attention")}
    records = json.loads(json.dumps(record(graded, P2, reference(P2)).records))
    monkeypatch.setattr(pytest_plugin, "reference", lambda practical: Replay(records))
    grader = pytest_plugin.Grader("exercises")
    grader.modules[P2] = module
    for chk in catalog["multihead_attention"].checks:
        try:
            grader.run("multihead_attention", chk.name)
            err = None
        except Exception as caught:  # noqa: BLE001 - its verdict is what is tested
            err = caught
        verdict = outcome(err, {module.__file__})
        grader.record("multihead_attention", CheckResult("multihead_attention", chk.name, *verdict))
    [result] = grader.exercise_results()
    assert result.status == "failed"
    assert result.note.startswith(
        "note: this exercise calls your scaled_dot_product, and scaled_dot_product fails: "
        "fix that first"
    ), result.note
    assert list(grader.quiet) == ["scaled_dot_product"]
    assert grader.quiet["scaled_dot_product"].status == "failed"


def test_a_build_over_draws_crosses_the_wire_and_nothing_outside_the_checks_builds():
    """``draws_of`` names its build by plain data (what a worker or a record holds): rebuilt
    from that data, it runs the module on every copy; a build named outside the checks'
    own modules is refused."""
    from m2l_nlp.grading.checks import wire
    from m2l_nlp.grading.checks.tools import DRAW_P, BuildSpec, draws_of, key_for, run_haiku
    from m2l_nlp.grading.practicals.practical2.blocks import _ffn

    plain = wire.from_plain(wire.to_plain(draws_of(_ffn(DRAW_P, True))(3).plain()))
    rebuilt = BuildSpec(plain["module"], plain["name"], tuple(plain["args"]))
    ref = reference("practical2_transformers")
    x = np.random.default_rng(0).standard_normal((2, 5, 12)).astype(np.float32)
    params = run_haiku(_ffn(0.1, False), ref, None, x)
    first, mean, var, _ = run_haiku(rebuilt, ref, params, x, key=key_for(1))
    assert first.shape == mean.shape == x.shape
    assert float(np.asarray(var).max()) > 0  # each copy drew masks of its own
    with pytest.raises(ValueError, match="builds come from"):
        BuildSpec("os", "system", ("true",))(ref)
