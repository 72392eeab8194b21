"""Save and load a trained classifier: parameters, model config and tokenizer, in one folder.

Layout of a checkpoint folder::

    params.npz       one array per parameter, named "<module>/<name>"
    config.json      the ClassifierConfig (model sizes)
    tokenizer.json   the tokenizer the ids were made with
    bigrams.npy      the table of bigram tokens, if the model reads them (m2l_nlp.data.bigrams)
    meta.json        free-form extras (training settings, metrics, impl)

A checkpoint is written to a temporary folder beside the target and renamed into place, so
a crash never leaves a half-written checkpoint under the final name.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from m2l_nlp.config import ClassifierConfig
from m2l_nlp.data import bigrams
from m2l_nlp.fileio import json_text, make_ordinary

PARAMS_FILE = "params.npz"
CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "meta.json"
SEP = "/"


class Checkpoint(NamedTuple):
    """A loaded checkpoint: haiku params (NumPy arrays), config, tokenizer, extras, and the
    bigram table (None for a model that reads tokens only)."""

    params: dict[str, dict[str, np.ndarray]]
    config: ClassifierConfig
    tokenizer: Any
    meta: dict[str, Any]
    bigram_table: np.ndarray | None = None


class CheckpointError(ValueError):
    """A checkpoint is missing, incomplete, or does not match what the caller expects."""


def _flat_items(params: Any) -> Iterator[tuple[str, Any]]:
    """``("<module>/<name>", leaf)`` for every parameter of a haiku params dict."""
    for module, leaves in params.items():
        for name, value in leaves.items():
            if SEP in name:
                raise ValueError(f"parameter name {name!r} contains {SEP!r}")
            yield f"{module}{SEP}{name}", value


def flatten_params(params: Any) -> dict[str, np.ndarray]:
    """Haiku parameters as one flat dict of arrays, for ``np.savez``."""
    return {key: np.asarray(value) for key, value in _flat_items(params)}


def unflatten_params(flat: dict[str, np.ndarray]) -> dict[str, dict[str, np.ndarray]]:
    """The inverse of :func:`flatten_params`."""
    params: dict[str, dict[str, np.ndarray]] = {}
    for key, value in flat.items():
        module, _, name = key.rpartition(SEP)
        params.setdefault(module, {})[name] = value
    return params


def save_checkpoint(
    path: str | os.PathLike,
    params: Any,
    config: ClassifierConfig,
    tokenizer: Any,
    meta: dict[str, Any] | None = None,
    bigram_table: np.ndarray | None = None,
) -> Path:
    """Write a checkpoint folder at ``path`` atomically (replacing an older one); returns it.

    Pass ``bigram_table`` when the model was trained on bigram tokens (``data.bigram_table``).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old: Path | None = None  # a private folder the previous checkpoint waits in
    try:
        np.savez(tmp / PARAMS_FILE, **flatten_params(params))
        (tmp / CONFIG_FILE).write_text(json_text(config.to_dict()))
        tokenizer.save(str(tmp / TOKENIZER_FILE))
        if bigram_table is not None:
            bigrams.save_table(tmp, bigram_table)
        (tmp / META_FILE).write_text(json_text(meta or {}, default=str))
        make_ordinary(tmp)
        if path.exists():
            old = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".old", dir=path.parent))
            os.replace(path, old / path.name)
        os.replace(tmp, path)
    except BaseException:
        if old is not None and (old / path.name).exists() and not path.exists():
            os.replace(old / path.name, path)  # interrupted between the renames: put it back
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    finally:
        if old is not None and path.exists():  # else the old one stays, hidden, for recovery
            shutil.rmtree(old, ignore_errors=True)
    return path


