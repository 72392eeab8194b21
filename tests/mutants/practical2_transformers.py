"""Mutants of practical 2's reference: slips a student could plausibly make, each of which
must fail its exercise with a message in words, some with the words that name the slip; and
variants, correct code written another way, which must pass every check
(tests/grading/practicals/test_mutants.py)."""

_MASK_HINT = "look at the mask"  # mha_masks' hint, for mask slips only
_SOFTMAX_HINT = "Is the softmax taken over the last axis?"  # a slip named elsewhere is not this
# The line that called a sub-module without is_train is named, not the sub-module's dropout.
_FLAG_DROPPED = ": `{}`)\nHint: this line calls a sub-module without is_train"

# The reference's softmax, written out and normalised after the product with v; the
# variants replace it whole by the usual jax.nn.softmax form.
_SOFTMAX_WRITTEN_OUT = (
    "shifted = scores - jax.lax.stop_gradient(scores.max(axis=-1, keepdims=True))\n"
    "    unnormalised = jnp.exp(shifted)\n"
    "    total = unnormalised.sum(axis=-1, keepdims=True)\n"
    "    values = jnp.matmul(unnormalised, v) / total\n"
    "    return values, unnormalised / total"
)
_WEIGHTS_V = "    return jnp.matmul(weights, v), weights"

