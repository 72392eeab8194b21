"""Practical 1's baselines as classifiers of token ids: bag-of-words MLP, bag-of-bigrams MLP, LSTM.

Every baseline is a stateful forward ``forward(input_ids, mask, is_train=True) -> logits (B,)``,
the same signature as practical 2's ``classifier_forward``, so one training loop serves all
models. For the MLPs the features are computed *inside* the forward, one batch at a time: the
dense bag-of-bigrams matrix of all of IMDB (25,000 x 150,000 float32, 15 GB) never exists.

The components (``multi_hot``, ``bag_of_bigrams``, ``tfidf``, ``MLPClassifier``,
``LSTMClassifier``) come from ``<impl>/practical1_baselines.py``: the reference solutions by
default, or a student's exercises; ``impl`` may also be a notebook's ``globals()``
(:func:`m2l_nlp.impl.practical_namespace`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp.fileio import write_json_atomic
from m2l_nlp.impl import Impl, practical_namespace
from m2l_nlp.training import confusion_matrix

PRACTICAL = "practical1_baselines"
MODELS = ("bow-mlp", "bigram-mlp", "lstm")

Forward = Callable[..., jax.Array]


@dataclasses.dataclass(frozen=True)
class BaselineConfig:
    """Settings of a practical-1 baseline.

    Attributes:
        model: ``"bow-mlp"`` (multi-hot tokens), ``"bigram-mlp"`` (tokens + hashed bigrams)
            or ``"lstm"``.
        hidden_sizes: hidden layers of the MLP.
        p_dropout: dropout rate (MLP hidden layers; LSTM final state).
        num_buckets: bigram buckets (``bigram-mlp``).
        use_tfidf: weigh the MLP features by TF-IDF fitted on the training reviews.
        input_dropout: dropout rate on the MLP's input features (training only).
        embed_size, hidden_size: LSTM sizes.
        max_len: the LSTM reads only the first ``max_len`` tokens (recurrence is slow on CPU).
    """

    model: str = "bigram-mlp"
    hidden_sizes: tuple[int, ...] = (64,)
    p_dropout: float = 0.5
    num_buckets: int = 2**17
    use_tfidf: bool = False
    input_dropout: float = 0.0
    embed_size: int = 64
    hidden_size: int = 64
    max_len: int = 256

    def __post_init__(self) -> None:
        if self.model not in MODELS:
            raise ValueError(f"unknown baseline {self.model!r}: choose one of {', '.join(MODELS)}")
        for name in ("p_dropout", "input_dropout"):
            if not 0 <= getattr(self, name) < 1:
                raise ValueError(f"{name} must be in [0, 1), not {getattr(self, name)}")
        if self.num_buckets < 1 or self.max_len < 1:
            raise ValueError("num_buckets and max_len must be positive")

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["hidden_sizes"] = list(self.hidden_sizes)
        return out

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> BaselineConfig:
        values = dict(values)
        if "hidden_sizes" in values:
            values["hidden_sizes"] = tuple(values["hidden_sizes"])
        return cls(**values)


def num_features(config: BaselineConfig, vocab_size: int) -> int:
    """Width of the MLP's input: ``V`` (bow) or ``V + num_buckets`` (bigrams)."""
    if config.model == "bow-mlp":
        return vocab_size
    if config.model == "bigram-mlp":
        return vocab_size + config.num_buckets
    raise ValueError(f"{config.model!r} has no feature vector (it reads token ids)")


def featurizer(
    config: BaselineConfig, vocab_size: int, impl: Impl = "solutions"
) -> Callable[[jax.Array, jax.Array], jax.Array]:
    """``features(ids (B, S), mask (B, S)) -> (B, F)`` float32 0/1 for an MLP baseline."""
    p1 = practical_namespace(PRACTICAL, impl)
    if config.model == "bow-mlp":
        return lambda ids, mask: p1.multi_hot(ids, mask, vocab_size)
    if config.model == "bigram-mlp":
        return lambda ids, mask: p1.bag_of_bigrams(ids, mask, vocab_size, config.num_buckets)
    raise ValueError(f"{config.model!r} has no feature vector (it reads token ids)")


