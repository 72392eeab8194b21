MUTANTS = {"self_attention": [("padding attended to", [("mask[:, None, :]", "None")])]}

VARIANTS = {
    "self_attention": [
        (
            "the values unpacked",
            [
                (
                    "return scaled_dot_product(x, x, x, mask[:, None, :])[0]",
                    "values, _ = scaled_dot_product(x, x, x, mask[:, None, :])\n    return values",
                )
            ],
        )
    ]
}
