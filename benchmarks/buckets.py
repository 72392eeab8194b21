"""Length buckets and micro-batches of the `default` recipe: compile time against padding.

Every length bucket is one more compiled training step (seconds each on a CPU), and
every coarser bucket computes more padding. This script trains the `default` preset's model
for one epoch on the first ``--examples`` training reviews of IMDB, once per bucket list and
micro-batch budget, each in a fresh process with no persistent compilation cache, and prints
the programs compiled, the seconds spent compiling, and the epoch's seconds with and without
them (median of ``--repeats`` further epochs, compiled already).

    python benchmarks/buckets.py --data ../shared/data/aclImdb_v1_labeled.tar.gz
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

LISTS = {
    "32-step to 384 (14 below 512)": (*range(32, 385, 32), 448, 512, 576, 640, 768, 896, 1024),
    "64-step (8 below 512)": (*range(64, 513, 64), 640, 768, 896, 1024),
    "128-step (4 below 512)": (128, 256, 384, 512, 768, 1024),
}


def one(data: str, examples: int, widths: tuple[int, ...], cells: int, repeats: int) -> dict:
    """One configuration, in this process (called in a child)."""
    import jax
    import numpy as np

    from m2l_nlp import devices
    from m2l_nlp.config import PRESETS
    from m2l_nlp.data import batching, prepare_for
    from m2l_nlp.model import classifiers as models
    from m2l_nlp.train import loop as training
    from m2l_nlp.train import optim

    batching.DEFAULT_WIDTHS = tuple(widths)  # what default_widths() returns on a CPU
    preset = PRESETS["default"]
    prepared = prepare_for(preset, data, progress=False)
    split = (
        prepared.train_ids[:examples],
        prepared.train_mask[:examples],
        prepared.train_labels[:examples],
    )
    funcs, _, _ = models.for_preset(preset, prepared.vocab_size)
    params = models.init_params(funcs, jax.random.PRNGKey(0), preset.seq_len, preset.embed_scale)
    settings = preset.settings(epochs=1, micro_batch_cells=cells)
    optimizer = optim.make_optimizer(settings, 1000)  # one object: its steps compile once
    data_on_device = batching.put_data(*split)
    before = devices.compile_counter()
    start = time.perf_counter()
    training.train(
        funcs, params, data_on_device, settings, optimizer=optimizer, progress=False, log=None
    )
    first = time.perf_counter() - start
    compiled = devices.compile_counter()
    seconds = []
    for _ in range(repeats):  # the same epoch again: compiled already
        start = time.perf_counter()
        training.train(
            funcs, params, data_on_device, settings, optimizer=optimizer, progress=False, log=None
        )
        seconds.append(time.perf_counter() - start)
    lengths = np.minimum(split[1].sum(1), settings.crop_len)
    return {
        "widths": len(batching.bucket_widths(settings.crop_len)),
        "programs": compiled["programs"] - before["programs"],
        "compile_s": compiled["seconds"] - before["seconds"],
        "first_epoch_s": first,
        "epoch_s": statistics.median(seconds),
        "mean_tokens": float(lengths.mean()),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=os.environ.get("M2L_NLP_IMDB"), help="IMDB source")
    parser.add_argument("--examples", type=int, default=6400)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument(
        "--cells",
        type=int,
        nargs="+",
        help="micro-batch budgets in attention cells (0: no split; default: the library's)",
    )
    parser.add_argument("--lists", nargs="+", default=list(LISTS), choices=list(LISTS))
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        widths, cells = json.loads(args.child)
        print(json.dumps(one(args.data, args.examples, tuple(widths), cells, args.repeats)))
        return
    if args.cells is None:
        from m2l_nlp.data.batching import CPU_MICRO_BATCH_CELLS

        args.cells = [CPU_MICRO_BATCH_CELLS]
    print(f"default preset, one epoch of {args.examples} reviews, batch 128, 512-token crops")
    print("| buckets | micro budget | programs | compiling | first epoch | epoch (compiled) |")
    print("|---|---|---|---|---|---|")
    for name in args.lists:
        for cells in args.cells:
            child = [
                sys.executable,
                __file__,
                "--data",
                str(args.data),
                "--examples",
                str(args.examples),
                "--repeats",
                str(args.repeats),
                "--child",
                json.dumps([LISTS[name], cells]),
            ]
            env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
            out = subprocess.run(child, capture_output=True, text=True, env=env, check=True)
            r = json.loads(out.stdout.strip().splitlines()[-1])
            power_of_two = cells > 0 and cells & (cells - 1) == 0
            budget = f"2^{cells.bit_length() - 1}" if power_of_two else cells or "0 (no split)"
            print(
                f"| {name} | {budget} | {r['programs']} | "
                f"{r['compile_s']:.1f} s | {r['first_epoch_s']:.1f} s | {r['epoch_s']:.1f} s |",
                flush=True,
            )


if __name__ == "__main__":
    main()
