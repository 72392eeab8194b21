"""Mutants of practical 3's reference: each must fail its exercise's checks."""

MUTANTS = {
    "causal_mask": [
        ("upper triangle", [("jnp.tril(jnp.ones((seq_len", "jnp.triu(jnp.ones((seq_len")]),
        ("diagonal hidden", [("jnp.int32))\n    # END", "jnp.int32), -1)\n    # END")]),
        ("off by one", [("jnp.int32))\n    # END", "jnp.int32), 1)\n    # END")]),
    ],
    "decoder_block": [
        ("no causal mask", [("causal_mask(x.shape[-2])[None, :, :] * ", "")]),
        ("padding attended to", [(" * jnp.asarray(mask)[:, None, :]", "")]),
        ("no residual", [("self.norm_1(x + dropout(attended))", "self.norm_1(dropout(attended))")]),
    ],
    "transformer_decoder": [
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
        ("NaN without targets", [("jnp.maximum(counts.sum(), 1.0)", "counts.sum()")]),
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
    ],
    "attention_cache": [
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
}