def document_frequencies(
    features: Callable[[jax.Array, jax.Array], jax.Array],
    ids: np.ndarray,
    mask: np.ndarray,
    batch_size: int = 256,
) -> np.ndarray:
    """Number of reviews in which each feature is present, ``(F,)`` int64, batch by batch."""
    count = jax.jit(lambda i, m: (features(i, m) != 0).sum(axis=0, dtype=jnp.int32))
    total = None
    for start in range(0, len(ids), batch_size):
        part = np.asarray(count(ids[start : start + batch_size], mask[start : start + batch_size]))
        total = part.astype(np.int64) if total is None else total + part
    if total is None:
        raise ValueError("no reviews to fit the TF-IDF weights on")
    return total


def idf_from_frequencies(doc_freq: np.ndarray, num_docs: int) -> np.ndarray:
    """``log((1 + N) / (1 + df)) + 1`` as float32: the formula of practical 1's ``fit_idf``."""
    return (np.log((1.0 + num_docs) / (1.0 + doc_freq)) + 1.0).astype(np.float32)


def fit_baseline_idf(
    config: BaselineConfig,
    vocab_size: int,
    ids: np.ndarray,
    mask: np.ndarray,
    impl: Impl = "solutions",
) -> np.ndarray:
    """IDF weights ``(F,)`` of the baseline's features, fitted on the given (training) reviews."""
    df = document_frequencies(featurizer(config, vocab_size, impl), ids, mask)
    return idf_from_frequencies(df, len(ids))


def make_forward(
    config: BaselineConfig,
    vocab_size: int,
    idf: np.ndarray | None = None,
    impl: Impl = "solutions",
) -> Forward:
    """The stateful forward ``(input_ids (B, S), mask (B, S), is_train=True) -> logits (B,)``.

    For ``use_tfidf`` pass the ``idf`` weights (fitted on training reviews only).
    """
    p1 = practical_namespace(PRACTICAL, impl)
    if config.model == "lstm":

        def lstm_forward(input_ids: jax.Array, mask: jax.Array, is_train: bool = True):
            ids, m = input_ids[:, : config.max_len], mask[:, : config.max_len]
            model = p1.LSTMClassifier(
                vocab_size, config.embed_size, config.hidden_size, config.p_dropout, name="lstm"
            )
            return model(ids, m, is_train)

        return lstm_forward

    features = featurizer(config, vocab_size, impl)
    if config.use_tfidf:
        if idf is None:
            raise ValueError("use_tfidf=True needs the idf weights: see fit_baseline_idf")
        expected = num_features(config, vocab_size)
        if np.shape(idf) != (expected,):
            raise ValueError(f"idf should have shape ({expected},), not {np.shape(idf)}")
        weights = jnp.asarray(idf, jnp.float32)

    def mlp_forward(input_ids: jax.Array, mask: jax.Array, is_train: bool = True):
        x = features(input_ids, mask)
        if config.use_tfidf:
            x = p1.tfidf(x, weights)
        if is_train and config.input_dropout > 0:
            x = hk.dropout(hk.next_rng_key(), config.input_dropout, x)
        return p1.MLPClassifier(config.hidden_sizes, config.p_dropout, name="mlp")(x, is_train)

    return mlp_forward


# --------------------------------------------------------------------------- training


@dataclasses.dataclass
class BaselineResult:
    """What :func:`train_baseline` returns.

    ``params`` are those of the epoch with the best validation accuracy (``best_epoch``,
    1-based); ``history`` has one entry per epoch (``train_loss``, ``val_accuracy``);
    the test numbers are computed once, with the selected params.
    """

    config: BaselineConfig
    params: Any
    forward: Forward
    history: dict[str, list[float]]
    best_epoch: int
    val_accuracy: float
    test_accuracy: float
    test_confusion: np.ndarray
    seconds: float

    def summary(self) -> str:
        return (
            f"{self.config.model}: test accuracy {self.test_accuracy:.4f} "
            f"(validation {self.val_accuracy:.4f}, epoch {self.best_epoch} selected), "
            f"{self.seconds:.0f} s"
        )


