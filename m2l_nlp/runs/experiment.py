"""One experiment: a preset's model trained, validated, tested and saved.

:func:`train_and_evaluate` is the whole job of ``m2l-nlp train`` and of the notebooks'
training cells: prepared data and a preset (:mod:`m2l_nlp.config`) in, the trained model, its
history and its test result out, saved as one run folder (:mod:`m2l_nlp.runs`) that an
interrupted run can resume. The training itself is :func:`m2l_nlp.train.loop.train`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import haiku as hk
import jax
import numpy as np

from m2l_nlp import devices
from m2l_nlp.config import LANGUAGE_MODEL, TRANSLATION, Preset
from m2l_nlp.data.splits import split_validation
from m2l_nlp.runs import folders as runs
from m2l_nlp.train.evaluation import evaluate
from m2l_nlp.train.loop import StateMismatch, train
from m2l_nlp.train.metrics import EvalResult
from m2l_nlp.train.progress import Progress
from m2l_nlp.transform import ModelFuncs


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


class RunResult(NamedTuple):
    """What :func:`train_and_evaluate` returns: the trained model, its config, the history
    and the test result (None for a ``no_test`` run), and the metrics it saved."""

    model: ModelFuncs
    params: hk.Params
    config: Any
    history: dict[str, list[float]]
    test: EvalResult | None
    metrics: dict[str, Any]


IMPL_WORDS = {
    "exercises": "your modules",
    "solutions": "the reference; --impl exercises trains yours",
}


@dataclasses.dataclass(frozen=True)
class TrainRequest:
    """What ``m2l-nlp train`` was asked: a preset (its ``--set`` changes applied) and where
    its data, run folder and caches are."""

    name: str  # the preset's name
    preset: Preset
    data: str | None  # a path, "small", or None (IMDB wherever it is found)
    out: Path
    cache_dir: Path | None = None
    changed: tuple[str, ...] = ()
    impl: str = "solutions"
    seed: int = 0
    val_size: int | None = None
    no_test: bool = False
    overwrite: bool = False
    resume: bool = False
    progress: bool = True


class TrainStopped(Exception):
    """The run stopped before it was written (``interrupted``, or it diverged); ``saved``: the
    epoch kept in its run folder (``{"epoch": .., "epochs": ..}``, or None), which
    ``--resume`` continues."""

    def __init__(self, message: str, saved: dict[str, Any] | None, interrupted: bool = False):
        super().__init__(message)
        self.saved = saved
        self.interrupted = interrupted


def run_training(request: TrainRequest, say: Callable[[str], None] = print) -> RunResult:
    """The whole job of ``m2l-nlp train``: what can be checked is checked before the data
    are read (minutes on the full IMDB), then the run folder is opened, the data prepared,
    and the model trained, tested and saved (:func:`train_and_evaluate`); ``say`` gets the
    lines to show. Raises ``ValueError`` for a request that cannot run (nothing created),
    the data's, the folder's and the model's own errors, and :class:`TrainStopped` for a
    run that diverged (its ``DivergedError`` as the cause) or was interrupted."""
    from m2l_nlp.data.imdb_archive import check_source
    from m2l_nlp.data.pipeline import default_cache_dir, prepare_for
    from m2l_nlp.model.classifiers import check_model_builds
    from m2l_nlp.train.loop import DivergedError

    start = time.perf_counter()
    preset = request.preset
    try:
        preset.check()
    except TypeError as error:  # a setting of the wrong type: the request's, said the same way
        raise ValueError(str(error)) from None
    if preset.architecture == TRANSLATION:  # its validation side is a share of the pairs
        if request.val_size is not None:
            raise ValueError(
                "--val-size is for reviews: the translate preset validates on 5 % of the pairs "
                "(split by sentence; m2l_nlp/data/tatoeba.py)"
            )
    else:
        resolve_val_size(preset, request.val_size, request.no_test, n_train=2**62)
    classifier = preset.architecture not in (LANGUAGE_MODEL, TRANSLATION)
    if request.impl == "exercises" and classifier:  # named first
        check_model_builds(preset, request.impl)
    if preset.architecture == TRANSLATION:  # a wrong path is named before anything is created
        from m2l_nlp.data.tatoeba import resolve_pairs
        from m2l_nlp.model.translators import check_builds

        if request.impl == "exercises":
            check_builds(preset, request.impl)
        resolve_pairs(request.data, progress=request.progress)
    elif request.data != "small":
        check_source(request.data)
    cache = request.cache_dir or default_cache_dir()
    problem = runs.unwritable(request.out.absolute().parent, "--out") or runs.unwritable(
        cache, "--cache-dir"
    )
    if problem:
        raise ValueError(problem)
    with runs.open_run(request.out, overwrite=request.overwrite, resume=request.resume) as folder:
        say(f"model: {request.impl}/ ({IMPL_WORDS[request.impl]})")
        say(f"devices: {devices.describe_devices()}")
        say(f"preset {request.name}: {preset.description}")
        if request.changed:
            say(f"changed: {' '.join(request.changed)}")
        if preset.architecture == TRANSLATION:
            from m2l_nlp.data.translation import prepare_translation
            from m2l_nlp.runs.translation import train_translation

            data = prepare_translation(
                request.data,
                vocab_size=preset.vocab_size,
                max_len=preset.seq_len,
                seed=request.seed,
                progress=request.progress,
            )
            job = functools.partial(train_translation, preset, data, folder)
        elif preset.architecture == LANGUAGE_MODEL:
            from m2l_nlp.data.characters import prepare_characters
            from m2l_nlp.runs.language_model import train_language_model

            data = prepare_characters(
                request.data,
                width=preset.seq_len,
                max_chars=preset.vocab_size,
                val_size=preset.val_size if request.val_size is None else request.val_size,
                train_reviews=preset.train_reviews,
                seed=request.seed,
                cache_dir=request.cache_dir,
                progress=request.progress,
            )
            job = functools.partial(train_language_model, preset, data, folder)
        else:
            data = prepare_for(
                preset,
                request.data,
                seed=request.seed,
                cache_dir=request.cache_dir,
                progress=request.progress,
            )
            job = functools.partial(
                _train_and_evaluate, preset, data, folder, val_size=request.val_size
            )
        say(f"data prepared ({time.perf_counter() - start:.0f}s)")
        try:
            return job(
                name=request.name,
                changed=request.changed,
                impl=request.impl,
                seed=request.seed,
                no_test=request.no_test,
                resume=request.resume,
                progress=request.progress,
                log=say,
            )
        except DivergedError as error:  # nothing is written over the run already there
            saved = folder.read_progress()
            kept = f"; nothing was written to {request.out}"
            if saved is not None:
                kept += (
                    f"; epoch {saved['epoch']} of {saved['epochs']} is kept (--resume continues "
                    "it, --overwrite starts again)"
                )
            raise TrainStopped(f"{error}{kept}", saved) from error
        except KeyboardInterrupt:
            saved = folder.read_progress()
            if saved is None:
                raise
            raise TrainStopped("interrupted", saved, interrupted=True) from None


def _check_first_batch(
    preset: Preset, funcs: ModelFuncs, params: Any, tie: Any, split: Any, impl: Any
) -> None:
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


def train_and_evaluate(
    preset: Preset,
    data: Any,
    out: str | os.PathLike | runs.RunFolder | None = None,
    *,
    name: str = "",
    changed: Sequence[str] = (),
    impl: Any = "solutions",
    seed: int = 0,
    val_size: int | None = None,
    no_test: bool = False,
    overwrite: bool = False,
    resume: bool = False,
    progress: bool = True,
    log: Callable[[str], None] | None = print,
) -> RunResult:
    """The whole job: train the model of ``preset`` on ``data``, validate, test, save.

    ``data`` is a :class:`~m2l_nlp.data.PreparedData` encoded as the preset says
    (:func:`m2l_nlp.data.pipeline.prepare_for`). ``val_size`` training reviews are held out
    (:func:`m2l_nlp.data.splits.split_validation`; default: see
    :func:`resolve_val_size`) to validate each epoch and keep the best;
    the test reviews are scored once, at the end, unless ``no_test``. ``impl`` picks the
    student's or the reference modules (or a notebook's ``globals()``); ``name`` and
    ``changed`` (the preset's name and its ``--set`` changes) are recorded in the metrics.

    With ``out`` (a folder, or a :class:`~m2l_nlp.runs.RunFolder` already open) the run is
    saved there as one unit, every epoch is kept beside it, and ``resume`` continues an
    interrupted run with the same settings; an existing run is replaced only with
    ``overwrite`` (:mod:`m2l_nlp.runs`).
    """
    with contextlib.ExitStack() as stack:
        folder = out
        if out is not None and not isinstance(out, runs.RunFolder):
            folder = stack.enter_context(runs.open_run(out, overwrite=overwrite, resume=resume))
        return _train_and_evaluate(
            preset,
            data,
            folder,
            name=name,
            changed=changed,
            impl=impl,
            seed=seed,
            val_size=val_size,
            no_test=no_test,
            resume=resume,
            progress=progress,
            log=log or (lambda line: None),
        )


def _train_and_evaluate(
    preset: Preset,
    data: Any,
    folder: runs.RunFolder | None,
    *,
    name: str,
    changed: Sequence[str],
    impl: Any,
    seed: int,
    val_size: int | None,
    no_test: bool,
    resume: bool,
    progress: bool,
    log: Callable[[str], None],
) -> RunResult:
    from m2l_nlp.model import classifiers as models
    from m2l_nlp.runs.checkpoint import save_run

    start = time.perf_counter()
    compiled_before = devices.compile_counter()
    settings = preset.settings(seed=seed)
    n_train = len(data.train_labels)
    val_size = resolve_val_size(preset, val_size, no_test, n_train)
    train_split, val_split = split_validation(data, val_size)
    log(
        f"data: {n_train - val_size} train / {val_size} validation / {len(data.test_labels)} "
        f"test reviews, vocabulary {data.vocab_size}, up to {data.seq_len} tokens"
    )
    if preset.final_fit and not val_size:
        log(
            f"final fit: the {preset.val_size_for(n_train)} validation reviews are trained on "
            "too (the recipe was chosen on them); add --no-test to validate a recipe"
        )
    funcs, config, params, tie = models.init_for_preset(preset, data, seed, impl, *train_split[:2])
    _check_first_batch(preset, funcs, params, tie, train_split, impl)
    fingerprint = runs.fingerprint(
        preset=dataclasses.asdict(preset),
        name=name,
        impl=impl if isinstance(impl, str) else "",
        seed=seed,
        val_size=val_size,
        no_test=no_test,
        data=Path(data.cache_path).name if getattr(data, "cache_path", None) else None,
    )
    begin, on_epoch = None, None
    if folder is not None:
        if resume:
            begin = folder.resume_from(fingerprint)
            log(f"resuming after epoch {begin.epoch} of {settings.epochs}")

        def on_epoch(done: Progress) -> None:
            folder.keep_epoch(done, settings.epochs, fingerprint)

    mesh = devices.make_mesh()
    try:
        result = train(
            funcs,
            params,
            train_split,
            settings,
            eval_data=val_split,
            mesh=mesh,
            progress=progress,
            log=log,
            start=begin,
            on_epoch=on_epoch,
            tie=tie,  # the classifier's parameters come back, the pairs' rows tied
        )
    except StateMismatch as error:  # checked before anything of it is loaded
        raise runs.RunFolderError(f"--resume: {error}") from None
    params = result.params
    test = None
    if not no_test:
        test = evaluate(
            params,
            funcs,
            (data.test_ids, data.test_mask, data.test_labels),
            settings=settings,
            mesh=mesh,
            progress=progress,
            desc="test",
        )
    run_metrics: dict[str, Any] = {
        "preset": name,
        "changed": list(changed),
        "architecture": preset.architecture,
        "best_epoch": result.best_epoch,
        "val_size": val_size,
        "impl": impl if isinstance(impl, str) else "notebook",
        "devices": devices.describe_devices(),
    }
    if result.eval_result is not None:
        run_metrics["val_accuracy"] = result.eval_result.accuracy
    if test is not None:
        run_metrics.update(
            test_accuracy=test.accuracy, test_loss=test.loss, confusion=test.confusion.tolist()
        )
    compiled = devices.compile_counter()
    run_metrics["compiled_programs"] = compiled["programs"] - compiled_before["programs"]
    run_metrics["compile_seconds"] = compiled["seconds"] - compiled_before["seconds"]
    run_metrics["seconds"] = time.perf_counter() - start
    params = jax.device_get(params)
    run = RunResult(funcs, params, config, result.history, test, run_metrics)
    if folder is not None:
        folder.commit(  # run.json says whose modules were trained: a forgotten --impl shows
            lambda new: save_run(new, run, preset, settings, data),
            dict(preset=name, architecture=preset.architecture, impl=run_metrics["impl"]),
        )
    return run
