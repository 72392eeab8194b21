"""Training throughput: our jitted loop vs a seed-style loop, same model, same run.

The seed-style loop is the tutorial's: every step slices the next batch out of host NumPy
arrays padded to 600 tokens and feeds it to a jitted step that reads a *global* optimizer,
then reads the loss back to the host. Ours keeps the data on the device, groups reviews by
length into a few fixed widths, runs each batch as cache-sized micro-batches and never syncs
with the host inside an epoch.

Two lines bound what any loop can gain on this model. The first comes from the lengths
alone: computing every review at its exact length instead of 600 tokens divides work that
grows as W^2 (attention) by at most the printed factor, and work that grows as W by less.
The second is measured: reviews cut at 600 tokens cost the same in both loops (up to
cache effects), so timing ours on those reviews alone gives the ratio we would reach if
every shorter review were free. ``--per-width`` then times one step of each length
bucket and prints where an epoch of our loop spends its time; ``--loop-per-width`` runs our
loop itself on each bucket's reviews alone (milliseconds per step). ``--count-ops`` counts the
operations of one compiled training step, and of the optimizer's update alone (at batch 8 on
a GPU, each operation is roughly one kernel launch).

Model (both): the seed's, d_model 32, 2 layers, 8 heads, d_ff 32, sequences of 600
tokens, batch 8. Compilation is excluded from both timings (a warm-up pass first).

    python benchmarks/train_throughput.py --data ../shared/data/aclImdb_v1_labeled.tar.gz
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import time

os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402

from m2l_nlp.config import ClassifierConfig, TrainSettings  # noqa: E402
from m2l_nlp.data import (  # noqa: E402
    SMALL_DATA,
    batching,  # noqa: E402
    prepare_imdb,
)
from m2l_nlp.model import classifiers as models  # noqa: E402
from m2l_nlp.train import loop as training
from m2l_nlp.train import optim
from m2l_nlp.train import step as step_fns

optimizer = None  # the seed reads a module-level optimizer inside its jitted step
SEED_CONFIG = dict(num_layers=2, num_heads=8, d_model=32, d_ff=32, p_dropout=0.1)


def padding_bound(lengths: np.ndarray, max_len: int) -> tuple[float, float]:
    """Seed cost over padding-free cost, for a cost per review growing as ``W**2`` and ``W``.

    The seed runs every review at ``max_len``; a loop that computed each review at its exact
    length (no bucket rounding) and was otherwise no faster would gain exactly these.
    """
    lengths = np.minimum(np.asarray(lengths, np.float64), max_len)
    return max_len**2 / np.mean(lengths**2), max_len / np.mean(lengths)


def seed_style(model, params, ids, mask, labels, batch_size, steps, repeats):
    """examples/s of the tutorial's loop (per-batch host slicing, global optimizer)."""
    global optimizer
    optimizer = optax.adam(1e-3)

    @jax.jit
    def step(params, opt_state, key, x, m, y):
        def loss_fn(p):
            logits = model.model.apply(p, key, x, m, True)
            return optax.sigmoid_binary_cross_entropy(logits, y).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state)  # the global optimizer
        return optax.apply_updates(params, updates), opt_state, loss

    opt_state = optimizer.init(params)
    key = jax.random.PRNGKey(0)
    rates = []
    for r in range(repeats + 1):  # the first pass compiles
        start = time.perf_counter()
        n = 0
        for i in range(steps):
            lo = (i * batch_size) % (len(labels) - batch_size)
            x = ids[lo : lo + batch_size]
            m = mask[lo : lo + batch_size]
            y = labels[lo : lo + batch_size].astype(np.float32)
            key, sub = jax.random.split(key)
            params, opt_state, loss = step(params, opt_state, sub, x, m, y)
            float(loss)  # the tutorial logs the loss every step
            n += batch_size
            if r == 0 and i >= 2:
                break
        if r:
            rates.append(n / (time.perf_counter() - start))
    return rates


def ours(model, params, ids, mask, labels, batch_size, repeats, steps_per_call=1):
    """examples/s of training.train (one epoch per timing, after a compiling epoch)."""
    stamps = []
    settings = TrainSettings(
        epochs=repeats + 1,
        batch_size=batch_size,
        crop_len=ids.shape[1],
        learning_rate=1e-3,
        steps_per_call=steps_per_call,
    )
    start = time.perf_counter()
    training.train(
        model,
        params,
        (ids, mask, labels),
        settings,
        progress=False,
        log=lambda _line: stamps.append(time.perf_counter()),
    )
    times = np.diff([start, *stamps])[1:]  # drop the epoch that compiled
    return [len(labels) / t for t in times]


