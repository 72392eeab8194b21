"""Training-mode slips of practical 2's reference (dropout elsewhere, missing or doubled), each
of which its exercise's training-mode check must catch, and correct modules that draw their
dropout keys in another order, which every check of the exercise must pass
(tests/grading/practicals/test_training_mode.py)."""

_HIDDEN = "            hidden = hk.dropout(hk.next_rng_key(), self.p_dropout, hidden)\n"
_ATTENTION = "        x = self.norm_1(x + dropout(attended))\n"
_FEED = "        x = self.norm_2(x + dropout(self.feed_forward(x, is_train)))\n"
_HELPER = (
    "        def dropout(y: jax.Array) -> jax.Array:\n"
    "            if is_train and self.p_dropout > 0:\n"
    "                return hk.dropout(hk.next_rng_key(), self.p_dropout, y)\n"
)
_STACK = "        for block in self.blocks:\n            x = block(x, mask, is_train)\n"
_PE = "            x = hk.dropout(hk.next_rng_key(), self.p_dropout, x)\n        return x\n"

MUTANTS = {
    "positionwise_feed_forward": [
        (
            "dropout on the input",
            [
                (_HIDDEN, "            pass\n"),
                (
                    "        hidden = jax.nn.relu(self.linear_1(x))\n",
                    "        if is_train:\n"
                    "            x = hk.dropout(hk.next_rng_key(), self.p_dropout, x)\n"
                    "        hidden = jax.nn.relu(self.linear_1(x))\n",
                ),
            ],
        ),
        (
            "dropout on the output",
            [
                (
                    _HIDDEN,
                    "            return hk.dropout(hk.next_rng_key(), self.p_dropout, "
                    "self.linear_2(hidden))\n",
                )
            ],
        ),
        ("dropout missing", [(_HIDDEN, "            pass\n")]),
        ("dropout twice", [(_HIDDEN, _HIDDEN + _HIDDEN)]),
    ],
    "encoder_block": [
        (
            "attention's dropout after the residual",
            [(_ATTENTION, _ATTENTION.replace("x + dropout(attended)", "dropout(x + attended)"))],
        ),
        (
            "attention's dropout missing",
            [(_ATTENTION, _ATTENTION.replace("dropout(attended)", "attended"))],
        ),
        (
            "attention's dropout twice",
            [(_ATTENTION, _ATTENTION.replace("dropout(attended)", "dropout(dropout(attended))"))],
        ),
        (
            "attention's dropout on the block's input",
            [(_ATTENTION, "        x = self.norm_1(dropout(x) + attended)\n")],
        ),
        (
            "feed-forward's dropout after the norm",
            [(_FEED, "        x = dropout(self.norm_2(x + self.feed_forward(x, is_train)))\n")],
        ),
        (
            "feed-forward's dropout missing",
            [(_FEED, "        x = self.norm_2(x + self.feed_forward(x, is_train))\n")],
        ),
        (
            "feed-forward's dropout on its input",
            [(_FEED, "        x = self.norm_2(x + self.feed_forward(dropout(x), is_train))\n")],
        ),
        (
            "feed-forward run in evaluation mode",
            [(_FEED, "        x = self.norm_2(x + dropout(self.feed_forward(x, False)))\n")],
        ),
    ],
    "transformer_encoder": [
        (
            "only the first block trains",
            [
                (
                    _STACK,
                    "        for i, block in enumerate(self.blocks):\n"
                    "            x = block(x, mask, is_train and i == 0)\n",
                )
            ],
        ),
        (
            "dropout between the blocks",
            [
                (
                    _STACK,
                    _STACK + "            if is_train:\n"
                    "                x = hk.dropout(hk.next_rng_key(), 0.5, x)\n",
                )
            ],
        ),
    ],
    "positional_encoding": [
        (
            "dropout before the table is added",
            [
                (
                    "        x = x + jnp.asarray(self.table[:seq_len], dtype=x.dtype)\n"
                    "        if is_train and self.p_dropout > 0:\n" + _PE,
                    "        if is_train and self.p_dropout > 0:\n"
                    "            x = hk.dropout(hk.next_rng_key(), self.p_dropout, x)\n"
                    "        return x + jnp.asarray(self.table[:seq_len], dtype=x.dtype)\n",
                )
            ],
        ),
        ("dropout missing", [(_PE, "            pass\n        return x\n")]),
        ("dropout twice", [(_PE, _PE.replace("        return x\n", "") + _PE)]),
    ],
    "classifier": [
        (
            "positional encoding run in evaluation mode",
            [
                (
                    "        x = self.positional(x, is_train)\n",
                    "        x = self.positional(x, False)\n",
                )
            ],
        ),
        (
            "encoder run in evaluation mode",
            [
                (
                    "        x = self.encoder(x, mask, is_train)\n",
                    "        x = self.encoder(x, mask, False)\n",
                )
            ],
        ),
        (
            "dropout on the pooled vector",
            [
                (
                    "        return self.head(pooled)[..., 0]\n",
                    "        if is_train:\n"
                    "            pooled = hk.dropout(hk.next_rng_key(), self.config.p_dropout, pooled)\n"
                    "        return self.head(pooled)[..., 0]\n",
                )
            ],
        ),
    ],
}

VARIANTS = {
    "positionwise_feed_forward": [
        ("a spare key drawn first", [(_HIDDEN, "            hk.next_rng_key()\n" + _HIDDEN)]),
    ],
    "encoder_block": [
        (
            "its two keys drawn first, used last first",
            [
                (
                    _HELPER,
                    "        keys = [hk.next_rng_key(), hk.next_rng_key()] if is_train else []\n\n"
                    + _HELPER.replace("hk.next_rng_key()", "keys.pop()"),
                )
            ],
        ),
    ],
    "transformer_encoder": [
        (
            "each block draws from a key of its own",
            [
                (
                    _STACK,
                    "        for block in self.blocks:\n"
                    "            if not is_train:\n"
                    "                x = block(x, mask, is_train)\n"
                    "                continue\n"
                    "            with hk.with_rng(jax.random.fold_in(hk.next_rng_key(), 3)):\n"
                    "                x = block(x, mask, is_train)\n",
                )
            ],
        ),
    ],
    "positional_encoding": [
        ("a spare key drawn first", [(_PE, "            hk.next_rng_key()\n" + _PE)]),
    ],
    "classifier": [
        (
            "the encoder draws from a key of its own, taken first",
            [
                (
                    "        x = self.positional(x, is_train)\n"
                    "        x = self.encoder(x, mask, is_train)\n",
                    "        if is_train:\n"
                    "            with hk.with_rng(jax.random.fold_in(hk.next_rng_key(), 5)):\n"
                    "                encoded = self.encoder(self.positional(x, is_train), mask, is_train)\n"
                    "        else:\n"
                    "            encoded = self.encoder(self.positional(x, is_train), mask, is_train)\n"
                    "        x = encoded\n",
                )
            ],
        ),
    ],
}
