"""Training-mode slips of practical 3's reference (dropout elsewhere, missing or doubled), each
of which its exercise's training-mode check must catch, and correct modules that draw their
dropout keys in another order, which every check of the exercise must pass
(tests/grading/practicals/test_training_mode.py)."""

_HELPER = (
    "        def dropout(y: jax.Array) -> jax.Array:\n"
    "            if is_train and self.p_dropout > 0:\n"
    "                return hk.dropout(hk.next_rng_key(), self.p_dropout, y)\n"
    "            return y\n\n"
    "        if cache is None:\n"
    "            visible = causal_mask(x.shape[-2])[None, :, :] * jnp.asarray("
)
_D_HELPER = _HELPER + "mask)"  # DecoderBlock's
_T_HELPER = _HELPER + "target_mask)"  # TranslationBlock's
# DecoderBlock's two sub-layers (the TranslationBlock's lines differ around them)
_D_ATT = "        x = self.norm_1(x + dropout(attended))\n        x = self.norm_2("
_D_FEED = "        x = self.norm_2(x + dropout(self.feed_forward(x, is_train)))\n        return x, weights\n"
_T_SELF = "        x = self.norm_1(x + dropout(attended))\n        read"
_T_CROSS = "        x = self.norm_2(x + dropout(read))\n"
_T_FEED = "        x = self.norm_3(x + dropout(self.feed_forward(x, is_train)))\n"
_STACK = "        for block in self.blocks:\n            x, _ = block(x, mask, is_train)\n"
_LM = "        x = self.positional(x, is_train)\n        x = self.decoder(x, mask, is_train)\n"
_ENCODE = "        x = self.positional(self.embedding(source_ids, source_mask), is_train)\n"
_DECODE = (
    "        x = self.positional(self.embedding(target_ids, target_mask), is_train)\n        for"
)
_MEMORY = "        memory = self.encode(source_ids, source_mask, is_train)\n"

