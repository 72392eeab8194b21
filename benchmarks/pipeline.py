"""Benchmark the IMDB pipeline: load + train the tokenizer + encode all 50,000 reviews.

Three pipelines are timed in the same run, on the same machine:

* seed-style: our re-implementation of the tutorial's approach (read every ``.txt`` of an
  extracted ``aclImdb/`` with a Python loop into pandas, ``train_from_iterator`` over the
  train texts, ``encode_batch`` with the tokenizer's padding, then Python lists to arrays);
* ours, cold: ``m2l_nlp.data.pipeline.prepare_imdb`` with an empty cache (reads the archive
  directly);
* ours, warm: the same call again (served from the cache).

    nice -n 5 .venv/bin/python benchmarks/pipeline.py [--data PATH] [--repeat N]

It prints the seconds of each step, medians over ``--repeat`` runs, and the ratios, and
checks that ``batch_encode`` gives the same arrays as the seed-style encoding.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from m2l_nlp.data import imdb_archive, tokenization
from m2l_nlp.data import pipeline as data

REPO = Path(__file__).resolve().parent.parent
DEFAULT_DATA = REPO.parent / "shared" / "data" / "aclImdb_v1_labeled.tar.gz"


# --------------------------------------------------------------------------- seed style


def seed_read_all_txts(folder: Path) -> list[str]:
    texts = []
    for name in os.listdir(folder):
        with open(folder / name, encoding="utf-8") as f:
            texts.append(f.read())
    return texts


def seed_load_dataset(root: Path, split: str) -> pd.DataFrame:
    pos = seed_read_all_txts(root / split / "pos")
    neg = seed_read_all_txts(root / split / "neg")
    df = pd.DataFrame({"text": pos + neg, "label": [1] * len(pos) + [0] * len(neg)})
    return df.sample(frac=1, random_state=0).reset_index(drop=True)


def seed_encode(tok, texts: list[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    tok = tokenization.Tokenizer.from_str(tok.to_str())
    tok.enable_padding(pad_id=tokenization.PAD_ID, pad_token="[PAD]", length=seq_len)
    tok.enable_truncation(max_length=seq_len)
    encoded = tok.encode_batch(texts)
    ids = np.array([e.ids for e in encoded], dtype=np.int32)
    mask = np.array([e.attention_mask for e in encoded], dtype=np.int32)
    return ids, mask


def run_seed(root: Path, vocab_size: int, seq_len: int) -> dict[str, float]:
    t0 = time.perf_counter()
    train, test = seed_load_dataset(root, "train"), seed_load_dataset(root, "test")
    t1 = time.perf_counter()
    tok = tokenization.new_tokenizer()
    trainer = tokenization.trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(tokenization.SPECIAL_TOKENS),
        unk_token=tokenization.UNK_TOKEN,
        show_progress=False,
    )
    tok.train_from_iterator(train["text"], trainer)
    t2 = time.perf_counter()
    seed_encode(tok, list(train["text"]), seq_len)
    seed_encode(tok, list(test["text"]), seq_len)
    t3 = time.perf_counter()
    return {"load": t1 - t0, "train": t2 - t1, "encode": t3 - t2, "total": t3 - t0}


# --------------------------------------------------------------------------- ours


@contextlib.contextmanager
def timed(module, name: str, into: dict[str, float], key: str):
    """Add the time spent in ``module.name`` to ``into[key]`` while the block runs."""
    real = getattr(module, name)

    def wrapper(*args, **kwargs):
        t = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            into[key] += time.perf_counter() - t

    setattr(module, name, wrapper)
    try:
        yield
    finally:
        setattr(module, name, real)


def run_ours(archive: Path, cache: Path, vocab_size: int, seq_len: int):
    steps: dict[str, float] = defaultdict(float)
    with (
        timed(imdb_archive, "read_reviews", steps, "load"),
        timed(tokenization, "train_tokenizer", steps, "train"),
        timed(tokenization, "batch_encode", steps, "encode"),
    ):
        t = time.perf_counter()
        out = data.prepare_imdb(
            archive, vocab_size=vocab_size, seq_len=seq_len, cache_dir=cache, progress=False
        )
        steps["total"] = time.perf_counter() - t
    return dict(steps), out


def check_same_encoding(out: data.PreparedData, archive: Path, seq_len: int, n: int) -> None:
    """Our batch_encode must equal the seed-style encoding with the same tokenizer."""
    train, _ = data.load_imdb(archive, use_cache=False)
    texts = list(train["text"][:n])
    ours = tokenization.batch_encode(out.tokenizer, texts, seq_len)
    seed = seed_encode(out.tokenizer, texts, seq_len)
    for a, b in zip(ours, seed, strict=True):
        np.testing.assert_array_equal(a, b)
    print(f"check: batch_encode == seed-style encoding on {n} reviews")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="aclImdb .tar.gz")
    parser.add_argument("--vocab-size", type=int, default=20000)
    parser.add_argument("--seq-len", type=int, default=600)
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--skip-seed", action="store_true", help="time only our pipeline")
    parser.add_argument("--check", type=int, default=5000, help="reviews to cross-check")
    args = parser.parse_args(argv)
    if not args.data.is_file():
        print(f"{args.data} not found: pass --data /path/to/aclImdb_v1.tar.gz", file=sys.stderr)
        return 2

    results: dict[str, list[dict[str, float]]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="m2l-bench-") as tmp:
        tmp = Path(tmp)
        root = None
        if not args.skip_seed:
            t = time.perf_counter()
            root = imdb_archive.extract_imdb(args.data, tmp / "extracted")
            print(f"setup: extracted the labeled reviews in {time.perf_counter() - t:.1f} s")
        for i in range(args.repeat):
            if root is not None:
                results["seed-style"].append(run_seed(root, args.vocab_size, args.seq_len))
            cache = tmp / f"cache-{i}"
            cold, out = run_ours(args.data, cache, args.vocab_size, args.seq_len)
            assert not out.from_cache
            results["ours cold"].append(cold)
            warm, again = run_ours(args.data, cache, args.vocab_size, args.seq_len)
            assert again.from_cache
            results["ours warm"].append(warm)
            print(
                f"run {i + 1}/{args.repeat}: "
                + ", ".join(f"{name} {runs[-1]['total']:.1f} s" for name, runs in results.items()),
                flush=True,
            )
        if args.check:
            check_same_encoding(out, args.data, args.seq_len, args.check)

    med = {
        name: {k: statistics.median(r.get(k, 0.0) for r in runs) for k in runs[0]}
        for name, runs in results.items()
    }
    print(
        f"\nIMDB pipeline, {args.data.name}, vocab {args.vocab_size}, seq_len {args.seq_len}, "
        f"median of {args.repeat} run(s), seconds (cpus: {os.cpu_count()})"
    )
    print(f"{'':12s}" + "".join(f"{k:>9s}" for k in ("load", "train", "encode", "total")))
    for name, m in med.items():
        print(
            f"{name:12s}"
            + "".join(f"{m.get(k, 0.0):9.2f}" for k in ("load", "train", "encode", "total"))
        )
    if "seed-style" in med:
        seed = med["seed-style"]["total"]
        print(f"ratio cold / seed-style: {med['ours cold']['total'] / seed:.2f} (target <= 0.5)")
        print(f"ratio warm / seed-style: {med['ours warm']['total'] / seed:.3f}")
    print(f"warm total: {med['ours warm']['total']:.2f} s (target <= 3 s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
