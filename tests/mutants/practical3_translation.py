"""Mutants of practical 3's reference: each must fail its exercise's checks (and, where a
third item says so, with a message that names the slip), and variants, correct code written
another way, that must pass every check of their exercise (see tests/grading/practicals/test_mutants.py)."""

_TRIL = "return jnp.tril(jnp.ones((seq_len, seq_len), jnp.int32))"
# the end of the block's self-attention (its two branches: without a cache and with one)
# and the sub-layers after it
_ATTEND = "attended, weights = attend_with_cache(self.attention, x, cache, at)\n"
_SAMPLE = "    return jax.random.categorical(key, scaled, axis=-1)\n"  # sample_next's draw
_BLOCK = (
    _ATTEND + "        x = self.norm_1(x + dropout(attended))\n"
    "        x = self.norm_2(x + dropout(self.feed_forward(x, is_train)))"
)

MUTANTS = {
    "causal_mask": [
        ("upper triangle", [("jnp.tril(jnp.ones((seq_len", "jnp.triu(jnp.ones((seq_len")]),
        ("diagonal hidden", [("jnp.int32))\n    # END", "jnp.int32), -1)\n    # END")]),
        ("off by one", [("jnp.int32))\n    # END", "jnp.int32), 1)\n    # END")]),
        (
            "additive, -inf",
            [
                (
                    _TRIL,
                    "return jnp.where(jnp.tril(jnp.ones((seq_len, seq_len))) == 1, 0.0, -jnp.inf)",
                )
            ],
            {
                "hint": "causal_mask/additive-mask",
                "says": "yours is an additive mask (0 where a key is visible, -inf for the future)",
            },
        ),
        (
            "additive, -1e9",
            [(_TRIL, "return jnp.where(jnp.tril(jnp.ones((seq_len, seq_len))) == 1, 0.0, -1e9)")],
            {
                "hint": "causal_mask/additive-mask",
                "says": "an additive mask (0 where a key is visible, a very negative number for",
            },
        ),
        (
            "the future marked, as PyTorch's boolean mask",
            [(_TRIL, "return jnp.triu(jnp.ones((seq_len, seq_len), jnp.int32), 1)")],
            {
                "hint": "causal_mask/future-marked-with-1",
                "says": "yours marks the future with 1, as PyTorch's boolean attn_mask does",
            },
        ),
    ],
    "decoder_block": [
        (
            "LayerNorm before the sub-layers",
            [
                (
                    "attended, weights = self.attention(x, x, x, visible)",
                    "attended, weights = self.attention(*[self.norm_1(x)] * 3, visible)",
                ),
                (
                    _BLOCK,
                    "attended, weights = attend_with_cache(self.attention, self.norm_1(x), "
                    "cache, at)\n"
                    "        x = x + dropout(attended)\n"
                    "        x = x + dropout(self.feed_forward(self.norm_2(x), is_train))",
                ),
            ],
            {
                "hint": "decoder_block/pre-layernorm",
                "says": "yours normalises before each sub-layer (pre-LayerNorm)",
            },
        ),
        (
            "norm_1 and norm_2 swapped",
            [
                (
                    _BLOCK,
                    _ATTEND + "        x = self.norm_2(x + dropout(attended))\n"
                    "        x = self.norm_1(x + dropout(self.feed_forward(x, is_train)))",
                )
            ],
            {"hint": "decoder_block/norms-swapped", "says": "Yours swaps norm_1 and norm_2"},
        ),
        (
            "LayerNorm inside the residual",
            [
                (
                    _BLOCK,
                    _ATTEND + "        x = x + self.norm_1(dropout(attended))\n"
                    "        x = x + self.norm_2(dropout(self.feed_forward(x, is_train)))",
                )
            ],
            {"says": "This block normalises after each residual (post-LayerNorm)"},
        ),
        (
            "no causal mask",
            [("causal_mask(x.shape[-2])[None, :, :] * jnp.asarray(mask)", "jnp.asarray(mask)")],
        ),
        ("padding attended to", [(" * jnp.asarray(mask)[:, None, :]", "")]),
        (
            "no residual",
            [
                (
                    "self.norm_1(x + dropout(attended))\n        x = self.norm_2(x + dropout(self.f",
                    "self.norm_1(dropout(attended))\n        x = self.norm_2(x + dropout(self.f",
                )
            ],
        ),
    ],
    "transformer_decoder": [
        (
            "blocks called without is_train",
            [
                (
                    "            x, _ = block(x, mask, is_train)\n",
                    "            x, _ = block(x, mask)\n",
                )
            ],
            {
                "hint": "any/is-train-not-passed-on",
                "says": ": `x, _ = block(x, mask)`)\nHint: this line calls a sub-module without is_train",
            },
        ),
        (
            "blocks not chained",
            [
                (
                    "            x, _ = block(x, mask, is_train)\n",
                    "            block(x, mask, is_train)\n",
                )
            ],
        ),
        (
            "mask not passed on",
            [
                (
                    "            x, _ = block(x, mask, is_train)\n",
                    "            x, _ = block(x, jnp.ones_like(mask), is_train)\n",
                )
            ],
        ),
        (
            "maps of one block",
            [
                (
                    "            maps.append(weights)\n        return maps",
                    "        maps.append(weights)\n        return maps",
                )
            ],
        ),
    ],
    "language_model": [
        (
            "positional encoding called without is_train",
            [
                (
                    "        x = self.positional(x, is_train)\n        x = self.decoder",
                    "        x = self.positional(x)\n        x = self.decoder",
                )
            ],
            {
                "hint": "any/is-train-not-passed-on",
                "says": ": `x = self.positional(x)`)\nHint: this line calls a sub-module without is_train",
            },
        ),
        (
            "no positions",
            [
                (
                    "        x = self.positional(x, is_train)\n        x = self.decoder",
                    "        x = self.decoder",
                )
            ],
        ),
        (
            "decoder skipped",
            [
                (
                    "        x = self.decoder(x, mask, is_train)\n        return self.head(x)",
                    "        return self.head(x)",
                )
            ],
        ),
        (
            "no padding mask",
            [
                (
                    "        x = self.decoder(x, mask, is_train)\n        return self.head(x)",
                    "        x = self.decoder(x, jnp.ones_like(mask), is_train)\n"
                    "        return self.head(x)",
                )
            ],
        ),
    ],
    "next_token_loss": [
        ("targets not shifted", [("log_softmax(logits[:, :-1]", "log_softmax(logits[:, 1:]")]),
        (
            "padding counted",
            [
                (
                    "counts = jnp.asarray(mask[:, 1:], logits.dtype)",
                    "counts = jnp.ones(targets.shape, logits.dtype)",
                )
            ],
        ),
        (
            "NaN without targets",
            [
                (
                    "-(picked * counts).sum() / jnp.maximum(counts.sum(), 1.0)\n    # END SOLUTION"
                    '\n\n\n# %% active="ipynb"\n# check("next_token_loss"',
                    "-(picked * counts).sum() / counts.sum()\n    # END SOLUTION"
                    '\n\n\n# %% active="ipynb"\n# check("next_token_loss"',
                )
            ],
        ),
    ],
    "sample_next": [
        ("temperature ignored", [("scaled = logits / temperature", "scaled = logits")]),
        ("top-k ignored", [("        scaled = jnp.where(scaled < kth, -jnp.inf, scaled)\n", "")]),
        (
            "softmax over the batch",
            [
                (
                    "categorical(key, scaled, axis=-1)",
                    "categorical(key, jax.nn.log_softmax(scaled, axis=0), axis=-1)",
                )
            ],
        ),
        # Samplers that never read their key: right frequencies in one call, the same draws
        # for every key (each passed every check while each check had one key).
        (
            "a key of its own, PRNGKey(0)",
            [
                (
                    _SAMPLE,
                    "    return jax.random.categorical(jax.random.PRNGKey(0), scaled, axis=-1)\n",
                )
            ],
            {"says": "your draws are the same for 64 different keys"},
        ),
        (
            "a fixed inverse CDF: row i of B draws at u = (i + 0.5) / B",
            [
                (
                    _SAMPLE,
                    "    u = (jnp.arange(scaled.shape[0]) + 0.5) / scaled.shape[0]\n"
                    "    cdf = jnp.cumsum(jax.nn.softmax(scaled, axis=-1), axis=-1)\n"
                    "    return (cdf < u[:, None]).sum(-1)\n",
                )
            ],
            {"says": "your draws are the same for 64 different keys"},
        ),
        (
            "a key read in part: its last bit",
            [
                (
                    _SAMPLE,
                    "    return jax.random.categorical(jax.random.PRNGKey(key[-1] % 2), scaled)\n",
                )
            ],
            {"says": "64 different keys gave only 2 different draws"},
        ),
    ],
    "attention_cache": [
        (
            "writing reads the positions from 0",
            [
                (
                    "table, at, x.shape[-2])\n            x, caches = self.decoder(",
                    "table, 0, x.shape[-2])\n            x, caches = self.decoder(",
                )
            ],
            {
                "hint": "any/wrong-only-one-position-at-a-time",
                "says": "one position at a time it is not: add the positional rows of positions at",
            },
        ),
        (
            "the decoder hands back the caches it was given",
            [("            return x, new_caches\n", "            return x, caches\n")],
        ),
        (
            "the block's cache branch attends without the cache",
            [
                (
                    _ATTEND,
                    "attended, _ = self.attention(x, x, x)\n            weights = cache\n",
                )
            ],
            {"says": "DecoderBlock runs attend_with_cache(self.attention, x, cache, at)"},
        ),
        (
            "cache not written",
            [
                (
                    "-1)), LayerCache(keys, values)",
                    "-1)), cache",
                )
            ],
        ),
        (
            "written one late",
            [
                (
                    "split_heads(attention.proj_k(x)), at, axis=2",
                    "split_heads(attention.proj_k(x)), at + 1, axis=2",
                ),
                (
                    "split_heads(attention.proj_v(x)), at, axis=2",
                    "split_heads(attention.proj_v(x)), at + 1, axis=2",
                ),
            ],
        ),
        (
            "later keys read",
            [
                (
                    "out, _ = scaled_dot_product(queries, keys, values, visible)",
                    "out, _ = scaled_dot_product(queries, keys, values)",
                )
            ],
        ),
        (
            "new positions see each other",
            [
                (
                    "positions = at + jnp.arange(x.shape[-2])",
                    "positions = at + x.shape[-2] - 1 + 0 * jnp.arange(x.shape[-2])",
                )
            ],
        ),
    ],
    "translation_block": [
        (
            "the cache branch attends without the cache",
            [
                (
                    "attended, self_weights = attend_with_cache(self.self_attention, x, cache, at)",
                    "attended, _ = self.self_attention(x, x, x)\n            self_weights = cache",
                )
            ],
            {"says": "Given a cache, the self-attention is attend_with_cache"},
        ),
        (
            "LayerNorm before the sub-layers",
            [
                (
                    "attended, self_weights = self.self_attention(x, x, x, visible)",
                    "attended, self_weights = self.self_attention(*[self.norm_1(x)] * 3, visible)",
                ),
                (
                    "attended, self_weights = attend_with_cache(self.self_attention, x, cache, at)\n"
                    "        x = self.norm_1(x + dropout(attended))\n"
                    "        read, cross_weights = self.cross_attention(x, memory, memory, "
                    "source_mask)\n"
                    "        x = self.norm_2(x + dropout(read))\n"
                    "        x = self.norm_3(x + dropout(self.feed_forward(x, is_train)))",
                    "attended, self_weights = attend_with_cache(self.self_attention, "
                    "self.norm_1(x), cache, at)\n"
                    "        x = x + dropout(attended)\n"
                    "        y = self.norm_2(x)\n"
                    "        read, cross_weights = self.cross_attention(y, memory, memory, "
                    "source_mask)\n"
                    "        x = x + dropout(read)\n"
                    "        x = x + dropout(self.feed_forward(self.norm_3(x), is_train))",
                ),
            ],
            {
                "hint": "translation_block/pre-layernorm",
                "says": "Your self-attention weights are the reference's for norm_1(x)",
            },
        ),
        (
            "cross-attention reads the decoder",
            [
                (
                    "self.cross_attention(x, memory, memory, source_mask)",
                    "self.cross_attention(x, x, x, target_mask)",
                )
            ],
        ),
        (
            "source mask missing",
            [
                (
                    "self.cross_attention(x, memory, memory, source_mask)",
                    "self.cross_attention(x, memory, memory)",
                )
            ],
        ),
        (
            "no causal mask",
            [
                (
                    "visible = causal_mask(x.shape[-2])[None, :, :] * jnp.asarray(target_mask)",
                    "visible = jnp.asarray(target_mask)",
                )
            ],
        ),
        (
            "cross-attention before self-attention's norm",
            [
                (
                    "x = self.norm_1(x + dropout(attended))\n        read",
                    "y = self.norm_1(x + dropout(attended))\n        read",
                )
            ],
        ),
    ],
    "transformer": [
        (
            "translating reads the positions from 0",
            [
                (
                    "table, at, x.shape[-2])\n            x, new_caches = ",
                    "table, 0, x.shape[-2])\n            x, new_caches = ",
                )
            ],
            {"says": "add the positional rows of positions at"},
        ),
        (
            "source mask not passed to the blocks",
            [
                (
                    "x, _, _ = block(x, target_mask, memory, source_mask, is_train)",
                    "x, _, _ = block(x, target_mask, memory, jnp.ones_like(source_mask), is_train)",
                )
            ],
        ),
        (
            "no positions on the target",
            [
                (
                    "x = self.positional(self.embedding(target_ids, target_mask), is_train)\n        for",
                    "x = self.embedding(target_ids, target_mask)\n        for",
                )
            ],
        ),
        (
            "blocks not chained",
            [
                (
                    "            x, _, _ = block(x, target_mask, memory, source_mask, is_train)\n        return self.head(x)",
                    "            y, _, _ = block(x, target_mask, memory, source_mask, is_train)\n        return self.head(y)",
                )
            ],
        ),
    ],
    "shift_right": [
        (
            "not shifted",
            [("return jnp.concatenate([start, ids[..., :-1]], axis=-1)", "return ids")],
        ),
        (
            "shifted left",
            [
                (
                    "return jnp.concatenate([start, ids[..., :-1]], axis=-1)",
                    "return jnp.concatenate([ids[..., 1:], start], axis=-1)",
                )
            ],
        ),
        (
            "start token dropped",
            [
                (
                    "jnp.full((*ids.shape[:-1], 1), first, ids.dtype)",
                    "jnp.zeros((*ids.shape[:-1], 1), ids.dtype)",
                )
            ],
        ),
    ],
    "sequence_loss": [
        (
            "padding counted",
            [
                (
                    "counts = jnp.asarray(mask, logits.dtype)",
                    "counts = jnp.ones(jnp.shape(mask), logits.dtype)",
                )
            ],
        ),
        (
            "shifted a second time",
            [
                (
                    "log_probs = jax.nn.log_softmax(logits, axis=-1)\n    picked = jnp.take_along_axis(log_probs, jnp.asarray(targets)[..., None]",
                    "log_probs = jax.nn.log_softmax(logits[:, :-1], axis=-1)\n    picked = jnp.take_along_axis(log_probs, jnp.asarray(targets)[:, 1:, None]",
                ),
                (
                    "counts = jnp.asarray(mask, logits.dtype)",
                    "counts = jnp.asarray(mask, logits.dtype)[:, 1:]",
                ),
            ],
        ),
        (
            "divided by every position",
            [
                (
                    '/ jnp.maximum(counts.sum(), 1.0)\n    # END SOLUTION\n\n\n# %% active="ipynb"\n# check("sequence_loss"',
                    '/ counts.size\n    # END SOLUTION\n\n\n# %% active="ipynb"\n# check("sequence_loss"',
                )
            ],
        ),
    ],
    "greedy_decode": [
        (
            "end token ignored",
            [("new = jnp.where(done, 0, jnp.argmax(", "new = jnp.where(False, 0, jnp.argmax(")],
        ),
        (
            "all rows end together",
            [
                (
                    "return new, state, done | (new == end_id), out",
                    "return new, state, done | (new == end_id).any(), out",
                )
            ],
        ),
        (
            "start token fed every step",
            [("logits, state = step(tokens, at, state)", "logits, state = step(start, at, state)")],
        ),
        (
            "state not carried",
            [("logits, state = step(tokens, at, state)", "logits, _ = step(tokens, at, state)")],
        ),
    ],
}

