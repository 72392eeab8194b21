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
from m2l_nlp.config import PRESETS, LanguageModelConfig
from m2l_nlp.impl import load_practical
from m2l_nlp.model import generation
from m2l_nlp.model.language_models import cached_step
from m2l_nlp.transform import funcs_from_stateful

PROMPT = 16


def rate(run, new_chars: int, repeats: int) -> float:
    jax.block_until_ready(run())  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run())
        times.append(time.perf_counter() - start)
    return new_chars / statistics.median(times)


def measure(p3, sizes: dict, new_chars: int, repeats: int) -> tuple[float, float]:
    """Characters per second ``(cached, recomputing)`` for ``new_chars`` new characters; the
    window holds the prompt and them (recomputing runs the model over all of it)."""
    config = LanguageModelConfig(**sizes, max_len=PROMPT + new_chars)
    funcs = funcs_from_stateful(
        lambda ids, mask, is_train=True: p3.language_model_forward(ids, mask, is_train, config)
    )
    prompt = np.arange(1, PROMPT + 1, dtype=np.int32)[None]
    params = funcs.init_params(jax.random.PRNGKey(0), prompt, np.ones_like(prompt), True)
    step, caches = cached_step(config, p3), p3.empty_caches(config, 1)
    key = jax.random.PRNGKey(1)
    knobs = dict(new_chars=new_chars, sample=p3.sample_next, temperature=1.0, top_k=None)

    def cached():
        return generation.generate(params, caches, prompt, key, step=step, **knobs).ids

    def recomputing():
        apply, window = funcs.model_fw.apply, config.max_len
        return generation.generate_recomputing(
            params, prompt, key, apply=apply, window=window, **knobs
        ).ids

    return rate(cached, new_chars, repeats), rate(recomputing, new_chars, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    p3 = load_practical("practical3_translation", "solutions")
    sizes = dict(PRESETS["char-lm"].model, vocab_size=100)
    print(f"devices: {devices.describe_devices()}; model {sizes}, a prompt of {PROMPT}")
    for new_chars in (64, 512):
        cached, plain = measure(p3, sizes, new_chars, args.repeats)
        print(
            f"{new_chars:4d} new characters: cached {cached:8.1f} chars/s, recomputing "
            f"{plain:8.1f} chars/s, cached / recomputing {cached / plain:5.1f}x"
        )


if __name__ == "__main__":
    main()
