"""Train practical 1's baselines on the full IMDB and print a table of test accuracy and time.

    python benchmarks/baselines.py --source /work/shared/data/aclImdb_v1_labeled.tar.gz \
        --models bow-mlp bigram-mlp lstm

Each model uses its preset from ``m2l_nlp.config.PRESETS`` (the same as
``m2l-nlp train --model <name>``) and the course's loop (``train_and_evaluate``); the epoch is
selected on the preset's validation split of the training reviews (2,500), and the test set is
evaluated once per model, with that epoch's params.

With ``--bigram-tokens 50000`` the reviews are encoded as the default transformer recipe reads
them (pair tokens, ``m2l_nlp.data.bigrams``), so ``--models bow-mlp --tfidf`` trains a bag-of-tokens
model on the transformer's own input.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time

from m2l_nlp.config import BASELINES, PRESETS
from m2l_nlp.data.pipeline import prepare_for
from m2l_nlp.overrides import override
from m2l_nlp.runs.experiment import train_and_evaluate


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=None, help="IMDB .tar.gz or aclImdb/ folder")
    parser.add_argument("--models", nargs="+", default=list(BASELINES), choices=BASELINES)
    parser.add_argument("--epochs", type=int, default=None, help="override the recipes' epochs")
    parser.add_argument("--num-buckets", type=int, default=None, help="override (bigram-mlp)")
    parser.add_argument("--tfidf", action="store_true", help="TF-IDF weights for bow-mlp too")
    parser.add_argument(
        "--bigram-tokens", type=int, default=0, help="encode with this many pair tokens"
    )
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)

    rows = []
    for model in args.models:
        changes = [f"bigram_tokens={args.bigram_tokens}"]
        if args.num_buckets is not None:
            changes.append(f"model.num_buckets={args.num_buckets}")
        if args.tfidf and model != "lstm":
            changes.append("model.use_tfidf=true")
        if args.epochs is not None:
            changes.append(f"train.epochs={args.epochs}")
        preset = override(PRESETS[model], changes)
        start = time.perf_counter()
        data = prepare_for(preset, args.source, progress=False)
        print(f"data: {data} ({time.perf_counter() - start:.1f} s)", flush=True)
        cpu = os.times()
        run = train_and_evaluate(preset, data, name=model, progress=False, log=None)
        cpu_s = sum(os.times()[:2]) - sum(cpu[:2])
        metrics = run.metrics
        print(
            f"{model}: test accuracy {run.test.accuracy:.4f} (validation "
            f"{metrics['val_accuracy']:.4f}, epoch {metrics['best_epoch']} kept), "
            f"{metrics['seconds']:.0f} s, {cpu_s:.0f} s of CPU time",
            flush=True,
        )
        rows.append(
            {
                "model": model,
                "config": dataclasses.asdict(run.config),
                "settings": preset.train,
                "test_accuracy": run.test.accuracy,
                "val_accuracy": metrics["val_accuracy"],
                "best_epoch": metrics["best_epoch"],
                "history": run.history,
                "seconds": metrics["seconds"],
                "cpu_seconds": cpu_s,
            }
        )
    print("\n| model | test accuracy | validation (epoch) | wall time | CPU time |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['model']} | {row['test_accuracy']:.4f} | {row['val_accuracy']:.4f} "
            f"({row['best_epoch']}) | {row['seconds']:.0f} s | {row['cpu_seconds']:.0f} s |"
        )
    if args.json:
        tmp = f"{args.json}.tmp"
        with open(tmp, "w") as handle:
            json.dump(rows, handle, indent=1)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
