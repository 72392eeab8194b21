"""m2l-nlp: support library of the course (data, tokenizer, training, grading, plots).

Everything that is not an exercise lives here; the exercises live in ``solutions/`` (reference)
and ``exercises/`` (student stubs generated from the reference).
"""

import sys as _sys
from importlib import metadata as _metadata

__version__ = "0.1.0"

# What notebooks (saved ones included) and the setup cell import: kept stable, tested by
# tests/test_package.py. Anything else is internal and may move.
PUBLIC_API = {
    "m2l_nlp.grading": ("check", "use_practical"),
    "m2l_nlp.devices": ("configure_environment",),
    "m2l_nlp.config": (
        "PRESETS",
        "ClassifierConfig",
        "ReverseConfig",
        "TransformerConfig",
    ),
    "m2l_nlp.data.pipeline": ("compilation_cache_dir", "prepare_for"),
    "m2l_nlp.data.splits": ("split_validation",),
    "m2l_nlp.data.characters": ("prepare_characters",),
    "m2l_nlp.model.language_models": ("init_params", "language_model"),
    "m2l_nlp.runs.language_model": ("Writer", "beside_baselines", "learning_note"),
    "m2l_nlp.runs.checkpoint": ("review_probabilities",),
    "m2l_nlp.train.metrics": ("next_token_objective", "sequence_objective"),
    "m2l_nlp.data.tokenization": ("batch_encode", "BOS_ID", "EOS_ID", "PAD_ID"),
    "m2l_nlp.data.tatoeba": ("references",),
    "m2l_nlp.data.translation": ("prepare_translation",),
    "m2l_nlp.model.translators": ("init_params", "translator"),
    "m2l_nlp.runs.translation": ("Translator",),
    "m2l_nlp.train.translation_scores": ("score",),
    "m2l_nlp.transform": ("funcs_from_stateful",),
    "m2l_nlp.train.loop": ("train",),
    "m2l_nlp.train.evaluation": ("evaluate",),
    "m2l_nlp.train.reverse": ("reverse_batch", "train_reverse"),
    "m2l_nlp.runs.experiment": ("train_and_evaluate",),
    "m2l_nlp.plotting": (
        "plot_alignment",
        "plot_attention_maps",
        "plot_confusion_matrix",
        "plot_training_curves",
    ),
}

# dm-haiku does not declare jax as a dependency, so pip installs any pair; 0.0.16 and older
# fail to import beside jax 0.11 or newer (0.0.13 beside jax 0.6 or newer). pyproject.toml's
# floor says the same.
HAIKU_FLOOR = "0.0.17"


class UnsupportedVersions(ImportError):
    """A dependency this environment holds at a version the course cannot run with; shown as
    one line (by IPython, and by Python for an uncaught one), never a traceback."""

    def _render_traceback_(self) -> list[str]:
        return [f"{type(self).__name__}: {self}"]


def _numbers(version: str) -> tuple[int, ...]:
    import re

    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _refuse_unsupported() -> None:
    try:
        haiku = _metadata.version("dm-haiku")
    except _metadata.PackageNotFoundError:
        return  # pip's error, or the setup cell's, says what to install
    if _numbers(haiku) >= _numbers(HAIKU_FLOOR):
        return
    try:
        beside = f" beside jax {_metadata.version('jax')}"
    except _metadata.PackageNotFoundError:
        beside = ""
    error = UnsupportedVersions(
        f"this environment has dm-haiku {haiku}{beside}; the course needs dm-haiku "
        f"{HAIKU_FLOOR} or newer (older ones fail to import beside recent jax): run "
        f"`pip install -U 'dm-haiku>={HAIKU_FLOOR}'`"
    )
    previous = _sys.excepthook

    def one_line(kind, value, traceback) -> None:
        if value is error:
            print(f"error: {value}", file=_sys.stderr)
        else:
            previous(kind, value, traceback)

    _sys.excepthook = one_line  # a script or the CLI that stops here: one line, exit status 1
    raise error


_refuse_unsupported()
