"""Mutants of practical 2's reference whose messages must name the slip (its other mutants,
and the hints of scaled_dot_product and positional_encoding, are in
tests/grading/practicals/test_practical2.py)."""

_MASK_HINT = "look at the mask"  # mha_masks' hint, for mask slips only
# The line that called a sub-module without is_train is named, not the sub-module's dropout.
_FLAG_DROPPED = ": `{}`)\nHint: this line calls a sub-module without is_train"

MUTANTS = {
    "scaled_dot_product": [
        (
            "scores not divided",
            [("/ math.sqrt(d_k)", "")],
            {"says": "Yours are the softmax of Q K^T without dividing the scores"},
        ),
        (
            "scores divided by d_k",
            [("/ math.sqrt(d_k)", "/ d_k")],
            {"says": "Yours are the softmax of Q K^T dividing them by d_k"},
        ),
    ],
    "multihead_attention": [
        (
            "keys projected with proj_q",
            [("split_heads(self.proj_k(k))", "split_heads(self.proj_q(k))")],
            {"says": "Your keys are projected with proj_q", "not": _MASK_HINT},
        ),
        (
            "keys projected with proj_v",
            [("split_heads(self.proj_k(k))", "split_heads(self.proj_v(k))")],
            {"says": "Your keys are projected with proj_v", "not": _MASK_HINT},
        ),
        (
            "values projected with proj_q",
            [("split_heads(self.proj_v(v))", "split_heads(self.proj_q(v))")],
            {"says": "Your values are projected with proj_q", "not": _MASK_HINT},
        ),
        (
            "values projected with proj_k",
            [("split_heads(self.proj_v(v))", "split_heads(self.proj_k(v))")],
            {"says": "Your values are projected with proj_k", "not": _MASK_HINT},
        ),
        (
            "keys and values swap projections",
            [
                ("split_heads(self.proj_k(k))", "split_heads(self.proj_v(k))"),
                ("split_heads(self.proj_v(v))", "split_heads(self.proj_k(v))"),
            ],
            {"says": "Your keys and values swap their projections", "not": _MASK_HINT},
        ),
        (
            "queries projected with proj_k",
            [("split_heads(self.proj_q(q))", "split_heads(self.proj_k(q))")],
            {"says": "Your queries are projected with proj_k", "not": _MASK_HINT},
        ),
        (
            "output projection left out",
            [("return self.proj_o(out), weights", "return out, weights")],
            {"says": "Yours leaves out the output projection", "not": _MASK_HINT},
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
            {"says": "a (B, 1, S_k) mask must become (B, 1, 1, S_k)"},
        ),
    ],
    "encoder_block": [
        (
            "feed-forward called without is_train",
            [("dropout(self.feed_forward(x, is_train))", "dropout(self.feed_forward(x))")],
            {"says": _FLAG_DROPPED.format("x = self.norm_2(x + dropout(self.feed_forward(x)))")},
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
    ],
}
