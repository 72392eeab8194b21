"""Train practical 1's baselines on the full IMDB and print test accuracy and wall time.

    python benchmarks/baselines.py --source /work/shared/data/aclImdb_v1_labeled.tar.gz \
        --models bow-mlp bigram-mlp lstm

Every model is selected on a validation split of the training reviews (10 %); the test set
is evaluated once per model, with the selected epoch's params.
"""

from __future__ import annotations

import argparse
import json
import time

from m2l_nlp.baselines import MODELS, BaselineConfig, train_baseline
from m2l_nlp.data import prepare_imdb


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", default=None, help="IMDB .tar.gz or aclImdb/ folder")
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lstm-epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=128)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--num-buckets", type=int, default=2**17)
    parser.add_argument("--hidden", type=int, nargs="+", default=[64])
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--tfidf", action="store_true")
    parser.add_argument("--json", default=None, help="write the results to this JSON file")
    args = parser.parse_args(argv)

    start = time.perf_counter()
    data = prepare_imdb(args.source, vocab_size=20000, seq_len=600, progress=False)
    print(f"data: {data} ({time.perf_counter() - start:.1f} s)")
    rows = []
    for model in args.models:
        lstm = model == "lstm"
        config = BaselineConfig(
            model=model,
            hidden_sizes=tuple(args.hidden),
            p_dropout=0.2 if lstm else args.dropout,
            num_buckets=args.num_buckets,
            use_tfidf=args.tfidf,
        )
        result = train_baseline(
            config,
            data,
            epochs=args.lstm_epochs if lstm else args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.lr,
        )
        print(result.summary(), flush=True)
        rows.append(
            {
                "model": model,
                "config": config.to_dict(),
                "test_accuracy": result.test_accuracy,
                "val_accuracy": result.val_accuracy,
                "best_epoch": result.best_epoch,
                "history": result.history,
                "seconds": result.seconds,
            }
        )
    print("\n| model | test accuracy | validation | wall time |")
    print("|---|---|---|---|")
    for row in rows:
        print(
            f"| {row['model']} | {row['test_accuracy']:.4f} | {row['val_accuracy']:.4f} | "
            f"{row['seconds']:.0f} s |"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
