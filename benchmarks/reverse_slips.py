"""What the notebook's reverse-sequence task detects: its accuracy for the reference and for
the usual slips in the attention, each trained exactly as the notebook's cell trains them.

    python benchmarks/reverse_slips.py

Prints, per variant, the digits and whole sequences reversed right, and the mean attention
weight on the anti-diagonal (1.0 for a perfect reversal map, 1 / L for uniform attention).
"""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np

from m2l_nlp.config import ReverseConfig
from m2l_nlp.train.reverse import anti_diagonal_mass, reverse_batch, train_reverse

ROOT = Path(__file__).resolve().parent.parent
SOURCE = (ROOT / "solutions" / "practical2_transformers.py").read_text()

SLIPS = {
    "reference": [],
    "softmax over the queries": [
        ("scores.max(axis=-1, keepdims=True)", "scores.max(axis=-2, keepdims=True)"),
        ("unnormalised.sum(axis=-1, keepdims=True)", "unnormalised.sum(axis=-2, keepdims=True)"),
        ("jnp.matmul(unnormalised, v) / total", "jnp.matmul(unnormalised / total, v)"),
    ],
    "heads reshaped without the transpose": [
        (
            "x = x.reshape(*x.shape[:-1], self.num_heads, self.d_head)\n"
            "            return jnp.swapaxes(x, -2, -3)",
            "return x.reshape(x.shape[0], self.num_heads, x.shape[1], self.d_head)",
        )
    ],
    "scores not scaled": [("/ math.sqrt(d_k)", "")],
    "no positional encoding": [
        ("x = x + jnp.asarray(self.table[:seq_len], dtype=x.dtype)", "x = x")
    ],
}


def module_with(edits: list[tuple[str, str]], folder: Path, name: str):
    text = SOURCE
    for old, new in edits:
        if old not in text:
            raise SystemExit(f"{name}: {old!r} is not in the solution any more")
        text = text.replace(old, new)
    path = folder / f"variant_{abs(hash(name))}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    config = ReverseConfig()
    digits, _ = reverse_batch(np.random.default_rng(0), 64, config.seq_len)
    print(f"{'variant':40s} {'digits':>7s} {'sequences':>10s} {'anti-diagonal':>14s} {'s':>5s}")
    with tempfile.TemporaryDirectory() as folder:
        for name, edits in SLIPS.items():
            result = train_reverse(config, module=module_with(edits, Path(folder), name))
            mass = max(anti_diagonal_mass(np.asarray(m)) for m in result.attention_maps(digits))
            print(
                f"{name:40s} {result.accuracy:7.1%} {result.sequence_accuracy:10.1%} "
                f"{mass:14.2f} {result.seconds:5.1f}"
            )


if __name__ == "__main__":
    main()
