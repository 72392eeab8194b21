"""Characters per second of practical 3's language model writing, with the key/value cache
and by recomputing the window for every character, at 64 and 512 new characters.

    python benchmarks/generation.py [--repeats 3]

The model has the ``char-lm`` preset's sizes (random parameters: speed does not depend on
them), its window the prompt and the new characters (recomputing runs the model over it).
Each figure is the median of ``--repeats`` runs after one that compiles; the ratio is of
figures of this run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from m2l_nlp import devices
from m2l_nlp.config import PRESETS, TransformerConfig
from m2l_nlp.model import generation
from m2l_nlp.model.language_models import decoder, language_model

PROMPT = 16


def rate(run, new_chars: int, repeats: int) -> float:
    jax.block_until_ready(run())  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run())
        times.append(time.perf_counter() - start)
    return new_chars / statistics.median(times)


def measure(sizes: dict, new_chars: int, repeats: int) -> tuple[float, float]:
    """Characters per second ``(cached, recomputing)`` for ``new_chars`` new characters; the
    window holds the prompt and them (recomputing runs the model over all of it)."""
    config = TransformerConfig(**sizes, max_len=PROMPT + new_chars)
    funcs, p3 = language_model(config)
    prompt = np.arange(1, PROMPT + 1, dtype=np.int32)[None]
    params = funcs.init_params(jax.random.PRNGKey(0), prompt, np.ones_like(prompt), True)
    decode, key = decoder(config, p3), jax.random.PRNGKey(1)
    knobs = dict(new_chars=new_chars, sample=p3.sample_next, temperature=1.0, top_k=None)

    def way(step, layer_cache):
        state = generation.start(config, 1, (), layer_cache)
        return lambda: generation.generate(params, state, prompt, key, step=step, **knobs).ids

    cached = way(generation.cached(decode), p3.LayerCache)
    recomputing = way(generation.recomputing(decode), None)
    return rate(cached, new_chars, repeats), rate(recomputing, new_chars, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sizes = dict(PRESETS["char-lm"].model, vocab_size=100)
    print(f"devices: {devices.describe_devices()}; model {sizes}, a prompt of {PROMPT}")
    for new_chars in (64, 512):
        cached, plain = measure(sizes, new_chars, args.repeats)
        print(
            f"{new_chars:4d} new characters: cached {cached:8.1f} chars/s, recomputing "
            f"{plain:8.1f} chars/s, cached / recomputing {cached / plain:5.1f}x"
        )


if __name__ == "__main__":
    main()