def per_width(model, params, ids, mask, labels, batch_size, repeats, steps=10):
    """Per length bucket: reviews, micro-batches, ms per review of one step, share of an epoch."""
    lengths = mask.sum(1)
    bucket = batching.bucket_of(lengths, batching.bucket_widths(ids.shape[1]))
    settings = TrainSettings(batch_size=batch_size, learning_rate=1e-3)
    optimizer = optim.make_optimizer(settings, 1000)
    state = optim.init_state(jax.tree_util.tree_map(jnp.array, params), optimizer)
    cells = batching.resolve_micro_batch_cells(settings.micro_batch_cells)
    key = jax.random.PRNGKey(0)
    rows = []
    for w in (int(w) for w in np.unique(bucket)):
        pick = np.resize(np.flatnonzero(bucket == w), batch_size)  # repeats if too few
        inputs = tuple(jnp.asarray(a[pick, :w]) for a in (ids, mask))
        batch = step_fns.Batch(inputs, jnp.asarray(labels[pick]), jnp.ones(batch_size))
        micro = batching.micro_batches(batch_size, w, 1, cells)
        times = []
        for r in range(repeats + 1):  # the first pass compiles
            start = time.perf_counter()
            for _ in range(steps if r else 1):
                state, loss, _hits = step_fns.train_step(
                    state, key, batch, model=model, optimizer=optimizer, micro=micro
                )
            jax.block_until_ready(loss)
            if r:
                times.append((time.perf_counter() - start) / (steps * batch_size))
        rows.append((w, int((bucket == w).sum()), micro, statistics.median(times)))
    total = sum(count * seconds for _, count, _, seconds in rows)
    print(f"per bucket (one step of {batch_size} repeated, median of {repeats} x {steps}):")
    for w, count, micro, seconds in rows:
        print(
            f"  width {w:4d}: {count:5d} reviews ({count / len(lengths):5.1%}), {micro} "
            f"micro-batches, {seconds * 1e3:7.2f} ms per review, "
            f"{count * seconds / total:5.1%} of the epoch"
        )
    print(f"  sum over buckets: {len(lengths) / total:.1f} examples/s")


def loop_per_width(model, params, ids, mask, labels, batch_size, repeats, steps_per_call):
    """Our loop on each length bucket's reviews alone: ms per optimizer step, share of an epoch.

    Unlike :func:`per_width` (one step repeated), this times whole epochs of
    :func:`ours`, K steps per call, so a GPU's launches and loop checks are counted as the
    full epoch pays them.
    """
    bucket = batching.bucket_of(mask.sum(1), batching.bucket_widths(ids.shape[1]))
    rows = []
    for w in (int(w) for w in np.unique(bucket)):
        pick = bucket == w
        if pick.sum() < batch_size:
            continue
        picked = (a[pick] for a in (ids, mask, labels))
        rate = statistics.median(ours(model, params, *picked, batch_size, repeats, steps_per_call))
        rows.append((w, int(pick.sum()), rate))
    total = sum(count / rate for _, count, rate in rows)
    print(
        f"our loop on each bucket alone (K={steps_per_call}, batch {batch_size}, median of "
        f"{repeats} epochs):"
    )
    for w, count, rate in rows:
        print(
            f"  width {w:4d}: {count:5d} reviews ({count / len(bucket):5.1%}), "
            f"{batch_size / rate * 1e3:6.3f} ms per step, {count / rate / total:5.1%} of the epoch"
        )
    print(f"  sum over buckets: {sum(c for _, c, _ in rows) / total:.1f} examples/s")


def _ops(compiled_text: str) -> int:
    """Operations of a compiled program's entry computation, bookkeeping ones excluded."""
    entry = compiled_text[compiled_text.index("\nENTRY") :].split("\n}\n")[0]
    skip = {"parameter", "get-tuple-element", "tuple", "constant", "bitcast"}
    ops = re.findall(r"^\s*(?:ROOT )?\S+ = \S+ ([a-z][\w-]*)\(", entry, flags=re.M)
    return sum(op not in skip for op in ops)


