"""Practical 2's graded checks (m2l_nlp.grading.practicals.practical2), on mutated solutions.

Mutation tests grade in-process copies of the reference solution with one realistic student
mistake each, and require that some check of the exercise fails; correct alternatives must
pass every check; named slips get a hint that names them. The reference's source and the
helpers that edit and import copies of it (``SOLUTION``, ``_mutate``, ``_apply``,
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


@pytest.mark.parametrize(
    ("name", "label", "edits"),
    [(name, label, edits) for name, cases in MUTATIONS.items() for label, edits in cases],
    ids=[f"{name}-{label}" for name, cases in MUTATIONS.items() for label, _ in cases],
)
def test_mutation_is_caught(tmp_path, name, label, edits, _module_from, _apply):
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
            dict(MUTATIONS["positionwise_feed_forward"])["no ReLU"],
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


def test_every_exercise_has_three_mutations(P2):
    p2 = [ex.name for ex in load_exercises().values() if ex.practical == P2]
    assert sorted(MUTATIONS) == sorted(p2)
    assert all(len(cases) >= 3 for cases in MUTATIONS.values())


@pytest.mark.parametrize(
    ("name", "label", "edits"),
    [(name, label, edits) for name, cases in ALTERNATIVES.items() for label, edits in cases],
    ids=[f"{name}-{label}" for name, cases in ALTERNATIVES.items() for label, _ in cases],
)
def test_correct_alternative_passes(tmp_path, name, label, edits, _module_from, _apply):
    module = _module_from(_apply(edits), tmp_path)
    result = grade(module, name)
    assert result.status == "passed", f"{label!r} is correct but was not accepted:\n{result}"
    assert result.points == result.exercise.points


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


@pytest.mark.parametrize(
    ("name", "edits", "check", "hint"),
    [(name, edits, check, hint) for name, _, edits, check, hint in NAMED_SLIPS],
    ids=[label for _, label, *_ in NAMED_SLIPS],
)
def test_a_named_slip_gets_a_hint_that_names_it(
    tmp_path, name, edits, check, hint, _module_from, _apply
):
    result = grade(_module_from(_apply(edits), tmp_path), name)
    messages = {c.check: c.message for c in result.checks}
    assert hint in messages[check], messages[check]
    assert "Is the softmax taken over the last axis?" not in messages[check]
