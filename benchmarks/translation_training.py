"""Training steps per second of practical 3's translator on the bundled pairs.

    python benchmarks/translation_training.py [--epochs 4] [--seed 0]

The ``translate`` preset's model and batches (length buckets of its ``widths``) on the
bundled small pairs, through the loop of every run. The first epoch compiles the step
for each width; the figure is the median of the later epochs' steps per second.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from m2l_nlp.config import PRESETS
from m2l_nlp.data import batching
from m2l_nlp.data.tokenization import BOS_ID
from m2l_nlp.data.translation import prepare_translation
from m2l_nlp.model import translators
from m2l_nlp.train import metrics
from m2l_nlp.train.loop import train


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    preset = PRESETS["translate"]
    data = prepare_translation(
        "small", vocab_size=preset.vocab_size, max_len=preset.seq_len, progress=False
    )
    config = preset.model_config(data.tokenizer.get_vocab_size())
    settings = preset.settings(seed=args.seed, epochs=args.epochs, crop_len=config.max_len)
    funcs, practical = translators.translator(config, start_id=BOS_ID)
    params = translators.init_params(funcs, args.seed, config.max_len)
    (source, _), mask, *_ = data.train
    lengths = batching.token_lengths(mask)
    rng = np.random.default_rng(args.seed)
    plan = batching.train_plan(
        lengths, settings.batch_size, settings.crop_len, rng, settings.widths or None
    )
    steps = len(plan.widths)
    stamps = [time.perf_counter()]
    train(
        funcs,
        params,
        data.train,
        settings,
        objective=metrics.sequence_objective(practical.sequence_loss),
        progress=False,
        log=None,
        on_epoch=lambda done: stamps.append(time.perf_counter()),
    )
    seconds = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    later = statistics.median(seconds[1:])
    print(f"{len(source)} pairs, {steps} steps of {settings.batch_size} pairs an epoch")
    print(f"first epoch (compiling): {seconds[0]:.1f} s")
    print(f"steps per second (median of epochs 2-{args.epochs}): {steps / later:.1f}")


if __name__ == "__main__":
    main()