def count_ops(model, params, batch_size: int, width: int = 256) -> None:
    """Print the operations of one compiled step (gradient and update) and of the update."""
    settings = TrainSettings(batch_size=batch_size, learning_rate=1e-3)
    optimizer = optim.make_optimizer(settings, 1000)
    state = optim.init_state(jax.tree_util.tree_map(jnp.array, params), optimizer)
    ids = jnp.ones((batch_size, width), jnp.int32)
    labels = jnp.zeros((batch_size,), jnp.int32)
    key = jax.random.PRNGKey(0)
    batch = step_fns.Batch((ids, ids), labels, jnp.ones(batch_size))
    step = step_fns.train_step.lower(state, key, batch, model=model, optimizer=optimizer)
    update = jax.jit(lambda state, grads: step_fns.update(state, grads, optimizer))
    alone = update.lower(state, state.params)
    leaves = len(jax.tree_util.tree_leaves(params))
    whole, upd = (_ops(x.compile().as_text()) for x in (step, alone))
    print(
        f"operations of one compiled step, batch {batch_size}, width {width}: {whole}; "
        f"of the optimizer's update alone ({leaves} parameter arrays): {upd}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=None, help="IMDB source (default: bundled small)")
    parser.add_argument("--examples", type=int, default=4000, help="reviews in our epochs")
    parser.add_argument("--seed-steps", type=int, default=300, help="steps of the seed loop")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--our-batch-size", type=int, default=None, help="also time ours at B")
    parser.add_argument(
        "--per-width", action="store_true", help="also time one step per length bucket"
    )
    parser.add_argument(
        "--loop-per-width",
        action="store_true",
        help="also time our loop (the first K) on each length bucket's reviews alone",
    )
    parser.add_argument(
        "--count-ops", action="store_true", help="also count the operations of one step"
    )
    parser.add_argument(
        "--steps-per-call",
        type=int,
        nargs="+",
        default=[1],
        metavar="K",
        help="optimizer steps per jitted call of our loop (several: one row each)",
    )
    args = parser.parse_args()

    data = prepare_imdb(args.data or SMALL_DATA, vocab_size=20000, seq_len=600, progress=False)
    n = min(args.examples, len(data.train_labels))
    ids, mask, labels = data.train_ids[:n], data.train_mask[:n], data.train_labels[:n]
    config = ClassifierConfig(vocab_size=data.vocab_size, max_len=600, **SEED_CONFIG)
    model = models.classifier(config)
    params = models.init_params(model, jax.random.PRNGKey(0), config.max_len)
    lengths = mask.sum(1)
    print(f"{jax.default_backend()} x{len(jax.devices())}, load {os.getloadavg()[0]:.1f}")
    print(f"{n} reviews, mean {lengths.mean():.0f} tokens of 600 (padding computed by the seed)")
    quadratic, linear = padding_bound(lengths, ids.shape[1])
    print(
        f"skipping every padding token gains at most {quadratic:.1f}x on work that grows as "
        f"W^2 (attention) and {linear:.1f}x on work that grows as W; a loop's gain beyond "
        "that must come from running the same step faster (cache, fewer syncs)"
    )

    seed = seed_style(
        model, params, ids, mask, labels, args.batch_size, args.seed_steps, args.repeats
    )
    print(
        f"seed-style loop, batch {args.batch_size}: median {statistics.median(seed):8.1f} "
        f"examples/s  (runs: {', '.join(f'{r:.1f}' for r in seed)})"
    )
    rows = [args.batch_size] + ([args.our_batch_size] if args.our_batch_size else [])
    for b, k in ((b, k) for b in rows for k in args.steps_per_call):
        rate = ours(model, params, ids, mask, labels, b, args.repeats, k)
        print(
            f"our loop, K={k:<3d} batch {b}: median {statistics.median(rate):8.1f} examples/s  "
            f"(runs: {', '.join(f'{r:.1f}' for r in rate)})  "
            f"ratio {statistics.median(rate) / statistics.median(seed):.1f}x"
        )
    cap = lengths >= ids.shape[1]
    if cap.sum() >= args.batch_size:
        rate = statistics.median(
            ours(model, params, ids[cap], mask[cap], labels[cap], args.batch_size, args.repeats)
        )
        print(
            f"reviews at the {ids.shape[1]}-token cap: {cap.mean():.1%}; our loop on those "
            f"alone: {rate:.1f} examples/s, so with every shorter review free the ratio would "
            f"be at most {rate / (cap.mean() * statistics.median(seed)):.1f}x"
        )
    if args.per_width:
        per_width(model, params, ids, mask, labels, args.batch_size, args.repeats)
    if args.loop_per_width:
        loop_per_width(
            model, params, ids, mask, labels, args.batch_size, args.repeats, args.steps_per_call[0]
        )
    if args.count_ops:
        count_ops(model, params, args.batch_size)
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