MUTANTS = {
    "decoder_block": [
        (
            "attention's dropout after the residual",
            [(_D_ATT, _D_ATT.replace("x + dropout(attended)", "dropout(x + attended)"))],
        ),
        (
            "attention's dropout missing",
            [(_D_ATT, _D_ATT.replace("dropout(attended)", "attended"))],
        ),
        (
            "attention's dropout twice",
            [(_D_ATT, _D_ATT.replace("dropout(attended)", "dropout(dropout(attended))"))],
        ),
        (
            "feed-forward's dropout missing",
            [
                (
                    _D_FEED,
                    _D_FEED.replace(
                        "dropout(self.feed_forward(x, is_train))", "self.feed_forward(x, is_train)"
                    ),
                )
            ],
        ),
        (
            "feed-forward's dropout after the norm",
            [
                (
                    _D_FEED,
                    _D_FEED.replace(
                        "x = self.norm_2(x + dropout(self.feed_forward(x, is_train)))",
                        "x = dropout(self.norm_2(x + self.feed_forward(x, is_train)))",
                    ),
                )
            ],
        ),
        (
            "feed-forward run in evaluation mode",
            [
                (
                    _D_FEED,
                    _D_FEED.replace(
                        "self.feed_forward(x, is_train)", "self.feed_forward(x, False)"
                    ),
                )
            ],
        ),
    ],
    "transformer_decoder": [
        (
            "only the first block trains",
            [
                (
                    _STACK,
                    "        for i, block in enumerate(self.blocks):\n"
                    "            x, _ = block(x, mask, is_train and i == 0)\n",
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
    "language_model": [
        (
            "positional encoding run in evaluation mode",
            [(_LM, _LM.replace("self.positional(x, is_train)", "self.positional(x, False)"))],
        ),
        (
            "decoder run in evaluation mode",
            [(_LM, _LM.replace("self.decoder(x, mask, is_train)", "self.decoder(x, mask, False)"))],
        ),
        (
            "dropout on the logits",
            [
                (
                    _LM + "        return self.head(x)\n",
                    _LM + "        if is_train:\n"
                    "            return hk.dropout(hk.next_rng_key(), self.config.p_dropout, self.head(x))\n"
                    "        return self.head(x)\n",
                )
            ],
        ),
    ],
    "translation_block": [
        (
            "self-attention's dropout missing",
            [(_T_SELF, _T_SELF.replace("dropout(attended)", "attended"))],
        ),
        (
            "cross-attention's dropout missing",
            [(_T_CROSS, _T_CROSS.replace("dropout(read)", "read"))],
        ),
        (
            "cross-attention's dropout after the residual",
            [(_T_CROSS, _T_CROSS.replace("x + dropout(read)", "dropout(x + read)"))],
        ),
        (
            "cross-attention's dropout on the memory",
            [
                (_T_CROSS, _T_CROSS.replace("dropout(read)", "read")),
                (
                    "self.cross_attention(x, memory, memory, source_mask)",
                    "self.cross_attention(x, dropout(memory), dropout(memory), source_mask)",
                ),
            ],
        ),
        (
            "feed-forward's dropout missing",
            [
                (
                    _T_FEED,
                    _T_FEED.replace(
                        "dropout(self.feed_forward(x, is_train))", "self.feed_forward(x, is_train)"
                    ),
                )
            ],
        ),
        (
            "feed-forward run in evaluation mode",
            [
                (
                    _T_FEED,
                    _T_FEED.replace(
                        "self.feed_forward(x, is_train)", "self.feed_forward(x, False)"
                    ),
                )
            ],
        ),
    ],
    "transformer": [
        (
            "source positions in evaluation mode",
            [(_ENCODE, _ENCODE.replace("), is_train)", "), False)"))],
        ),
        (
            "target positions in evaluation mode",
            [(_DECODE, _DECODE.replace("), is_train)", "), False)"))],
        ),
        (
            "encoder run in evaluation mode",
            [
                (
                    "        return self.encoder(x, source_mask, is_train)\n",
                    "        return self.encoder(x, source_mask, False)\n",
                )
            ],
        ),
        (
            "blocks run in evaluation mode",
            [
                (
                    "x, _, _ = block(x, target_mask, memory, source_mask, is_train)",
                    "x, _, _ = block(x, target_mask, memory, source_mask, False)",
                )
            ],
        ),
        (
            "dropout on the memory",
            [
                (
                    _MEMORY,
                    _MEMORY + "        if is_train:\n"
                    "            memory = hk.dropout(hk.next_rng_key(), self.config.p_dropout, memory)\n",
                )
            ],
        ),
    ],
}

VARIANTS = {
    "decoder_block": [
        (
            "its two keys drawn first, used last first",
            [
                (
                    _D_HELPER,
                    "        keys = [hk.next_rng_key(), hk.next_rng_key()] if is_train else []\n\n"
                    + _D_HELPER.replace("hk.next_rng_key()", "keys.pop()"),
                ),
            ],
        ),
    ],
    "transformer_decoder": [
        (
            "each block draws from a key of its own",
            [
                (
                    _STACK,
                    "        for block in self.blocks:\n"
                    "            if not is_train:\n"
                    "                x, _ = block(x, mask, is_train)\n"
                    "                continue\n"
                    "            with hk.with_rng(jax.random.fold_in(hk.next_rng_key(), 3)):\n"
                    "                x, _ = block(x, mask, is_train)\n",
                )
            ],
        ),
    ],
    "language_model": [
        (
            "the decoder's keys drawn before the positions'",
            [
                (
                    _LM,
                    "        if is_train:\n"
                    "            with hk.with_rng(jax.random.fold_in(hk.next_rng_key(), 5)):\n"
                    "                x = self.decoder(self.positional(x, is_train), mask, is_train)\n"
                    "        else:\n"
                    "            x = self.decoder(self.positional(x, is_train), mask, is_train)\n",
                )
            ],
        ),
    ],
    "translation_block": [
        (
            "its three keys drawn first, used last first",
            [
                (
                    _T_HELPER,
                    "        keys = [hk.next_rng_key() for _ in range(3)] if is_train else []\n\n"
                    + _T_HELPER.replace("hk.next_rng_key()", "keys.pop()"),
                )
            ],
        ),
    ],
    "transformer": [
        (
            "the decoder's keys drawn before the encoder's",
            [
                (
                    _MEMORY,
                    "        if is_train:\n"
                    "            with hk.with_rng(jax.random.fold_in(hk.next_rng_key(), 7)):\n"
                    "                memory = self.encode(source_ids, source_mask, is_train)\n"
                    "        else:\n"
                    "            memory = self.encode(source_ids, source_mask, is_train)\n",
                )
            ],
        ),
    ],
}
