"""Practical 2's graded checks (m2l_nlp.grading.practicals.practical2), on slips of the
reference solution: each hint fits the slip made, a slip in one exercise costs only that one,
progress is graded check by check. Its mutants and correct variants are in
tests/mutants/practical2_transformers.py (run by test_mutants.py). The reference's source and
the helpers that edit and import copies of it (``SOLUTION``, ``_mutate``, ``_apply``,
``_module_from``) are fixtures of tests/grading/conftest.py.
"""

from __future__ import annotations

import re

import pytest

from m2l_nlp.authoring import stubs
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.report import score_table
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    ExerciseResult,
    outcome,
    reference,
    run_check,
)


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


MASKED_SCORE = "jnp.finfo(scores.dtype).min)"


@pytest.mark.parametrize(
    ("edits", "hint"),
    [
        ([("/ math.sqrt(d_k)", "")], "softmax of Q K^T without dividing the scores"),
        ([("/ math.sqrt(d_k)", "/ d_k")], "softmax of Q K^T dividing them by d_k"),
        (("scaled_dot_product", "softmax over the queries"), "do not sum to 1"),
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
def test_attention_hints_name_the_slip(tmp_path, edits, hint, _module_from, _apply):
    """The first failure's hint fits the mistake made (not a fixed list of suspects)."""
    result = grade(_module_from(_apply(edits), tmp_path), "scaled_dot_product", True)
    message = result.messages()[0]
    assert hint in message, message
    if hint != "overflows float32":
        assert "overflows" not in message
    if "masking" in hint:
        assert "sqrt" not in message


@pytest.mark.parametrize(
    ("edits", "hint"),
    [
        (("positional_encoding", "sin and cos swapped"), "sine and cosine swapped"),
        (
            [
                (
                    "np.arange(max_len, dtype=np.float64)",
                    "np.arange(1, max_len + 1, dtype=np.float64)",
                )
            ],
            "counts positions from 1",
        ),
        (("positional_encoding", "i instead of 2i"), "the exponent is 2i / d_model"),
        (("positional_encoding", "base 1000"), "Even features (0, 2, ...)"),
    ],
    ids=["sin/cos swapped", "positions from 1", "i instead of 2i", "other base"],
)
def test_positional_encoding_hints_name_the_slip(tmp_path, edits, hint, _module_from, _apply):
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
            ("positionwise_feed_forward", "no ReLU"),
            "Is the ReLU there?",
            "dropout acts",
        ),
    ],
    ids=["dropout with a fixed key", "no ReLU"],
)
def test_feed_forward_hints_name_the_slip(tmp_path, edits, hint, not_hint, _module_from, _apply):
    result = grade(_module_from(_apply(edits), tmp_path), "positionwise_feed_forward", True)
    message = result.messages()[0]
    assert hint in message and not_hint not in message, message


def test_a_mask_on_the_query_axis_is_told_the_shape_to_use(tmp_path, _module_from, _apply):
    edits = [("mask = mask[:, None, None, :]", "mask = mask[:, None, :, None]")]
    result = grade(_module_from(_apply(edits), tmp_path), "multihead_attention", True)
    message = result.messages()[0]
    assert "(B, S_k) mask must become (B, 1, 1, S_k)" in message and "never queries" in message


def test_mistake_in_a_dependency_is_counted_once(tmp_path, _module_from, _mutate, SOLUTION, P2):
    """A broken scaled_dot_product does not cost the multi-head attention its points."""
    module = _module_from(_mutate(SOLUTION, "/ math.sqrt(d_k)", ""), tmp_path)
    assert grade(module, "scaled_dot_product", stop_at_failure=True).status == "failed"
    assert grade(module, "multihead_attention").status == "passed"
    assert module.scaled_dot_product is not reference(P2).scaled_dot_product  # restored


@pytest.mark.slow  # over 3 s here
def test_partial_progress_is_graded_check_by_check(tmp_path, _module_from, SOLUTION):
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


def test_missing_name_is_reported_in_words(tmp_path, _module_from, SOLUTION):
    module = _module_from(
        SOLUTION.replace("class MaskedEmbedding(", "class MyEmbedding("), tmp_path
    )
    result = grade(module, "masked_embedding", stop_at_failure=True)
    assert result.status == "failed"
    assert "has no `MaskedEmbedding`" in result.messages()[0]