def _check_shapes(params: dict[str, dict[str, np.ndarray]], config: ClassifierConfig) -> None:
    """Raise if the saved arrays do not fit the saved config (a hand-edited config.json)."""
    embed = params.get("classifier/~/embedding/~/embed", {}).get("embeddings")
    if embed is not None and embed.shape != (config.vocab_size, config.d_model):
        raise CheckpointError(
            f"the saved embedding table has shape {embed.shape} but config.json says "
            f"vocab_size={config.vocab_size}, d_model={config.d_model}: the files of this "
            "checkpoint do not belong together; retrain or restore config.json"
        )


@contextlib.contextmanager
def _reading(file: Path) -> Iterator[None]:
    """Turn any failure to read or parse ``file`` into a :class:`CheckpointError`."""
    try:
        yield
    except CheckpointError:
        raise
    except PermissionError as error:
        raise CheckpointError(
            f"cannot read {file} ({error.strerror}): check that you may read the checkpoint"
        ) from error
    except Exception as error:  # noqa: BLE001 - JSON, zip, tokenizer and config errors alike
        raise CheckpointError(
            f"{file} is damaged ({type(error).__name__}: {error}): this checkpoint cannot be "
            "used; train a new one with `m2l-nlp train`"
        ) from error


def check_params_fit(
    params: Any, model: Any, config: ClassifierConfig, impl: str = "solutions"
) -> None:
    """Raise :class:`CheckpointError` unless ``params`` have exactly the names and shapes that
    ``model`` (built from ``config`` with the code of ``impl``) creates."""
    import jax

    from m2l_nlp.model.classifiers import init_params

    wanted = jax.eval_shape(  # shapes only: nothing is computed
        lambda key: init_params(model, key, config.max_len), jax.random.PRNGKey(0)
    )
    want = {key: tuple(v.shape) for key, v in _flat_items(wanted)}
    have = {key: tuple(np.shape(v)) for key, v in _flat_items(params)}
    problems = [f"{k} is missing" for k in sorted(want.keys() - have.keys())]
    problems += [f"{k} is not part of this model" for k in sorted(have.keys() - want.keys())]
    problems += [
        f"{k} has shape {have[k]}, the model wants {want[k]}"
        for k in sorted(want.keys() & have.keys())
        if have[k] != want[k]
    ]
    if problems:
        shown = "; ".join(problems[:3]) + (
            f"; and {len(problems) - 3} more" if problems[3:] else ""
        )
        if impl != "solutions":
            advice = (
                f"the model code of {impl}/ names or sizes its parameters otherwise than the "
                "code the checkpoint was trained with; use the same --impl for both"
            )
        else:
            advice = (
                "the files of this checkpoint do not belong together; retrain or restore "
                "config.json"
            )
        raise CheckpointError(
            f"the saved parameters do not fit the model of the saved config ({shown}): {advice}"
        )