MUTANTS = {
    "scaled_dot_product": [
        (
            "scores not divided",
            [("/ math.sqrt(d_k)", "")],
            {
                "hint": "scaled_dot_product/scores-not-divided",
                "says": "Yours are the softmax of Q K^T without dividing the scores",
            },
        ),
        (
            "scores divided by d_k",
            [("/ math.sqrt(d_k)", "/ d_k")],
            {
                "hint": "scaled_dot_product/scores-divided-by-d-k",
                "says": "Yours are the softmax of Q K^T dividing them by d_k",
            },
        ),
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
        (
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
            {
                "says": "the mask is applied after the softmax",
                "check": "masked_keys_get_zero_weight",
                "not": _SOFTMAX_HINT,
            },
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
            "keys projected with proj_q",
            [("split_heads(self.proj_k(k))", "split_heads(self.proj_q(k))")],
            {
                "hint": "multihead_attention/keys-projected-with-proj-q",
                "says": "Your keys are projected with proj_q",
                "check": "mha_matches_reference",
                "not": (_MASK_HINT, _SOFTMAX_HINT),
            },
        ),
        (
            "keys projected with proj_v",
            [("split_heads(self.proj_k(k))", "split_heads(self.proj_v(k))")],
            {
                "hint": "multihead_attention/keys-projected-with-proj-v",
                "says": "Your keys are projected with proj_v",
                "not": _MASK_HINT,
            },
        ),
        (
            "values projected with proj_q",
            [("split_heads(self.proj_v(v))", "split_heads(self.proj_q(v))")],
            {
                "hint": "multihead_attention/values-projected-with-proj-q",
                "says": "Your values are projected with proj_q",
                "not": _MASK_HINT,
            },
        ),
        (
            "values projected with proj_k",
            [("split_heads(self.proj_v(v))", "split_heads(self.proj_k(v))")],
            {
                "hint": "multihead_attention/values-projected-with-proj-k",
                "says": "Your values are projected with proj_k",
                "not": _MASK_HINT,
            },
        ),
        (
            "keys and values swap projections",
            [
                ("split_heads(self.proj_k(k))", "split_heads(self.proj_v(k))"),
                ("split_heads(self.proj_v(v))", "split_heads(self.proj_k(v))"),
            ],
            {
                "hint": "multihead_attention/keys-and-values-swapped",
                "says": "Your keys and values swap their projections",
                "not": _MASK_HINT,
            },
        ),
        (
            "queries projected with proj_k",
            [("split_heads(self.proj_q(q))", "split_heads(self.proj_k(q))")],
            {
                "hint": "multihead_attention/queries-projected-with-proj-k",
                "says": "Your queries are projected with proj_k",
                "not": _MASK_HINT,
            },
        ),
        (
            "output projection left out",
            [("return self.proj_o(out), weights", "return out, weights")],
            {
                "hint": "multihead_attention/no-output-projection",
                "says": "Yours leaves out the output projection",
                "check": "mha_matches_reference",
                "not": (_MASK_HINT, _SOFTMAX_HINT),
            },
        ),
        (
            "heads merged without moving h back",
            [
                (
                    "out = jnp.swapaxes(out, -2, -3)\n        out = out.reshape(*out.shape[:-2], "
                    "self.d_model)",
                    "out = out.reshape(out.shape[0], -1, self.d_model)",
                )
            ],
            {
                "says": "Your attention weights match, so look after the attention",
                "not": _MASK_HINT,
            },
        ),
        (
            "a (B, 1, S_k) mask handled as (B, S_k)",
            [("if mask.ndim == 2:", "if mask.ndim >= 2:")],
            {
                "says": "a (B, 1, S_k) mask must become (B, 1, 1, S_k)",
                "check": "mha_masks",
                "not": _SOFTMAX_HINT,
            },
        ),
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
            "feed-forward called without is_train",
            [("dropout(self.feed_forward(x, is_train))", "dropout(self.feed_forward(x))")],
            {
                "hint": "any/is-train-not-passed-on",
                "says": _FLAG_DROPPED.format("x = self.norm_2(x + dropout(self.feed_forward(x)))"),
            },
        ),
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
        (
            "blocks called without is_train",
            [("x = block(x, mask, is_train)", "x = block(x, mask)")],
            {"says": _FLAG_DROPPED.format("x = block(x, mask)")},
        ),
        (
            "every map computed from the stack's input",
            [
                (
                    "x, weights = block(x, mask, is_train, return_attention=True)",
                    "_, weights = block(x, mask, is_train, return_attention=True)",
                )
            ],
            {"says": "Each block reads the previous block's output"},
        ),
        (
            "the last block's map left out",
            [("        return maps\n", "        return maps[:-1]\n")],
            {"says": "should return a list of 3 maps, one per block; yours returned a list of 2"},
        ),
        ("mask not passed", [("x = block(x, mask, is_train)", "x = block(x, None, is_train)")]),
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
        (
            "the result of pe.at[...].set thrown away",
            [
                (
                    "    table[:, 0::2] = np.sin(angles)",
                    "    jnp.asarray(table).at[:, 0::2].set(1.0)",
                ),
                (
                    "    table[:, 1::2] = np.cos(angles[:, : d_model // 2])",
                    "    jnp.asarray(table).at[:, 1::2].set(1.0)",
                ),
            ],
            {
                "says": "`pe = pe.at[...].set(...)`",
                "check": "table_closed_form",
                "not": _SOFTMAX_HINT,
            },
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

VARIANTS = {
    "masked_embedding": [
        (
            "jnp.where on the mask",
            [
                (
                    "return vectors * jnp.asarray(mask)[..., None].astype(vectors.dtype)",
                    "return jnp.where(jnp.asarray(mask)[..., None] != 0, vectors, 0.0)",
                )
            ],
        ),
    ],
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
            [(_SOFTMAX_WRITTEN_OUT, "weights = jax.nn.softmax(scores, axis=-1)\n" + _WEIGHTS_V)],
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
                    _SOFTMAX_WRITTEN_OUT,
                    "weights = jax.nn.softmax(scores, axis=-1, "
                    "where=None if mask is None else jnp.asarray(mask) != 0)\n" + _WEIGHTS_V,
                ),
            ],
        ),
        (
            "-inf with a guard for hidden rows",
            [
                ("jnp.finfo(scores.dtype).min", "-jnp.inf"),
                (
                    _SOFTMAX_WRITTEN_OUT,
                    "weights = jnp.nan_to_num(jax.nn.softmax(scores, axis=-1))\n" + _WEIGHTS_V,
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
    "positionwise_feed_forward": [
        (
            "jnp.maximum for the ReLU",
            [("jax.nn.relu(self.linear_1(x))", "jnp.maximum(self.linear_1(x), 0.0)")],
        ),
    ],
    "encoder_block": [
        (
            "the sub-layers by keyword, the attention maps returned apart",
            [
                (
                    "attended, weights = self.attention(x, x, x, mask)",
                    "attended, weights = self.attention(q=x, k=x, v=x, mask=mask)",
                ),
                (
                    "return (x, weights) if return_attention else x",
                    "if return_attention:\n            return x, weights\n        return x",
                ),
            ],
            {"slow": True},
        ),
    ],
    "transformer_encoder": [
        (
            "the blocks called by keyword, the maps collected by index",
            [
                ("x = block(x, mask, is_train)\n", "x = block(x, mask=mask, is_train=is_train)\n"),
                (
                    "            x, weights = block(x, mask, is_train, return_attention=True)\n"
                    "            maps.append(weights)\n",
                    "            out = block(x, mask, is_train, return_attention=True)\n"
                    "            x = out[0]\n"
                    "            maps.append(out[1])\n",
                ),
            ],
            {"slow": True},
        ),
    ],
    "classifier": [
        (
            "jnp.squeeze for the one logit",
            [
                (
                    "return self.head(pooled)[..., 0]",
                    "return jnp.squeeze(self.head(pooled), axis=-1)",
                )
            ],
            {"slow": True},
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
