"""The kinds of model the course trains, and what each brings to the one run.

A kind (the sentiment classifier, the character language model, the translator) is one
module of :mod:`m2l_nlp.runs` with a :class:`Kind`: it checks a request, prepares its
data, builds its model (:class:`Setup`), scores the trained model, saves its checkpoint
and says its result. :func:`m2l_nlp.runs.experiment.train_and_evaluate` does the rest
the same way for every kind: the run folder, resume, the loop, the metrics every run
records. :func:`kind_of` is the only place that reads a preset's architecture to choose.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from m2l_nlp import config
from m2l_nlp.config import BASELINES, TRANSFORMER, Preset
from m2l_nlp.runs.checkpoint import CLASSIFIER, LANGUAGE_MODEL, TRANSLATOR, CheckpointKind

if TYPE_CHECKING:  # only for the annotations: experiment imports this module
    from m2l_nlp.runs.experiment import RunResult, TrainRequest
    from m2l_nlp.train.metrics import EvalResult, Objective
    from m2l_nlp.transform import ModelFuncs


class Setup(NamedTuple):
    """A kind's model, ready for the loop (:func:`m2l_nlp.train.loop.train`)."""

    funcs: ModelFuncs
    params: Any
    config: Any  # the model's sizes (a dataclass of m2l_nlp.config)
    train_data: Any  # a Split (ids, mask, labels) or DeviceData
    eval_data: Any  # the same for validation, or None
    objective: Objective
    fingerprint: dict[str, Any]  # what, beside the preset and seed, --resume must find again
    metrics: dict[str, Any]  # what the run records about its data
    settings: dict[str, Any] = {}  # the kind's changes to the preset's TrainSettings
    tie: Callable | None = None  # the loop's tie (m2l_nlp.model.classifiers.pair_tie)
    # each epoch, with its trained parameters: extra history values (e.g. chrF) to record
    after_epoch: Callable[[Any], dict[str, float]] | None = None
    writer: Any = None  # what writes with the model (a Writer, a Translator), for finish


class Context(NamedTuple):
    """How a run was asked to go, as a kind's steps read it."""

    seed: int
    impl: Any  # "solutions", "exercises", or a notebook's namespace
    val_size: int | None  # --val-size
    no_test: bool
    progress: bool
    log: Callable[[str], None]
    settings: Any = None  # the run's TrainSettings, once the kind's setup is known
    mesh: Any = None


class Kind:
    """What one kind of model brings to the run; each method is one step of it."""

    name: str = ""  # in checkpoint manifests: a key of KIND_MODULES
    checkpoint: CheckpointKind  # what its checkpoint holds, and the command that reads it
    curves_title: str = "Training curves"
    loss_exercise: str | None = None  # the practical's loss function that trains it, if any

    def check(self, request: TrainRequest) -> None:
        """Raise ``ValueError`` for a request this kind cannot run, before data are read."""

    def prepare(self, request: TrainRequest) -> Any:
        """The request's data, read and encoded for this kind."""
        raise NotImplementedError

    def setup(self, preset: Preset, data: Any, run: Context) -> Setup:
        """The model of ``preset`` on ``data``, its first parameters and its splits."""
        raise NotImplementedError

    def finish(
        self, setup: Setup, params: Any, validation: EvalResult | None, data: Any, run: Context
    ) -> dict[str, Any]:
        """The trained model's scores (the last validation's, the test side's unless
        ``run.no_test``) as metrics to record; the test lines go to ``run.log``."""
        raise NotImplementedError

    def save(self, out: Path, result: RunResult, data: Any, run: Context) -> None:
        """``metrics.json``, the curves and (test runs) the checkpoint into ``out``
        (:func:`m2l_nlp.runs.checkpoint.save_run`)."""
        raise NotImplementedError

    def summary(self, result: RunResult) -> list[str]:
        """The lines ``m2l-nlp train`` prints after the run, before its timings."""
        return []


def test_scores(setup: Setup, params: Any, split: Any, run: Context) -> EvalResult:
    """The trained model on the test side, read once, as the run's settings read it."""
    from m2l_nlp.train.evaluation import evaluate

    return evaluate(
        params,
        setup.funcs,
        split,
        objective=setup.objective,
        settings=run.settings,
        mesh=run.mesh,
        progress=run.progress,
        desc="test",
    )


# kind -> the module whose KIND trains it (imported on first use: each pulls in its own
# data and model code), and the architectures of the presets it trains
KIND_MODULES: dict[str, tuple[str, tuple[str, ...]]] = {
    CLASSIFIER: ("m2l_nlp.runs.classifier", (TRANSFORMER, *BASELINES)),
    LANGUAGE_MODEL: ("m2l_nlp.runs.language_model", (config.LANGUAGE_MODEL,)),
    TRANSLATOR: ("m2l_nlp.runs.translation", (config.TRANSLATION,)),
}


def kind_named(name: str) -> Kind:
    """The kind of run called ``name`` (as checkpoint manifests name it)."""
    return importlib.import_module(KIND_MODULES[name][0]).KIND


def kind_of(preset: Preset) -> Kind:
    """The kind that trains ``preset``'s architecture."""
    for name, (_, architectures) in KIND_MODULES.items():
        if preset.architecture in architectures:
            return kind_named(name)
    raise ValueError(f"no kind of run trains the architecture {preset.architecture!r}")