def load_checkpoint(
    path: str | os.PathLike, expected_config: ClassifierConfig | None = None
) -> Checkpoint:
    """Read a checkpoint folder written by :func:`save_checkpoint`.

    With ``expected_config``, refuse (``CheckpointError``) a checkpoint whose config differs,
    naming the settings that differ.
    """
    from tokenizers import Tokenizer

    path = Path(path)
    missing = [f for f in (PARAMS_FILE, CONFIG_FILE, TOKENIZER_FILE) if not (path / f).is_file()]
    if missing:
        if (path / "characters.json").is_file():  # runs.language_model's checkpoint
            raise CheckpointError(
                f"{path} is a character language model's checkpoint, which does not score "
                f"reviews: continue text with `m2l-nlp generate --checkpoint {path}`"
            )
        if path.is_dir():
            what = f"{path} is not a complete checkpoint (missing {', '.join(missing)})"
        elif path.exists():
            what = f"{path} is a file, not a checkpoint folder"
        else:
            what = f"there is no checkpoint at {path}"
        run = path.parent if path.name == "checkpoint" else path
        if (run / "run.json").is_file() and not (run / "checkpoint").exists():
            what = f"{run} is a run without a checkpoint"
        raise CheckpointError(
            f"{what}: only the transformer's runs that end with the test set write one (not "
            "--model baselines, not --no-test runs); train one with `m2l-nlp train` (`--data "
            "small`: half a minute of CPU time) or pass the folder it wrote "
            "(runs/<name>/checkpoint)"
        )
    with _reading(path / CONFIG_FILE):
        config = ClassifierConfig.from_dict(json.loads((path / CONFIG_FILE).read_text()))
    if expected_config is not None and config != expected_config:
        saved, wanted = config.to_dict(), expected_config.to_dict()
        diff = ", ".join(
            f"{k}: saved {saved[k]!r} vs expected {wanted[k]!r}"
            for k in saved
            if saved[k] != wanted[k]
        )
        raise CheckpointError(
            f"the checkpoint in {path} was trained with a different model config ({diff}); "
            "build the model from the checkpoint's config or train a new checkpoint"
        )
    with _reading(path / PARAMS_FILE), np.load(path / PARAMS_FILE) as arrays:
        params = unflatten_params({k: arrays[k] for k in arrays.files})
    _check_shapes(params, config)
    with _reading(path / TOKENIZER_FILE):
        tokenizer = Tokenizer.from_file(str(path / TOKENIZER_FILE))
    try:
        table = bigrams.load_table(path)
    except ValueError as error:  # the message says what to do
        raise CheckpointError(str(error)) from None
    needed = tokenizer.get_vocab_size()
    what = f"the tokenizer has {needed} tokens"
    if table is not None:
        needed = bigrams.vocab_size_with_bigrams(needed, table)
        what += f" and the bigram table {len(table)} pairs ({needed} ids)"
    if needed > config.vocab_size:
        raise CheckpointError(
            f"{what} but the model only {config.vocab_size} embeddings: "
            f"the files of {path} do not belong together"
        )
    meta_path = path / META_FILE
    meta = {}
    if meta_path.is_file():
        with _reading(meta_path):
            meta = json.loads(meta_path.read_text())
    return Checkpoint(params, config, tokenizer, meta, table)


# The last whitespace before a position (``search(text, 0, end)``): a cut between words.
_LAST_SPACE = re.compile(r"\s\S*\Z")


def _first_words(tokenizer: Any, text: str, max_len: int) -> str:
    """The start of ``text`` that holds its first ``max_len`` tokens (more, never fewer),
    cut between words so that no word is split: the model reads no further, so a huge file
    costs what a review does. Tokens are counted as ``batch_encode`` makes them, whatever
    padding or truncation the tokenizer was set to."""
    from tokenizers import Tokenizer

    size = 16 * max_len
    if size >= len(text):
        return text
    counter = Tokenizer.from_str(tokenizer.to_str())  # a private copy, as batch_encode's
    counter.no_padding()  # padding would count tokens that are not there: too short a cut
    counter.no_truncation()  # truncation would never count enough: the whole text again
    while size < len(text):
        space = _LAST_SPACE.search(text, 0, size)
        if space and len(counter.encode(text[: space.start()]).ids) > max_len:
            return text[: space.start()]
        size *= 4
    return text


