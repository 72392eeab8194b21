"""The sentiment classifier as a kind of run: practical 2's transformer and practical 1's
baselines, trained on IMDB reviews, validated on held-out training reviews, tested once.

Its checkpoint (transformer only) is what ``m2l-nlp predict`` reads
(:mod:`m2l_nlp.runs.checkpoint`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import numpy as np

from m2l_nlp.config import ClassifierConfig, Preset
from m2l_nlp.data.splits import split_validation
from m2l_nlp.runs.checkpoint import CLASSIFIER, SUBWORDS, CheckpointKind
from m2l_nlp.runs.kinds import Context, Kind, Setup, test_scores
from m2l_nlp.train import metrics
from m2l_nlp.train.metrics import EvalResult


def resolve_val_size(preset: Preset, requested: int | None, no_test: bool, n_train: int) -> int:
    """Training reviews to hold out for per-epoch validation.

    ``requested`` (``--val-size``) wins when given. Otherwise a ``no_test`` run holds out
    the preset's ``val_size`` (at most a fifth of the split), and so does a test run unless
    the preset is a ``final_fit`` one, which trains on everything. Raises ``ValueError``
    saying what to do when the request leaves nothing to train on, or nothing to validate on
    in a ``no_test`` run.
    """
    if requested is None:
        val_size = 0 if preset.final_fit and not no_test else preset.val_size_for(n_train)
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


def _check_first_batch(preset: Preset, funcs, params, tie, split, impl) -> None:
    """One batch through the model before the first epoch: a wrong output (shape, dtype,
    NaN) would otherwise train to a meaningless accuracy. Its shape is traced only; a
    student's model (not the reference) is run too, for its values."""
    from m2l_nlp.model import classifiers as models

    ids, mask = (np.asarray(a[:8]) for a in split[:2])

    def forward(p, i, m):  # traced: the pairs' tie compiles nothing eagerly
        return funcs.model_fw.apply(tie(p) if tie else p, i, m, False)

    models.check_output(preset, jax.eval_shape(forward, params, ids, mask), len(ids), impl)
    if impl != "solutions":
        models.check_output(preset, jax.jit(forward)(params, ids, mask), len(ids), impl)


class Classifier(Kind):
    """One logit per review: positive or negative."""

    name = CLASSIFIER
    checkpoint = CheckpointKind(
        ClassifierConfig,
        SUBWORDS,
        "a sentiment classifier",
        "score reviews with",
        "predict",
        "default",
        "half a minute of CPU time",
        "runs/<name>/checkpoint",
    )

    def check(self, request) -> None:
        from m2l_nlp.data.imdb_archive import check_source
        from m2l_nlp.model.classifiers import check_model_builds

        resolve_val_size(request.preset, request.val_size, request.no_test, n_train=2**62)
        if request.impl == "exercises":  # named first
            check_model_builds(request.preset, request.impl)
        if request.data != "small":
            check_source(request.data)

    def prepare(self, request) -> Any:
        from m2l_nlp.data.pipeline import prepare_for

        return prepare_for(
            request.preset,
            request.data,
            seed=request.seed,
            cache_dir=request.cache_dir,
            progress=request.progress,
        )

    def setup(self, preset: Preset, data: Any, run: Context) -> Setup:
        from m2l_nlp.model import classifiers as models

        seed, impl, log = run.seed, run.impl, run.log
        n_train = len(data.train_labels)
        val_size = resolve_val_size(preset, run.val_size, run.no_test, n_train)
        train_split, val_split = split_validation(data, val_size)
        log(
            f"data: {n_train - val_size} train / {val_size} validation / "
            f"{len(data.test_labels)} test reviews, vocabulary {data.vocab_size}, up to "
            f"{data.seq_len} tokens"
        )
        if preset.final_fit and not val_size:
            log(
                f"final fit: the {preset.val_size_for(n_train)} validation reviews are trained "
                "on too (the recipe was chosen on them); add --no-test to validate a recipe"
            )
        funcs, config, params, tie = models.init_for_preset(
            preset, data, seed, impl, *train_split[:2]
        )
        _check_first_batch(preset, funcs, params, tie, train_split, impl)
        cache = getattr(data, "cache_path", None)
        return Setup(
            funcs,
            params,
            config,
            train_split,
            val_split,
            metrics.BINARY,
            fingerprint=dict(val_size=val_size, data=Path(cache).name if cache else None),
            metrics=dict(val_size=val_size),
            tie=tie,
        )

    def finish(
        self, setup: Setup, params: Any, validation: EvalResult | None, data: Any, run: Context
    ) -> dict[str, Any]:
        scores: dict[str, Any] = {}
        if validation is not None:
            scores["val_accuracy"] = validation.accuracy
        if not run.no_test:
            split = (data.test_ids, data.test_mask, data.test_labels)
            test = test_scores(setup, params, split, run)
            scores.update(
                test=test,
                test_accuracy=test.accuracy,
                test_loss=test.loss,
                confusion=test.confusion.tolist(),
            )
        return scores

    def save(self, out: Path, result, data: Any, run: Context) -> None:
        from m2l_nlp.runs.checkpoint import save_run

        save_run(
            out,
            result,
            run.settings,
            data.tokenizer,
            # what predict reads: the transformer's (a baseline has no checkpoint)
            checkpoint=result.test is not None and isinstance(result.config, ClassifierConfig),
            bigram_table=data.bigram_table,
        )

    def summary(self, result) -> list[str]:
        lines = []
        if "val_acc" in result.history:
            shown = ", ".join(f"{100 * a:.2f}" for a in result.history["val_acc"])
            lines.append(
                f"validation accuracy per epoch (%): {shown}; kept epoch "
                f"{result.metrics['best_epoch']}"
            )
        if result.test is None:
            return [*lines, "test set not evaluated: --no-test"]
        test, c = result.test, result.test.confusion
        return [
            *lines,
            f"test accuracy: {test.accuracy:.4f} ({test.count} reviews), loss {test.loss:.4f}",
            "confusion matrix [true, predicted] (rows/cols: neg, pos):",
            f"            pred neg  pred pos\n  true neg  {c[0, 0]:8d}  {c[0, 1]:8d}\n"
            f"  true pos  {c[1, 0]:8d}  {c[1, 1]:8d}",
        ]


KIND = Classifier()
