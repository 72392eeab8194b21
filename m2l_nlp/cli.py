"""Command line: ``m2l-nlp train | predict | grade``.

``m2l-nlp train`` is the main job: IMDB -> tokenizer -> the practical-2 transformer trained
on the accelerator if there is one -> test accuracy, confusion matrix, plots and a
checkpoint under ``runs/<preset>/``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from m2l_nlp import bigrams, devices
from m2l_nlp.config import ClassifierConfig, check_field_types
from m2l_nlp.fileio import write_json_atomic
from m2l_nlp.tokenization import MIN_VOCAB_SIZE


@dataclasses.dataclass(frozen=True)
class Preset:
    """A full recipe: data encoding, model sizes, training settings, validation size."""

    description: str
    vocab_size: int
    seq_len: int  # tokens kept per review (evaluation reads up to this many)
    model: dict[str, Any]
    train: dict[str, Any]
    val_size: int  # held out from the training split for per-epoch validation
    embed_scale: float = 1.0  # initial token embeddings times this
    bigram_tokens: int = 0  # > 0: that many frequent token pairs as extra tokens (m2l_nlp.bigrams)
    bigram_mode: str = "merge"  # "merge": a pair replaces its first token; "interleave": follows it
    # True: a run that reports test accuracy trains on the whole training split, validation
    # reviews included, for the preset's epochs (chosen beforehand by --no-test runs, which
    # still hold out val_size) and keeps the last epoch. --val-size overrides either way.
    final_fit: bool = False

    def __post_init__(self) -> None:
        check_field_types(self)
        bigrams.check_mode(self.bigram_mode)
        limits = {"vocab_size": MIN_VOCAB_SIZE, "seq_len": 1, "bigram_tokens": 0, "val_size": 0}
        for name, least in limits.items():
            if getattr(self, name) < least:
                raise ValueError(f"{name} must be at least {least}, not {getattr(self, name)}")
        if self.embed_scale <= 0:
            raise ValueError(f"embed_scale must be positive, not {self.embed_scale}")


PRESETS: dict[str, Preset] = {
    "default": Preset(
        "the recipe of `make train`: the 50,000 most frequent token pairs as extra tokens, 1 "
        "layer, d_model 128, mean pooling, dropout 0.5, batches of 128, random 512-token crops, "
        "moving average of the weights, evaluation averaged over 512-token windows; the test run "
        "trains on all training reviews (final fit)",
        vocab_size=20000,
        seq_len=1024,
        model=dict(num_layers=1, num_heads=4, d_model=128, d_ff=256, p_dropout=0.5, pooling="mean"),
        train=dict(
            epochs=3,
            batch_size=128,
            learning_rate=4e-3,
            weight_decay=0.3,
            crop_len=512,
            ema_decay=0.992,
        ),
        val_size=2500,
        embed_scale=0.1,
        bigram_tokens=50000,
        final_fit=True,
    ),
    "seed": Preset(
        "the tutorial's model: d_model 32, 2 layers, 8 heads, d_ff 32, 600 tokens, mean pool",
        vocab_size=20000,
        seq_len=600,
        model=dict(num_layers=2, num_heads=8, d_model=32, d_ff=32, p_dropout=0.1, pooling="mean"),
        train=dict(epochs=2, batch_size=8, learning_rate=1e-3, weight_decay=0.0, crop_len=600),
        val_size=2500,
    ),
    "demo": Preset(
        "a tiny model for the bundled small dataset (seconds), with bigram tokens",
        vocab_size=2000,
        seq_len=256,
        model=dict(
            num_layers=1, num_heads=2, d_model=32, d_ff=64, p_dropout=0.1, pooling="mean_max"
        ),
        train=dict(epochs=3, batch_size=16, learning_rate=3e-3, weight_decay=0.01, crop_len=128),
        val_size=50,
        bigram_tokens=2000,
    ),
}

PRESETS["unigram"] = dataclasses.replace(
    PRESETS["default"],
    description="no bigram tokens, batches of 32, 256-token crops, 4 epochs (`make train` "
    "before bigram tokens)",
    train=dict(
        PRESETS["default"].train,
        epochs=4,
        batch_size=32,
        learning_rate=2e-3,
        crop_len=256,
        ema_decay=0.998,
    ),
    bigram_tokens=0,
    final_fit=False,  # its README row held out the validation reviews
)


def override_preset(preset: Preset, assignments: Sequence[str]) -> Preset:
    """``preset`` with ``KEY=VALUE`` assignments applied (``m2l-nlp train --set``).

    Top-level fields by name (``bigram_tokens=100000``), model sizes and training settings
    with a prefix (``model.d_model=64``, ``train.crop_len=512``). A value is read as JSON
    (numbers, ``true``/``false``, ``null``) and otherwise kept as text (``model.pooling=max``).
    Raises ``ValueError`` naming the valid keys when a key is unknown.
    """
    from m2l_nlp.training import TrainSettings

    groups = {
        "model": {f.name for f in dataclasses.fields(ClassifierConfig)} - {"vocab_size", "max_len"},
        "train": {f.name for f in dataclasses.fields(TrainSettings)},
    }
    top = {f.name for f in dataclasses.fields(Preset)} - {"description", *groups}
    for item in assignments:
        key, sep, text = item.partition("=")
        if not sep:
            raise ValueError(f"--set {item!r}: expected KEY=VALUE, e.g. train.crop_len=512")
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            value = text
        group, dot, name = key.partition(".")
        if dot and name in groups.get(group, ()):
            preset = dataclasses.replace(preset, **{group: {**getattr(preset, group), name: value}})
        elif not dot and key in top:
            preset = dataclasses.replace(preset, **{key: value})
        else:
            raise ValueError(
                f"--set {item!r}: unknown key {key!r}; use one of {', '.join(sorted(top))}, "
                f"model.NAME ({', '.join(sorted(groups['model']))}) or train.NAME "
                f"({', '.join(sorted(groups['train']))})"
            )
    return preset


# Practical 1's baselines (m2l_nlp.baselines.MODELS), listed here to keep `--help` light.
BASELINES = ("bow-mlp", "bigram-mlp", "lstm")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="m2l-nlp", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="train the transformer classifier on IMDB")
    train.add_argument(
        "--data",
        default=None,
        help="aclImdb_v1.tar.gz, an extracted aclImdb/ folder, or 'small' for the bundled "
        "small dataset (default: $M2L_NLP_IMDB, else download the official archive)",
    )
    train.add_argument(
        "--preset", choices=sorted(PRESETS), default=None, help="the recipe (default: default)"
    )
    train.add_argument(
        "--model",
        choices=("transformer", *BASELINES),
        default="transformer",
        help="the practical-2 transformer (default), or a practical-1 baseline "
        "(see m2l_nlp/baselines.py; --preset does not apply to baselines)",
    )
    train.add_argument(
        "--epochs", type=_positive, default=None, help="override the preset's epochs"
    )
    train.add_argument("--impl", choices=("solutions", "exercises"), default="solutions")
    train.add_argument(
        "--val-size",
        type=_non_negative,
        default=None,
        help="training reviews held out to validate after each epoch and keep the best one "
        "(default: the preset's, or 0 for a final fit such as the default preset's test run; "
        "0 trains on the whole training split)",
    )
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="change one setting of the preset, e.g. --set bigram_tokens=100000 "
        "--set train.crop_len=512 --set model.d_model=64 (repeatable)",
    )
    train.add_argument(
        "--no-test",
        action="store_true",
        help="validation only: do not evaluate on the test set (for choosing a recipe)",
    )
    train.add_argument("--seed", type=_non_negative, default=0)
    train.add_argument(
        "--out",
        default=None,
        help="output folder (default runs/<preset>, or runs/<preset>-val for --no-test)",
    )
    train.add_argument("--cache-dir", default=None, help="where encoded data are cached")
    train.add_argument("--no-progress", action="store_true", help="no progress bars")

    predict = sub.add_parser("predict", help="score your own reviews with a checkpoint")
    predict.add_argument("texts", nargs="+", help="one or more reviews (quote each)")
    predict.add_argument("--checkpoint", default="runs/default/checkpoint")
    predict.add_argument("--impl", choices=("solutions", "exercises"), default="solutions")

    grade = sub.add_parser("grade", help="grade the exercises (arguments go to pytest)")
    grade.add_argument("pytest_args", nargs=argparse.REMAINDER)
    return parser


def preset_val_size(preset: Preset, n_train: int) -> int:
    """The preset's validation split for a training split of ``n_train``: at most a fifth."""
    return min(preset.val_size, n_train // 5)


def resolve_val_size(preset: Preset, requested: int | None, no_test: bool, n_train: int) -> int:
    """Training reviews to hold out for per-epoch validation.

    ``requested`` (``--val-size``) wins when given. Otherwise a ``--no-test`` run holds out
    the preset's ``val_size`` (at most a fifth of the split), and so does a test run unless
    the preset is a ``final_fit`` one, which trains on everything. Raises ``ValueError``
    saying what to do when the request leaves nothing to train on, or nothing to validate on
    in a ``--no-test`` run.
    """
    if requested is None:
        val_size = 0 if preset.final_fit and not no_test else preset_val_size(preset, n_train)
    elif requested >= n_train:
        raise ValueError(
            f"--val-size {requested} leaves nothing to train on: the training split has "
            f"{n_train} reviews; hold out fewer (or 0)"
        )
    else:
        val_size = requested
    if no_test and not val_size:
        raise ValueError("--no-test needs a validation split to report on; drop --val-size 0")
    return val_size


def _train_baseline(args: argparse.Namespace) -> int:
    """``--model bow-mlp|bigram-mlp|lstm``: refuse the transformer's options, then train."""
    given = (
        ("--preset", args.preset is not None),
        ("--set", bool(args.set)),
        ("--val-size", args.val_size is not None),
        ("--no-test", args.no_test),
    )
    misplaced = [option for option, used in given if used]
    if misplaced:
        print(
            f"error: {', '.join(misplaced)} {'applies' if len(misplaced) == 1 else 'apply'} "
            "only to the transformer; a baseline trains "
            "with its fixed recipe (RECIPES in m2l_nlp/baselines.py), holds out a tenth of the "
            "training reviews for validation and reports test accuracy",
            file=sys.stderr,
        )
        return 2
    args.out = args.out or str(Path("runs") / args.model)  # checked here, written there
    if _refuse_output_folders(Path(args.out), args.cache_dir):
        return 2
    from m2l_nlp.baselines import cli_train

    return cli_train(args)


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more, not {value}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def default_out(name: str, no_test: bool) -> Path:
    """``runs/<name>``, or ``runs/<name>-val`` for a ``--no-test`` run, so that trying a
    recipe never overwrites the metrics and checkpoint of a run that reported test accuracy."""
    return Path("runs") / (f"{name}-val" if no_test else name)


def unwritable(folder: Path, option: str) -> str | None:
    """Why files could not be written in ``folder``, or None if they could (nothing is
    created: the nearest folder that exists is checked, where the rest would be made)."""
    existing = folder.absolute()
    try:
        while not existing.exists() and existing.parent != existing:
            existing = existing.parent
    except OSError as error:  # e.g. a parent we may not look into
        return (
            f"cannot use {folder} ({error.strerror or error}): choose another folder with {option}"
        )
    if not existing.is_dir():
        return f"{existing} is a file, not a folder: choose another folder with {option}"
    if not os.access(existing, os.W_OK | os.X_OK):
        return (
            f"cannot write in {existing} (permission denied): choose another folder with {option}"
        )
    return None


def _refuse_output_folders(out: Path, cache_dir: str | None) -> bool:
    """Print an error and return True if ``out`` or the data cache cannot be written: found
    before the data load, not after the training it would have thrown away."""
    from m2l_nlp.data import default_cache_dir

    cache = Path(cache_dir) if cache_dir else default_cache_dir()
    problem = unwritable(out, "--out") or unwritable(cache, "--cache-dir")
    if problem:
        print(f"error: {problem}", file=sys.stderr)
    return problem is not None


def _data_source(data: str | None) -> str | None:
    if data == "small":
        from m2l_nlp.data import SMALL_DATA

        return str(SMALL_DATA)
    return data


def cmd_train(args: argparse.Namespace) -> int:
    if args.model != "transformer":
        return _train_baseline(args)
    args.preset = args.preset or "default"
    import jax
    import numpy as np

    from m2l_nlp import training
    from m2l_nlp.checkpoint import save_checkpoint
    from m2l_nlp.data import prepare_imdb

    start = time.perf_counter()
    try:
        preset = override_preset(PRESETS[args.preset], args.set)
    except (TypeError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    settings_kw = dict(preset.train, seed=args.seed)
    if args.epochs is not None:
        settings_kw["epochs"] = args.epochs
    try:
        settings = training.TrainSettings(**settings_kw)
        ClassifierConfig(vocab_size=preset.vocab_size, max_len=preset.seq_len, **preset.model)
    except (TypeError, ValueError) as error:
        print(f"error: preset {args.preset} with {args.set}: {error}", file=sys.stderr)
        return 2
    try:  # what can be checked before the data load (which takes minutes on the full IMDB)
        resolve_val_size(preset, args.val_size, args.no_test, n_train=sys.maxsize)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    out = Path(args.out or default_out(args.preset, args.no_test))
    if _refuse_output_folders(out, args.cache_dir):
        return 2
    progress = not args.no_progress
    print(f"devices: {devices.describe_devices()}")
    print(f"preset {args.preset}: {preset.description}")
    if args.set:
        print(f"changed: {' '.join(args.set)}")

    data = prepare_imdb(
        _data_source(args.data),
        vocab_size=preset.vocab_size,
        seq_len=preset.seq_len,
        seed=args.seed,
        cache_dir=args.cache_dir,
        progress=progress,
        bigram_tokens=preset.bigram_tokens,
        bigram_mode=preset.bigram_mode,
    )
    n_train = len(data.train_labels)
    try:
        val_size = resolve_val_size(preset, args.val_size, args.no_test, n_train)
    except ValueError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    keep = n_train - val_size
    print(
        f"data: {keep} train / {val_size} validation / {len(data.test_labels)} test reviews, "
        f"vocab {data.vocab_size}{_bigram_note(data)}, up to {data.seq_len} tokens "
        f"({time.perf_counter() - start:.0f}s)"
    )
    if preset.final_fit and not val_size:
        print(
            f"final fit: the {preset_val_size(preset, n_train)} validation reviews are trained "
            "on too (the recipe was chosen on them); add --no-test to validate a recipe"
        )
    config = ClassifierConfig(vocab_size=data.vocab_size, max_len=data.seq_len, **preset.model)
    model = training.build_model(config, args.impl)
    params = training.init_params(
        model, jax.random.PRNGKey(args.seed), config, embed_scale=preset.embed_scale
    )
    mesh = devices.make_mesh()
    train_split = (data.train_ids[:keep], data.train_mask[:keep], data.train_labels[:keep])
    val_split = None
    if val_size:
        val_split = (data.train_ids[keep:], data.train_mask[keep:], data.train_labels[keep:])
    result = training.train(
        model,
        params,
        train_split,
        settings,
        eval_data=val_split,
        eval_name="val",
        mesh=mesh,
        progress=progress,
    )
    if args.no_test:
        return _finish_validation_run(args, out, result, start)
    test = training.evaluate(
        result.params,
        model,
        (data.test_ids, data.test_mask, data.test_labels),
        window=settings.crop_len,
        batch_size=settings.eval_batch_size,
        mesh=mesh,
        progress=progress,
        desc="test",
    )
    elapsed = time.perf_counter() - start
    print(f"test accuracy: {test.accuracy:.4f} ({test.count} reviews), loss {test.loss:.4f}")
    print("confusion matrix [true, predicted] (rows/cols: neg, pos):")
    print(
        f"            pred neg  pred pos\n  true neg  {test.confusion[0, 0]:8d}  "
        f"{test.confusion[0, 1]:8d}\n  true pos  {test.confusion[1, 0]:8d}  "
        f"{test.confusion[1, 1]:8d}"
    )
    print(f"total time: {elapsed:.0f}s")

    metrics = {
        "test_accuracy": test.accuracy,
        "test_loss": test.loss,
        "confusion": test.confusion.tolist(),
        "seconds": elapsed,
        "preset": args.preset,
        "changed": list(args.set),
        "best_epoch": result.best_epoch,
        "impl": args.impl,
        "devices": devices.describe_devices(),
    }
    meta = dict(metrics, settings=dataclasses.asdict(settings), history=result.history)
    ckpt = save_checkpoint(
        out / "checkpoint",
        jax.device_get(result.params),
        config,
        data.tokenizer,
        meta,
        bigram_table=data.bigram_table,
        bigram_mode=data.bigram_mode,
    )
    write_json_atomic(out / "metrics.json", dict(metrics, history=result.history))
    _save_plots(out, result.history, np.asarray(test.confusion))
    print(f"wrote {ckpt} and {out}/metrics.json")
    return 0


def _finish_validation_run(args: argparse.Namespace, out: Path, result: Any, start: float) -> int:
    """``--no-test``: report and save the validation history; the test set is not evaluated."""
    elapsed = time.perf_counter() - start
    summary = ", ".join(f"{100 * a:.2f}" for a in result.history["val_acc"])
    print(f"validation accuracy per epoch (%): {summary}; best epoch {result.best_epoch}")
    print(f"total time: {elapsed:.0f}s (test set not evaluated: --no-test)")
    metrics = {
        "val_accuracy": result.eval_result.accuracy,
        "best_epoch": result.best_epoch,
        "seconds": elapsed,
        "preset": args.preset,
        "changed": list(args.set),
        "history": result.history,
    }
    write_json_atomic(out / "metrics.json", metrics)
    _save_plots(out, result.history)
    print(f"wrote {out}/metrics.json")
    return 0


def _bigram_note(data: Any) -> str:
    if data.bigram_table is None:
        return ""
    return f" (of which {len(data.bigram_table)} bigram tokens, {data.bigram_mode}d)"


def _save_plots(out: Path, history: dict, confusion: Any = None) -> None:
    """Training curves, and the test confusion matrix when there is one."""
    from m2l_nlp import plotting

    paths = [out / "training_curves.png"]
    plotting.save_figure(plotting.plot_training_curves(history, title="Training curves"), paths[0])
    if confusion is not None:
        paths.append(out / "confusion_matrix.png")
        matrix = plotting.plot_confusion_matrix(confusion, title="Test confusion matrix")
        plotting.save_figure(matrix, paths[1])
    print(f"plots: {', '.join(map(str, paths))}")


def cmd_predict(args: argparse.Namespace) -> int:
    from m2l_nlp.checkpoint import load_checkpoint, predict

    checkpoint = load_checkpoint(args.checkpoint)  # CheckpointError: reported by main
    probs = predict(args.texts, checkpoint, impl=args.impl)
    for text, p in zip(args.texts, probs, strict=True):
        label = "positive" if p >= 0.5 else "negative"
        short = text if len(text) <= 60 else text[:57] + "..."
        print(f"{label:8s}  p(positive)={p:.3f}  {short!r}")
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    try:
        from m2l_nlp.grading.cli import main as grade_main
    except ImportError as error:
        print(f"error: the grader is not available ({error})", file=sys.stderr)
        return 2
    rest = list(args.pytest_args)
    if rest[:1] == ["--"]:
        rest = rest[1:]
    return int(grade_main(rest))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``m2l-nlp``; returns the exit code."""
    from m2l_nlp.checkpoint import CheckpointError
    from m2l_nlp.data import DataError, compilation_cache_dir

    devices.configure_environment(compilation_cache=compilation_cache_dir())  # before JAX
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["grade"]:  # everything after "grade" belongs to pytest, options included
        return cmd_grade(argparse.Namespace(pytest_args=argv[1:]))
    args = _parser().parse_args(argv)
    try:
        if args.command == "train":
            return cmd_train(args)
        if args.command == "predict":
            return cmd_predict(args)
    except (DataError, CheckpointError) as error:  # a missing or damaged file: what to do
        print(f"error: {error}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(
            "\ninterrupted: files are renamed into place only once complete, so nothing "
            "half-written was left (an older checkpoint or cache stays as it was)",
            file=sys.stderr,
        )
        return 130
    except NotImplementedError as error:
        if getattr(args, "impl", None) != "exercises":
            raise
        print(
            f"error: {error}. --impl exercises runs your own modules: finish the exercises "
            "first (`pytest` lists what is left) or use --impl solutions",
            file=sys.stderr,
        )
        return 2
    return cmd_grade(args)


if __name__ == "__main__":
    sys.exit(main())