def encode_reviews(
    texts: list[str], tokenizer: Any, max_len: int, bigram_table: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """``(ids, mask)`` of ``texts`` as the model was trained to read them: the first
    ``max_len`` tokens, and with ``bigram_table`` its pair tokens merged in (a model trained
    on pair tokens reads unmerged ids as text it rarely saw, and answers near chance)."""
    from m2l_nlp.data.tokenization import batch_encode

    texts = [_first_words(tokenizer, t, max_len) for t in texts]
    ids, mask = batch_encode(tokenizer, texts, seq_len=max_len)
    if bigram_table is not None:
        ids = bigrams.merge_bigram_tokens(ids, mask, bigram_table, tokenizer.get_vocab_size())
    return ids, mask


def review_probabilities(
    texts: str | list[str],
    params: Any,
    model: Any,
    tokenizer: Any,
    *,
    max_len: int,
    bigram_table: np.ndarray | None = None,
    window: int | None = None,
    batch_size: int = 64,
) -> np.ndarray:
    """Probability that each review is positive, float ``(N,)`` (a ``str`` gives ``(1,)``):
    THE path from text to probability, shared by ``m2l-nlp predict`` (through
    :func:`predict`) and practical 2's notebook. ``model`` is the classifier's
    ``funcs_from_stateful`` functions, ``params`` its trained parameters, and ``tokenizer``,
    ``bigram_table`` and ``window`` (the training crop length) those it was trained with:
    the texts are encoded by :func:`encode_reviews` and a review longer than ``window`` is
    read in windows of that many tokens, as in training and evaluation."""
    from m2l_nlp.data import batching
    from m2l_nlp.train import evaluation

    texts = [texts] if isinstance(texts, str) else list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a string or a list of strings")
    if not texts:
        return np.zeros((0,), np.float32)
    ids, mask = encode_reviews(texts, tokenizer, max_len, bigram_table)
    data = batching.put_data(ids, mask, np.zeros(len(texts), np.int32))
    logits = evaluation.predict_logits(params, model, data, window=window, batch_size=batch_size)
    return 1.0 / (1.0 + np.exp(-logits))


def predict(
    texts: str | list[str],
    checkpoint: Checkpoint | str | os.PathLike,
    *,
    impl: str = "solutions",
    batch_size: int = 64,
) -> np.ndarray:
    """Probability that each review is positive, float ``(N,)`` (a ``str`` gives ``(1,)``),
    by the model of a checkpoint (:func:`review_probabilities` with what it was trained with).

    Any text works: empty (the model sees no token and answers from its bias), longer than
    the model's ``max_len`` (the first ``max_len`` tokens are read, in windows of the
    training crop length as during training), or non-ASCII.
    """
    from m2l_nlp.model import classifiers as model

    if not isinstance(checkpoint, Checkpoint):
        checkpoint = load_checkpoint(checkpoint)
    texts = [texts] if isinstance(texts, str) else list(texts)
    if not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a string or a list of strings")
    if not texts:
        return np.zeros((0,), np.float32)
    config = checkpoint.config
    funcs = model.classifier(config, impl)
    check_params_fit(checkpoint.params, funcs, config, impl)
    return review_probabilities(
        texts,
        checkpoint.params,
        funcs,
        checkpoint.tokenizer,
        max_len=config.max_len,
        bigram_table=checkpoint.bigram_table,
        window=checkpoint.meta.get("settings", {}).get("crop_len"),  # as in training
        batch_size=batch_size,
    )


def save_run(out: str | os.PathLike, run: Any, preset: Any, settings: Any, data: Any) -> None:
    """Write what :func:`m2l_nlp.runs.experiment.train_and_evaluate` made into the folder ``out``:
    ``metrics.json``, the training curves and (test runs) the confusion matrix, and for the
    transformer a ``checkpoint/`` that ``m2l-nlp predict`` reads."""
    import dataclasses

    from m2l_nlp import plotting
    from m2l_nlp.config import TRANSFORMER
    from m2l_nlp.fileio import write_json_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if run.test is not None and preset.architecture == TRANSFORMER:
        meta = dict(run.metrics, settings=dataclasses.asdict(settings), history=run.history)
        save_checkpoint(
            out / "checkpoint",
            run.params,
            run.config,
            data.tokenizer,
            meta,
            bigram_table=data.bigram_table,
        )
    write_json_atomic(out / "metrics.json", dict(run.metrics, history=run.history))
    curves = plotting.plot_training_curves(run.history, title="Training curves")
    plotting.save_figure(curves, out / "training_curves.png")
    if run.test is not None and run.test.confusion is not None:
        matrix = plotting.plot_confusion_matrix(run.test.confusion, title="Test confusion matrix")
        plotting.save_figure(matrix, out / "confusion_matrix.png")
