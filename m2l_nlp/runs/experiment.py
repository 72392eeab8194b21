"""One experiment: a preset's model trained, validated, tested and saved.

:func:`train_and_evaluate` is the whole job of ``m2l-nlp train`` and of the notebooks'
training cells: prepared data and a preset (:mod:`m2l_nlp.config`) in, the trained model, its
history and its test result out, saved as one run folder (:mod:`m2l_nlp.runs`) that an
interrupted run can resume. The training itself is :func:`m2l_nlp.train.loop.train`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import haiku as hk
import jax

from m2l_nlp import devices
from m2l_nlp.config import Preset
from m2l_nlp.runs import folders as runs
from m2l_nlp.runs.kinds import Context, Kind, kind_of
from m2l_nlp.train.loop import StateMismatch, train
from m2l_nlp.train.metrics import EvalResult
from m2l_nlp.train.progress import Progress
from m2l_nlp.transform import ModelFuncs


class RunResult(NamedTuple):
    """What :func:`train_and_evaluate` returns: the trained model, its config, the history,
    the classifier's test result (None for a ``no_test`` run and for the other kinds, whose
    test scores are in the metrics), and the metrics it saved."""

    model: ModelFuncs
    params: hk.Params
    config: Any
    history: dict[str, list[float]]
    test: EvalResult | None
    metrics: dict[str, Any]
    kind: Kind  # what trained it: its summary, its checkpoint's command


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
    out: Path  # (train_and_evaluate: the folder it was given, opened already)
    cache_dir: Path | None = None
    changed: tuple[str, ...] = ()
    impl: Any = "solutions"  # or a notebook's namespace
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
    from m2l_nlp.data.pipeline import default_cache_dir
    from m2l_nlp.train.loop import DivergedError

    start = time.perf_counter()
    preset = request.preset
    try:
        preset.check()
    except TypeError as error:  # a setting of the wrong type: the request's, said the same way
        raise ValueError(str(error)) from None
    kind = kind_of(preset)
    kind.check(request)  # a wrong path or model is named before anything is created
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
        data = kind.prepare(request)
        say(f"data prepared ({time.perf_counter() - start:.0f}s)")
        try:
            return _train_and_evaluate(data, folder, request, say)
        except DivergedError as error:  # nothing is written over the run already there
            saved = folder.read_progress()
            kept = f"; nothing was written to {request.out}"
            if kind.loss_exercise and request.impl == "exercises" and error.epoch == 1:
                kept += (
                    f"; your {kind.loss_exercise} is the loss this run lowers: if it gives NaN "
                    f"or infinity, `pytest -m {kind.loss_exercise}` says where"
                )
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
    """The whole job, for every kind of model: train the model of ``preset`` on ``data``,
    validate, test, save.

    ``data`` is what the preset's kind prepares (:mod:`m2l_nlp.runs.kinds`; for a
    classifier a :class:`~m2l_nlp.data.pipeline.PreparedData`, from
    :func:`m2l_nlp.data.pipeline.prepare_for`).
    A classifier holds out ``val_size`` training reviews (default: see
    :func:`m2l_nlp.runs.classifier.resolve_val_size`) to validate each epoch and keep the
    best; the test side is scored once, at the end, unless ``no_test``. ``impl`` picks the
    student's or the reference modules (or a notebook's ``globals()``); ``name`` and
    ``changed`` (the preset's name and its ``--set`` changes) are recorded in the metrics.

    With ``out`` (a folder, or a :class:`~m2l_nlp.runs.folders.RunFolder` already open) the run is
    saved there as one unit, every epoch is kept beside it, and ``resume`` continues an
    interrupted run with the same settings; an existing run is replaced only with
    ``overwrite`` (:mod:`m2l_nlp.runs`).
    """
    request = TrainRequest(
        name=name, preset=preset, data=None, out=Path(), changed=tuple(changed), impl=impl,
        seed=seed, val_size=val_size, no_test=no_test, resume=resume, progress=progress,
    )  # fmt: skip
    with contextlib.ExitStack() as stack:
        folder = out
        if out is not None and not isinstance(out, runs.RunFolder):
            folder = stack.enter_context(runs.open_run(out, overwrite=overwrite, resume=resume))
        return _train_and_evaluate(data, folder, request, log or (lambda line: None))


def _train_and_evaluate(
    data: Any, folder: runs.RunFolder | None, request: TrainRequest, log: Callable[[str], None]
) -> RunResult:
    preset, name, impl, seed = request.preset, request.name, request.impl, request.seed
    no_test, progress = request.no_test, request.progress
    start = time.perf_counter()
    compiled_before = devices.compile_counter()
    kind = kind_of(preset)
    run = Context(seed, impl, request.val_size, no_test, progress, log)
    setup = kind.setup(preset, data, run)
    settings = preset.settings(seed=seed, **setup.settings)
    mesh = devices.make_mesh()
    run = run._replace(settings=settings, mesh=mesh)
    fingerprint = runs.fingerprint(
        preset=dataclasses.asdict(preset),
        name=name,
        impl=impl if isinstance(impl, str) else "",
        seed=seed,
        no_test=no_test,
        **setup.fingerprint,
    )
    begin = None
    if folder is not None and request.resume:
        begin = folder.resume_from(fingerprint)
        log(f"resuming after epoch {begin.epoch} of {settings.epochs}")
    structure = jax.tree_util.tree_structure(setup.params)

    def on_epoch(done: Progress) -> None:
        if setup.after_epoch is not None:  # with the epoch's parameters, as stored
            trained = jax.tree_util.tree_unflatten(structure, done.state[: structure.num_leaves])
            for metric, value in setup.after_epoch(trained).items():
                done.history.setdefault(metric, []).append(value)  # kept for --resume too
        if folder is not None:
            folder.keep_epoch(done, settings.epochs, fingerprint)

    try:
        result = train(
            setup.funcs,
            setup.params,
            setup.train_data,
            settings,
            eval_data=setup.eval_data,
            objective=setup.objective,
            mesh=mesh,
            progress=progress,
            log=log,
            start=begin,
            on_epoch=on_epoch,
            tie=setup.tie,  # the classifier's parameters come back, the pairs' rows tied
        )
    except StateMismatch as error:  # checked before anything of it is loaded
        raise runs.RunFolderError(f"--resume: {error}") from None
    params = result.params
    run_metrics: dict[str, Any] = {
        "preset": name,
        "changed": list(request.changed),
        "architecture": preset.architecture,
        "best_epoch": result.best_epoch,
        "impl": impl if isinstance(impl, str) else "notebook",
        "devices": devices.describe_devices(),
        **setup.metrics,
    }
    scores = kind.finish(setup, params, result.eval_result, data, run)
    test = scores.pop("test", None)
    run_metrics.update(scores)
    compiled = devices.compile_counter()
    run_metrics["compiled_programs"] = compiled["programs"] - compiled_before["programs"]
    run_metrics["compile_seconds"] = compiled["seconds"] - compiled_before["seconds"]
    run_metrics["seconds"] = time.perf_counter() - start
    params = jax.device_get(params)
    done = RunResult(setup.funcs, params, setup.config, result.history, test, run_metrics, kind)
    if folder is not None:
        folder.commit(  # run.json says whose modules were trained: a forgotten --impl shows
            lambda new: kind.save(new, done, data, run),
            dict(preset=name, architecture=preset.architecture, impl=run_metrics["impl"]),
        )
    return done
