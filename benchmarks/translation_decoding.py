"""Sentences per second of practical 3's translator decoding the whole window, greedy with
the key/value cache, greedy reading the prefix again at every position, and beam search.

    python benchmarks/translation_decoding.py [--repeats 3] [--batch 256]

The model has the ``translate`` preset's sizes (random parameters: decoding always runs all
``max_len`` positions, so speed does not depend on them), the sources are random token ids
of 12 tokens. Each figure is the median of ``--repeats`` runs after one that compiles; the
ratios are of figures of this run.
"""

from __future__ import annotations

import argparse
import statistics
import time

import jax
import numpy as np

from m2l_nlp import devices
from m2l_nlp.config import PRESETS
from m2l_nlp.data.tokenization import BOS_ID
from m2l_nlp.model import translators
from m2l_nlp.runs.translation import LENGTH_PENALTY, Translator

SOURCE = 12


def rate(run, sentences: int, repeats: int) -> float:
    jax.block_until_ready(run())  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(run())
        times.append(time.perf_counter() - start)
    return sentences / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--batch", type=int, default=256)
    args = parser.parse_args()
    config = PRESETS["translate"].model_config()
    funcs, practical = translators.translator(config, "solutions", start_id=BOS_ID)
    params = translators.init_params(funcs, 0, config.max_len)
    rng = np.random.default_rng(0)
    source = np.zeros((args.batch, config.max_len), np.int32)
    source[:, :SOURCE] = rng.integers(4, config.vocab_size, (args.batch, SOURCE))
    mask = (source != 0).astype(np.int32)
    print(f"devices: {devices.describe_devices()}; {config}; {args.batch} sentences a batch")
    translator = Translator(funcs, practical, config, tokenizer=None)  # the programs only

    def program(cached: bool, beam: int):
        translator.cached = cached
        jitted = translator.program(beam, LENGTH_PENALTY)
        return lambda: jitted(params, source, mask)

    figures = {
        "greedy, cached": rate(program(True, 0), args.batch, args.repeats),
        "greedy, recomputing": rate(program(False, 0), args.batch, args.repeats),
        "beam 4, cached": rate(program(True, 4), args.batch, args.repeats),
    }
    for name, figure in figures.items():
        print(f"{name:<20} {figure:8.1f} sentences/s")
    base = figures["greedy, cached"]
    print(
        f"cached / recomputing {base / figures['greedy, recomputing']:.1f}x; greedy / beam 4 "
        f"{base / figures['beam 4, cached']:.1f}x"
    )


if __name__ == "__main__":
    main()