def split_validation(n: int, val_fraction: float, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Indices ``(train, validation)`` of a seeded random split of ``n`` examples."""
    if not 0 < val_fraction < 1:
        raise ValueError(f"val_fraction must be in (0, 1), not {val_fraction}")
    order = np.random.default_rng(seed).permutation(n)
    n_val = max(1, int(round(n * val_fraction)))
    return np.sort(order[n_val:]), np.sort(order[:n_val])


def _predict_all(predict: Callable, params: Any, ids: np.ndarray, mask: np.ndarray, batch: int):
    """Logits for every example (the last partial batch too), as a NumPy array ``(N,)``."""
    out = []
    for start in range(0, len(ids), batch):
        out.append(
            np.asarray(predict(params, ids[start : start + batch], mask[start : start + batch]))
        )
    return np.concatenate(out) if out else np.zeros((0,), np.float32)


def train_baseline(
    config: BaselineConfig,
    data: Any,
    *,
    epochs: int = 4,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    clip_norm: float | None = None,
    val_fraction: float = 0.1,
    seed: int = 0,
    impl: Impl = "solutions",
    log: Callable[[str], None] | None = print,
) -> BaselineResult:
    """Train a baseline on ``data`` (a :class:`m2l_nlp.data.PreparedData`) with Adam
    (after clipping the gradient's global norm to ``clip_norm``, if given).

    A seeded ``val_fraction`` of the training reviews is held out; after every epoch the
    validation accuracy is measured and the best epoch's params are kept. The test set is
    evaluated once, at the end, with those params.
    """
    import time

    import optax

    start_time = time.perf_counter()
    vocab_size = int(data.vocab_size)
    train_idx, val_idx = split_validation(len(data.train_ids), val_fraction, seed)
    ids, mask = data.train_ids[train_idx], data.train_mask[train_idx]
    labels = data.train_labels[train_idx].astype(np.float32)
    idf = None
    if config.use_tfidf and config.model != "lstm":
        idf = fit_baseline_idf(config, vocab_size, ids, mask, impl)
    forward = make_forward(config, vocab_size, idf, impl)
    model = hk.transform(forward)
    params = model.init(jax.random.PRNGKey(seed), ids[:2], mask[:2], True)
    optimizer = optax.adam(learning_rate)
    if clip_norm is not None:
        optimizer = optax.chain(optax.clip_by_global_norm(clip_norm), optimizer)
    opt_state = optimizer.init(params)

    @jax.jit
    def train_step(params, opt_state, key, ids, mask, labels):
        def loss_fn(p):
            logits = model.apply(p, key, ids, mask, True)
            return optax.sigmoid_binary_cross_entropy(logits, labels).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    predict = jax.jit(lambda p, i, m: model.apply(p, None, i, m, False))
    rng = np.random.default_rng(seed)
    key = jax.random.PRNGKey(seed + 1)
    history: dict[str, list[float]] = {"train_loss": [], "val_accuracy": []}
    best = (-1.0, 0, params)
    for epoch in range(1, epochs + 1):
        order = rng.permutation(len(ids))
        losses = []
        for start in range(0, len(order) - batch_size + 1, batch_size):
            batch = order[start : start + batch_size]
            key, sub = jax.random.split(key)
            params, opt_state, loss = train_step(
                params, opt_state, sub, ids[batch], mask[batch], labels[batch]
            )
            losses.append(loss)
        train_loss = float(np.mean(jax.device_get(losses)))
        val_logits = _predict_all(
            predict, params, data.train_ids[val_idx], data.train_mask[val_idx], 512
        )
        val_acc = float(((val_logits > 0) == (data.train_labels[val_idx] == 1)).mean())
        history["train_loss"].append(train_loss)
        history["val_accuracy"].append(val_acc)
        if log:
            log(f"{config.model} epoch {epoch}: train loss {train_loss:.4f}, val acc {val_acc:.4f}")
        if val_acc > best[0]:
            best = (val_acc, epoch, params)
    val_acc, best_epoch, params = best
    test_logits = _predict_all(predict, params, data.test_ids, data.test_mask, 512)
    test_acc = float(((test_logits > 0) == (data.test_labels == 1)).mean())
    return BaselineResult(
        config=config,
        params=params,
        forward=forward,
        history=history,
        best_epoch=best_epoch,
        val_accuracy=val_acc,
        test_accuracy=test_acc,
        test_confusion=confusion_matrix(data.test_labels, test_logits),
        seconds=time.perf_counter() - start_time,
    )


# --------------------------------------------------------------------------- command line

# The recipes of ``m2l-nlp train --model <name>``: model settings and training settings.
RECIPES: dict[str, tuple[BaselineConfig, dict[str, Any]]] = {
    "bow-mlp": (
        BaselineConfig(model="bow-mlp", hidden_sizes=(64,), p_dropout=0.5),
        dict(epochs=3, batch_size=128, learning_rate=1e-3),
    ),
    "bigram-mlp": (
        BaselineConfig(model="bigram-mlp", hidden_sizes=(64,), p_dropout=0.5, use_tfidf=True),
        dict(epochs=3, batch_size=128, learning_rate=1e-3),
    ),
    "lstm": (
        BaselineConfig(model="lstm", embed_size=64, hidden_size=64, p_dropout=0.2, max_len=256),
        dict(epochs=6, batch_size=64, learning_rate=3e-3, clip_norm=1.0),
    ),
}
VOCAB_SIZE = 20000
# Bags of words need no cut: 2048 tokens keep all of almost every review (600 would cut 13 %).
# The LSTM reads only its first ``max_len`` tokens.
SEQ_LEN = 2048


def cli_train(args: Any) -> int:
    """``m2l-nlp train --model bow-mlp|bigram-mlp|lstm``: train, print and save the results.

    ``args`` are the parsed options of ``m2l-nlp train`` (``data``, ``epochs``, ``impl``,
    ``seed``, ``out``, ``cache_dir``, ``no_progress``, ``model``). Writes
    ``<out>/metrics.json`` and the plots (default ``out``: ``runs/<model>``).
    """
    import time
    from pathlib import Path

    from m2l_nlp.data import SMALL_DATA, prepare_imdb

    start = time.perf_counter()
    if args.model not in RECIPES:
        raise ValueError(f"unknown baseline {args.model!r}: choose one of {', '.join(RECIPES)}")
    config, train_kw = RECIPES[args.model]
    train_kw = dict(train_kw, seed=args.seed, impl=args.impl)
    if args.epochs is not None:
        train_kw["epochs"] = args.epochs
    source = str(SMALL_DATA) if args.data == "small" else args.data
    data = prepare_imdb(
        source,
        vocab_size=VOCAB_SIZE,
        seq_len=SEQ_LEN,
        seed=args.seed,
        cache_dir=args.cache_dir,
        progress=not args.no_progress,
    )
    print(f"data: {data} ({time.perf_counter() - start:.0f}s)")
    result = train_baseline(config, data, **train_kw)
    elapsed = time.perf_counter() - start
    c = result.test_confusion
    print(
        f"test accuracy: {result.test_accuracy:.4f} ({int(c.sum())} reviews); validation "
        f"{result.val_accuracy:.4f} at epoch {result.best_epoch}"
    )
    print("confusion matrix [true, predicted] (rows/cols: neg, pos):")
    print(
        f"            pred neg  pred pos\n  true neg  {c[0, 0]:8d}  {c[0, 1]:8d}\n"
        f"  true pos  {c[1, 0]:8d}  {c[1, 1]:8d}"
    )
    print(f"total time: {elapsed:.0f}s")
    out = Path(args.out or Path("runs") / args.model)  # the CLI fills it in beforehand
    out.mkdir(parents=True, exist_ok=True)
    metrics = {
        "model": args.model,
        "test_accuracy": result.test_accuracy,
        "val_accuracy": result.val_accuracy,
        "best_epoch": result.best_epoch,
        "confusion": c.tolist(),
        "seconds": elapsed,
        "impl": args.impl,
        "config": config.to_dict(),
        "train": {k: v for k, v in train_kw.items() if k != "impl"},
        "history": result.history,
    }
    write_json_atomic(out / "metrics.json", metrics)
    try:
        from m2l_nlp import plotting
    except ImportError as error:  # plotting is optional
        print(f"plots skipped ({error})")
    else:
        curves = plotting.plot_training_curves(result.history, title=f"{args.model}")
        plotting.save_figure(curves, out / "training_curves.png")
        matrix = plotting.plot_confusion_matrix(c, title=f"{args.model}: test confusion matrix")
        plotting.save_figure(matrix, out / "confusion_matrix.png")
    print(f"wrote {out}/metrics.json and plots")
    return 0
