"""Mutants of practical 1's reference: slips a student could plausibly make, each of which
must fail its exercise with a message in words (tests/grading/practicals/test_mutants.py)."""

MUTANTS = {
    "multi_hot": [
        ("counts instead of 0/1", [(".max(present)", ".add(present)")]),
        (
            "padding counted",
            [
                (
                    "present = (jnp.asarray(mask) != 0).astype(jnp.float32)",
                    "present = jnp.ones(ids.shape, jnp.float32)",
                )
            ],
        ),
        (".set loses repeated ids", [(".max(present)", ".set(present)")]),
        (
            "int output",
            [
                (
                    "return out.at[rows, ids].max(present)",
                    "return out.at[rows, ids].max(present).astype(jnp.int32)",
                )
            ],
        ),
    ],
    "bag_of_bigrams": [
        (
            "pair order swapped",
            [("(first * vocab_size + second)", "(second * vocab_size + first)")],
        ),
        (
            "pair mask from the first token only",
            [("pair_mask = valid[:, :-1] & valid[:, 1:]", "pair_mask = valid[:, :-1]")],
        ),
        (
            "no modulo",
            [
                (
                    "buckets = (first * vocab_size + second) % num_buckets",
                    "buckets = first * vocab_size + second",
                )
            ],
        ),
        (
            "masked pairs counted in the bag",
            [
                (
                    "multi_hot(buckets, pair_mask, num_buckets)",
                    "multi_hot(buckets, jnp.ones_like(pair_mask), num_buckets)",
                )
            ],
        ),
        ("bigrams before unigrams", [("[unigrams, bigrams]", "[bigrams, unigrams]")]),
    ],
    "tfidf": [
        ("df sums the values", [("df = (features != 0).sum(axis=0)", "df = features.sum(axis=0)")]),
        (
            "no smoothing",
            [("jnp.log((1.0 + n) / (1.0 + df))", "jnp.log(n / jnp.maximum(df, 1.0))")],
        ),
        ("no + 1", [("(1.0 + df)) + 1.0)", "(1.0 + df)))")]),
        (
            "L1 instead of L2 norm",
            [
                (
                    "norm = jnp.sqrt((weighted**2).sum(axis=-1, keepdims=True))",
                    "norm = jnp.abs(weighted).sum(axis=-1, keepdims=True)",
                )
            ],
        ),
        ("NaN on empty rows", [("weighted / jnp.maximum(norm, 1e-12)", "weighted / norm")]),
        ("columns normalised", [("sum(axis=-1, keepdims=True)", "sum(axis=0, keepdims=True)")]),
    ],
    "mlp_classifier": [
        ("no ReLU", [("x = jax.nn.relu(layer(x))", "x = layer(x)")]),
        (
            "dropout in evaluation",
            [
                (
                    "if is_train and self.p_dropout > 0:\n                x = hk.dropout",
                    "if self.p_dropout > 0:\n                x = hk.dropout",
                )
            ],
        ),
        (
            "no dropout",
            [
                (
                    "if is_train and self.p_dropout > 0:\n                x = hk.dropout",
                    "if False:\n                x = hk.dropout",
                )
            ],
        ),
        ("(B, 1) logits", [("return self.head(x)[..., 0]", "return self.head(x)")]),
        (
            "ReLU on the logits",
            [("return self.head(x)[..., 0]", "return jax.nn.relu(self.head(x))[..., 0]")],
        ),
    ],
    "lstm_classifier": [
        ("padding not masked", [("jnp.where(keep_t, new, old)", "new")]),
        ("cell instead of hidden", [("hidden = final.hidden", "hidden = final.cell")]),
        (
            "scan over the batch axis",
            [
                (
                    "xs = (jnp.swapaxes(x, 0, 1), jnp.swapaxes(keep, 0, 1)[..., None])",
                    "xs = (x, keep[..., None])",
                )
            ],
        ),
        (
            "dropout in evaluation",
            [
                (
                    "if is_train and self.p_dropout > 0:\n            hidden = hk.dropout",
                    "if self.p_dropout > 0:\n            hidden = hk.dropout",
                )
            ],
        ),
        (
            "reads the sequence backwards",
            [
                (
                    "xs = (jnp.swapaxes(x, 0, 1), jnp.swapaxes(keep, 0, 1)[..., None])",
                    "xs = (jnp.swapaxes(x, 0, 1)[::-1], jnp.swapaxes(keep, 0, 1)[::-1, ..., None])",
                )
            ],
        ),
    ],
}


# Correct answers written otherwise: each must pass every check of its exercise.
VARIANTS = {
    "multi_hot": [
        (
            "counts added, then clipped at 1",
            [
                (
                    "return out.at[rows, ids].max(present)",
                    "return jnp.minimum(out.at[rows, ids].add(present), 1.0)",
                )
            ],
        ),
    ],
    "bag_of_bigrams": [
        (
            "jnp.logical_and and jnp.mod",
            [
                (
                    "pair_mask = valid[:, :-1] & valid[:, 1:]",
                    "pair_mask = jnp.logical_and(valid[:, :-1], valid[:, 1:])",
                ),
                (
                    "buckets = (first * vocab_size + second) % num_buckets",
                    "buckets = jnp.mod(first * vocab_size + second, num_buckets)",
                ),
            ],
        ),
    ],
    "tfidf": [
        (
            "count_nonzero, log1p and jnp.linalg.norm",
            [
                (
                    "df = (features != 0).sum(axis=0).astype(jnp.float32)",
                    "df = jnp.count_nonzero(features, axis=0).astype(jnp.float32)",
                ),
                (
                    "return (jnp.log((1.0 + n) / (1.0 + df)) + 1.0).astype(jnp.float32)",
                    "return (jnp.log1p(n) - jnp.log1p(df) + 1.0).astype(jnp.float32)",
                ),
                (
                    "norm = jnp.sqrt((weighted**2).sum(axis=-1, keepdims=True))",
                    "norm = jnp.linalg.norm(weighted, axis=-1, keepdims=True)",
                ),
            ],
        ),
    ],
    "mlp_classifier": [
        (
            "jnp.maximum for the ReLU",
            [("x = jax.nn.relu(layer(x))", "x = jnp.maximum(layer(x), 0.0)")],
        ),
    ],
    "lstm_classifier": [
        (
            "the state kept by arithmetic on the mask",
            [
                (
                    "lambda new, old: jnp.where(keep_t, new, old)",
                    "lambda new, old: new * keep_t + old * ~keep_t",
                )
            ],
            {"slow": True},
        ),
    ],
}