VARIANTS = {
    "causal_mask": [
        (
            "positions compared",
            [
                (
                    "return jnp.tril(jnp.ones((seq_len, seq_len), jnp.int32))",
                    "rows = jnp.arange(seq_len)\n"
                    "    return (rows[None, :] <= rows[:, None]).astype(jnp.int32)",
                )
            ],
        ),
    ],
    "decoder_block": [
        (
            "a boolean mask",
            [
                (
                    "visible = causal_mask(x.shape[-2])[None, :, :] * jnp.asarray(mask)[:, None, :]",
                    "visible = (causal_mask(x.shape[-2])[None] != 0) & "
                    "(jnp.asarray(mask)[:, None, :] != 0)",
                )
            ],
            {"slow": True},
        ),
    ],
    "transformer_decoder": [
        (
            "the block's output indexed",
            [
                (
                    "        for block in self.blocks:\n            x, _ = block(x, mask, is_train)\n",
                    "        for block in self.blocks:\n            x = block(x, mask, is_train)[0]\n",
                )
            ],
            {"slow": True},
        ),
    ],
    "language_model": [
        (
            "the decoder called by keyword",
            [
                (
                    "x = self.decoder(x, mask, is_train)\n",
                    "x = self.decoder(x, mask=mask, is_train=is_train)\n",
                )
            ],
            {"slow": True},
        ),
    ],
    "next_token_loss": [
        (
            "the target's log-probability through a one-hot",
            [
                (
                    "picked = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]",
                    "picked = (log_probs * jax.nn.one_hot(targets, logits.shape[-1])).sum(-1)",
                )
            ],
        ),
    ],
    "attention_cache": [
        (
            "the visible keys by a difference of positions",
            [
                (
                    "visible = jnp.arange(keys.shape[2])[None, :] <= positions[:, None]",
                    "visible = jnp.arange(keys.shape[2])[None, :] - positions[:, None] <= 0",
                )
            ],
            {"slow": True},
        ),
    ],
    "translation_block": [
        (
            "the cross-attention by keyword",
            [
                (
                    "read, cross_weights = self.cross_attention(x, memory, memory, source_mask)",
                    "read, cross_weights = self.cross_attention(\n"
                    "            q=x, k=memory, v=memory, mask=source_mask\n        )",
                )
            ],
            {"slow": True},
        ),
    ],
    "transformer": [
        (
            "decode called by keyword",
            [
                (
                    "return self.decode(target_ids, target_mask, memory, source_mask, is_train)",
                    "return self.decode(\n            target_ids, target_mask, memory=memory, "
                    "source_mask=source_mask, is_train=is_train\n        )",
                )
            ],
            {"slow": True},
        ),
    ],
    "shift_right": [
        (
            "jnp.roll, then the first set",
            [
                (
                    "    start = jnp.full((*ids.shape[:-1], 1), first, ids.dtype)\n"
                    "    return jnp.concatenate([start, ids[..., :-1]], axis=-1)",
                    "    return jnp.roll(ids, 1, axis=-1).at[..., 0].set(first)",
                )
            ],
        ),
    ],
    "sequence_loss": [
        (
            "the target's log-probability through a one-hot",
            [
                (
                    "picked = jnp.take_along_axis(log_probs, jnp.asarray(targets)[..., None], "
                    "axis=-1)[..., 0]",
                    "picked = (log_probs * jax.nn.one_hot(jnp.asarray(targets), "
                    "logits.shape[-1])).sum(-1)",
                )
            ],
        ),
    ],
    "greedy_decode": [
        (
            "finished rows zeroed by arithmetic",
            [
                (
                    "new = jnp.where(done, 0, jnp.argmax(logits, axis=-1).astype(start.dtype))",
                    "new = jnp.argmax(logits, axis=-1).astype(start.dtype) * ~done",
                )
            ],
        ),
    ],
    "sample_next": [
        # the draws of jax.random.categorical, bit for bit: it is Gumbel-max inside
        (
            "Gumbel-max",
            [
                (
                    _SAMPLE,
                    "    return jnp.argmax(scaled + jax.random.gumbel(key, scaled.shape), -1)\n",
                )
            ],
        ),
        # the same law, other draws: the first of exponential clocks of rates p to ring (a
        # clock of 0 on an id of p = 0 is 0 / 0: that id never rings)
        (
            "Gumbel-max as a race of exponential clocks",
            [
                (
                    _SAMPLE,
                    "    probs = jax.nn.softmax(scaled, axis=-1)\n"
                    "    clocks = jax.random.exponential(key, scaled.shape)\n"
                    "    rings = jnp.where(probs > 0, clocks / probs, jnp.inf)\n"
                    "    return jnp.argmin(rings, axis=-1)\n",
                )
            ],
        ),
        (
            "an inverse CDF of its own uniforms",
            [
                (
                    _SAMPLE,
                    "    cdf = jnp.cumsum(jax.nn.softmax(scaled, axis=-1), axis=-1)\n"
                    "    u = jax.random.uniform(key, scaled.shape[:-1] + (1,)) * cdf[..., -1:]\n"
                    "    return (cdf < u).sum(-1)\n",
                )
            ],
        ),
        (
            "jax.random.choice, one key a row",
            [
                (
                    _SAMPLE,
                    "    keys = jax.random.split(key, scaled.shape[0])\n"
                    "    probs = jax.nn.softmax(scaled, axis=-1)\n"
                    "    pick = lambda k, p: jax.random.choice(k, p.size, p=p)  # noqa: E731\n"
                    "    return jax.vmap(pick)(keys, probs)\n",
                )
            ],
        ),
    ],
}
