MUTANTS = {"self_attention": [("padding attended to", [("mask[:, None, :]", "None")])]}
