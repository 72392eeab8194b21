"""Validation on unseen films: a recipe scored on random reviews and on runs of neighbouring ids.

    python benchmarks/film_split.py --seed 0
    python benchmarks/film_split.py --seed 0 --set bigram_backoff=false  # the recipe before backoff
    python benchmarks/film_split.py --seed 0 --model bag
    python benchmarks/film_split.py --seed 0 --model bag --bag-set model.use_tfidf=false

The archive numbers its reviews so that neighbouring file ids are mostly reviews of one film,
and the test films have no review in the training split. A validation split drawn at random
has most of its films in training too; the project's own (``splits.split_validation``) is made
of such runs, since 2026-11-27. This script holds out two validation sets of ``--val-size``
reviews each from the training reviews of the ``default`` preset's data (the test set is never
read), to compare the two kinds:

- *random*: reviews drawn at random;
- *film blocks*: runs of ``--block`` neighbouring file ids, half of them from each label
  (``splits.film_blocks``, with the generator of the project's split), so that most of their films
  have no review left in training.

It trains on the rest with the preset's recipe (``--set KEY=VALUE`` changes it, as
``m2l-nlp train --set`` does, and makes the ids; ``--model bag`` trains practical 1's bag MLP
with TF-IDF on the same ids instead, its own settings changed by ``--bag-set KEY=VALUE``),
keeps the last epoch and prints its accuracy and loss on both sets. Each
epoch's line reports the film blocks. See docs/results.md, "How runs are made" and "How a
change is adopted".
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from m2l_nlp import devices
from m2l_nlp.config import PRESETS
from m2l_nlp.data import pipeline as data_lib
from m2l_nlp.data import splits
from m2l_nlp.model import classifiers as models
from m2l_nlp.overrides import override
from m2l_nlp.train.evaluation import evaluate
from m2l_nlp.train.loop import train

DEFAULT_DATA = os.environ.get("M2L_NLP_IMDB", "../shared/data/aclImdb_v1_labeled.tar.gz")


def film_block_split(
    order: np.ndarray, labels: np.ndarray, val_size: int, block: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows ``(train, random, blocks)`` of a training split whose row ``r`` holds review
    ``order[r]`` of the split in file order, with labels ``labels``.

    ``blocks``: ``val_size`` rows in runs of ``block`` neighbouring reviews in file order
    (:func:`m2l_nlp.data.splits.film_blocks`, as the project's validation split draws them);
    ``random``: ``val_size`` of the other rows; ``train``: the rest, in row order.
    """
    block_rows = splits.film_blocks(order, labels, val_size, block, rng)
    rest = np.setdiff1d(np.arange(len(order)), block_rows)
    random_rows = rng.choice(rest, val_size, replace=False)
    return np.setdiff1d(rest, random_rows), random_rows, block_rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=DEFAULT_DATA, help="IMDB .tar.gz or aclImdb/ folder")
    parser.add_argument("--seed", type=int, default=0, help="shuffle, blocks and training")
    parser.add_argument("--val-size", type=int, default=4000, help="reviews in each set")
    parser.add_argument("--block", type=int, default=50, help="neighbouring ids per run")
    parser.add_argument("--model", choices=("transformer", "bag"), default="transformer")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument(
        "--bag-set", action="append", default=[], metavar="KEY=VALUE", help="with --model bag"
    )
    args = parser.parse_args(argv)
    if args.bag_set and args.model != "bag":
        parser.error("--bag-set changes the bag MLP: add --model bag")
    try:
        preset = override(PRESETS["default"], args.set)
        bag_preset = override(PRESETS["bow-mlp"], ["model.use_tfidf=true", *args.bag_set])
        preset.check()
        bag_preset.check()
    except (TypeError, ValueError) as error:
        parser.error(str(error))
    data = data_lib.prepare_for(preset, args.data, seed=args.seed, progress=False)
    order = splits.shuffle_order(len(data.train_labels), args.seed)
    rng = splits.validation_rng(args.seed)
    rows = film_block_split(order, data.train_labels, args.val_size, args.block, rng)
    train_split, random_split, block_split = (
        (data.train_ids[r], data.train_mask[r], data.train_labels[r]) for r in rows
    )
    print(
        f"train {len(rows[0])}, random validation {len(rows[1])}, film-block validation "
        f"{len(rows[2])} (runs of {args.block} ids); positive: "
        f"{random_split[2].mean():.3f} and {block_split[2].mean():.3f}",
        flush=True,
    )
    if args.model == "bag":  # practical 1's bag MLP, TF-IDF, on the same ids and splits
        width = data.train_ids.shape[1]
        preset = override(bag_preset, [f"train.crop_len={width}", f"seq_len={width}"])
    settings = preset.settings(seed=args.seed, keep_best=False)
    funcs, _, params, tie = models.init_for_preset(
        preset, data, args.seed, "solutions", *train_split[:2]
    )
    mesh = devices.make_mesh()
    start = time.perf_counter()
    result = train(
        funcs,
        params,
        train_split,
        settings,
        eval_data=block_split,
        mesh=mesh,
        progress=False,
        tie=tie,
    )
    for name, split in (("random", random_split), ("film blocks", block_split)):
        scored = evaluate(result.params, funcs, split, settings=settings, mesh=mesh)
        print(f"{name}: accuracy {scored.accuracy:.2%}, loss {scored.loss:.4f}", flush=True)
    print(f"{time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
