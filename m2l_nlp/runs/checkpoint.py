"""One checkpoint format for every kind of model: a folder whose manifest says what it holds.

Layout of a checkpoint folder::

    manifest.json    the format version, the kind of model, its config (the dataclass's
                     fields), its tokenizer, and the names of the files below
    params.npz       one array per parameter, named "<module>/<name>"
    tokenizer.json   the subword tokenizer (a character model's characters are in the
                     manifest itself)
    bigrams.npy      the classifier's table of bigram tokens, if it reads them
                     (m2l_nlp.data.bigrams)
    meta.json        free-form extras (training settings, metrics, impl)

A checkpoint is written to a temporary folder beside the target and renamed into place, so
a crash never leaves a half-written checkpoint under the final name. :func:`load_checkpoint`
reads the manifest first: a command given another kind's checkpoint names, in one line, the
command that reads it, and a folder without a manifest is answered with how to train one.
"""

from __future__ import annotations

import contextlib
import dataclasses
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
from m2l_nlp.data.characters import CharVocab
from m2l_nlp.fileio import json_text, make_ordinary

FORMAT_VERSION = 1  # raised whenever a reader of the old layout would misread the new one
MANIFEST_FILE = "manifest.json"
PARAMS_FILE = "params.npz"
TOKENIZER_FILE = "tokenizer.json"
META_FILE = "meta.json"
SEP = "/"

# The kinds of checkpoint, as manifests name them (a file format: these strings stay fixed)
CLASSIFIER, LANGUAGE_MODEL, TRANSLATOR = "classifier", "char-lm", "translate"
SUBWORDS, CHARACTERS = "tokenizers", "characters"  # the two kinds of tokenizer a model reads


class CheckpointKind(NamedTuple):
    """What a checkpoint of one kind holds, which command reads it, and how to train one."""

    config: type  # the model's config dataclass
    tokenizer: str  # SUBWORDS (a tokenizers.Tokenizer) or CHARACTERS (a CharVocab)
    what: str  # "a sentiment classifier"
    use: str  # what its command does, before the command: "score reviews with"
    command: str  # the m2l-nlp command that reads it
    preset: str  # the preset that trains one
    cost: str  # what training one on `--data small` costs
    folder: str  # where a run of the preset writes it

    def train_one(self) -> str:
        return (
            f"train one with `m2l-nlp train --preset {self.preset}` (`--data small`: "
            f"{self.cost}) or pass the folder it wrote ({self.folder})"
        )

    def train_again(self) -> str:
        return (
            f"train again with `m2l-nlp train --preset {self.preset}` (`--data small`: {self.cost})"
        )


def spec_of(kind: str) -> CheckpointKind:
    """What a checkpoint of ``kind`` holds, as its kind of run declares it
    (:mod:`m2l_nlp.runs.kinds`); ``KeyError`` for a kind no run trains."""
    from m2l_nlp.runs.kinds import kind_named  # the kinds import this module

    return kind_named(kind).checkpoint


def known_kinds() -> tuple[str, ...]:
    """The kinds of checkpoint there are: one per kind of run."""
    from m2l_nlp.runs.kinds import KIND_MODULES

    return tuple(KIND_MODULES)


class Checkpoint(NamedTuple):
    """A loaded checkpoint: its kind, haiku params (NumPy arrays), the model's config, its
    tokenizer (a ``tokenizers.Tokenizer``, or a character model's :class:`CharVocab`),
    extras, and the bigram table (None for a model that reads tokens only)."""

    kind: str
    params: dict[str, dict[str, np.ndarray]]
    config: Any
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


def _write_contents(
    folder: Path,
    kind: str,
    params: Any,
    config: Any,
    tokenizer: Any,
    meta: dict[str, Any] | None,
    bigram_table: np.ndarray | None,
) -> None:
    """The files of a checkpoint into the (temporary, empty) ``folder``; the manifest last."""
    spec = spec_of(kind)
    np.savez(folder / PARAMS_FILE, **flatten_params(params))
    if spec.tokenizer == CHARACTERS:
        named: dict[str, Any] = {"type": CHARACTERS, "characters": tokenizer.chars}
    else:
        tokenizer.save(str(folder / TOKENIZER_FILE))
        named = {"type": SUBWORDS, "file": TOKENIZER_FILE}
    extras = {"meta": META_FILE}
    (folder / META_FILE).write_text(json_text(meta or {}, default=str))
    if bigram_table is not None:
        bigrams.save_table(folder, bigram_table)
        extras["bigram_table"] = bigrams.TABLE_FILE
    manifest = {
        "format_version": FORMAT_VERSION,
        "kind": kind,
        "config": dataclasses.asdict(config),
        "tokenizer": named,
        "params": PARAMS_FILE,
        "extras": extras,
    }
    (folder / MANIFEST_FILE).write_text(json_text(manifest))


def save_checkpoint(
    path: str | os.PathLike,
    kind: str,
    params: Any,
    config: Any,
    tokenizer: Any,
    *,
    meta: dict[str, Any] | None = None,
    bigram_table: np.ndarray | None = None,
) -> Path:
    """Write a checkpoint of ``kind`` (one of :func:`known_kinds`) at ``path`` atomically,
    replacing an older one; returns ``path``.

    ``config`` is the kind's config dataclass and ``tokenizer`` its tokenizer (a character
    model's :class:`CharVocab`). Pass ``bigram_table`` when a classifier was trained on
    bigram tokens (``data.bigram_table``).
    """
    if kind not in known_kinds():
        raise ValueError(f"kind must be one of {', '.join(known_kinds())}, not {kind!r}")
    if not isinstance(config, spec_of(kind).config):
        raise TypeError(f"a {kind} checkpoint holds a {spec_of(kind).config.__name__}")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    old: Path | None = None  # a private folder the previous checkpoint waits in
    try:
        _write_contents(tmp, kind, params, config, tokenizer, meta, bigram_table)
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


def _check_shapes(params: dict[str, dict[str, np.ndarray]], config: Any) -> None:
    """Raise if the saved arrays do not fit the saved config (a hand-edited manifest)."""
    embed = params.get("classifier/~/embedding/~/embed", {}).get("embeddings")
    if embed is not None and embed.shape != (config.vocab_size, config.d_model):
        raise CheckpointError(
            f"the saved embedding table has shape {embed.shape} but the manifest's config "
            f"says vocab_size={config.vocab_size}, d_model={config.d_model}: the files of "
            f"this checkpoint do not belong together; retrain or restore {MANIFEST_FILE}"
        )


@contextlib.contextmanager
def _reading(file: Path, kind: str) -> Iterator[None]:
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
            f"used; {spec_of(kind).train_again()}"
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
                f"{MANIFEST_FILE}"
            )
        raise CheckpointError(
            f"the saved parameters do not fit the model of the saved config ({shown}): {advice}"
        )


def other_kind(path: Path, have: str, wanted: str) -> CheckpointError:
    """The one line for a checkpoint of kind ``have`` given where one of ``wanted`` belongs:
    the command that reads it."""
    other, command = spec_of(have), spec_of(wanted).command
    return CheckpointError(
        f"{path} is {other.what}'s checkpoint, which `m2l-nlp {command}` does not read: "
        f"{other.use} `m2l-nlp {other.command} --checkpoint {path}`"
    )


def _not_a_checkpoint(path: Path, kind: str) -> CheckpointError:
    """The one line for a ``path`` that holds no checkpoint at all, with how to train one."""
    spec = spec_of(kind)
    if path.is_dir():
        return CheckpointError(
            f"{path} has no {MANIFEST_FILE}: it is not a checkpoint, or one written before "
            f"checkpoints had one, which this m2l-nlp does not read; {spec.train_again()}"
        )
    run = path.parent if path.name == "checkpoint" else path
    if (run / "run.json").is_file() and not path.exists():
        what = (
            f"{run} is a run without a checkpoint: only runs that end with the test set write "
            "one (not practical 1's baselines, not --no-test runs)"
        )
    elif path.exists():
        what = f"{path} is a file, not a checkpoint folder"
    else:
        what = f"there is no checkpoint at {path}"
    return CheckpointError(f"{what}; {spec.train_one()}")


def _config(cls: type, values: Any) -> Any:
    """``cls(**values)``, refusing a setting ``cls`` does not have."""
    known = {field.name for field in dataclasses.fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ValueError(f"unknown model settings {unknown}; known: {sorted(known)}")
    return cls(**values)


def _read_tokenizer(path: Path, named: Any, spec: CheckpointKind, kind: str) -> Any:
    """The tokenizer the manifest names (``named``), as the kind's model reads it."""
    from tokenizers import Tokenizer

    if named.get("type") != spec.tokenizer:
        raise ValueError(f"a {kind} model reads {spec.tokenizer}, not {named.get('type')!r}")
    if spec.tokenizer == CHARACTERS:
        characters = named["characters"]
        if not isinstance(characters, str):
            raise TypeError(f"the characters are a string, not {type(characters).__name__}")
        return CharVocab(characters)
    file = path / named["file"]
    with _reading(file, kind):
        return Tokenizer.from_file(str(file))


def _ids_needed(tokenizer: Any, table: np.ndarray | None) -> tuple[int, str]:
    """How many embedding rows the tokenizer (and bigram table) need, and the words for it."""
    if isinstance(tokenizer, CharVocab):
        return tokenizer.size, f"the characters need {tokenizer.size} ids"
    needed = tokenizer.get_vocab_size()
    what = f"the tokenizer has {needed} tokens"
    if table is not None:
        needed = bigrams.vocab_size_with_bigrams(needed, table)
        what += f" and the bigram table {len(table)} pairs ({needed} ids)"
    return needed, what


def load_checkpoint(
    path: str | os.PathLike, kind: str, expected_config: Any | None = None
) -> Checkpoint:
    """Read the checkpoint folder ``path``, which must hold a model of ``kind`` (one of
    :func:`known_kinds`); :class:`CheckpointError` in one line otherwise (another kind's checkpoint:
    the command that reads it; no checkpoint: how to train one).

    With ``expected_config``, refuse a checkpoint whose config differs, naming the settings
    that differ.
    """
    spec, path = spec_of(kind), Path(path)
    manifest_file = path / MANIFEST_FILE
    if not manifest_file.is_file():
        raise _not_a_checkpoint(path, kind)
    with _reading(manifest_file, kind):
        manifest = json.loads(manifest_file.read_text(encoding="utf-8"))
        version = manifest["format_version"]
        if version != FORMAT_VERSION:
            raise CheckpointError(
                f"{path} is a checkpoint of format {version}, and this m2l-nlp reads format "
                f"{FORMAT_VERSION} only; {spec.train_again()}"
            )
        have = manifest["kind"]
        if have != kind:
            if have in known_kinds():
                raise other_kind(path, have, kind)
            raise ValueError(f"unknown kind {have!r}")
        config = _config(spec.config, manifest["config"])
        named, extras = manifest["tokenizer"], manifest["extras"]
        files = [manifest["params"], *extras.values()]
        files += [named["file"]] if named.get("type") == SUBWORDS else []
        missing = [name for name in files if not (path / name).is_file()]
        if missing:
            raise CheckpointError(
                f"{path} is not a complete checkpoint (missing {', '.join(missing)}); "
                f"{spec.train_again()}"
            )
        params_file = path / manifest["params"]
    if expected_config is not None and config != expected_config:
        saved, wanted = dataclasses.asdict(config), dataclasses.asdict(expected_config)
        diff = ", ".join(
            f"{k}: saved {saved[k]!r} vs expected {wanted[k]!r}"
            for k in saved
            if saved[k] != wanted[k]
        )
        raise CheckpointError(
            f"the checkpoint in {path} was trained with a different model config ({diff}); "
            "build the model from the checkpoint's config or train a new checkpoint"
        )
    with _reading(params_file, kind), np.load(params_file) as arrays:
        params = unflatten_params({k: arrays[k] for k in arrays.files})
    _check_shapes(params, config)
    with _reading(manifest_file, kind):
        tokenizer = _read_tokenizer(path, named, spec, kind)
    table = None
    if "bigram_table" in extras:
        table_file = path / extras["bigram_table"]
        with _reading(table_file, kind):
            table = np.load(table_file, allow_pickle=False)
    needed, what = _ids_needed(tokenizer, table)
    if needed > config.vocab_size:
        raise CheckpointError(
            f"{what} but the model only {config.vocab_size} embeddings: "
            f"the files of {path} do not belong together"
        )
    meta = {}
    if "meta" in extras:
        meta_file = path / extras["meta"]
        with _reading(meta_file, kind):
            meta = json.loads(meta_file.read_text(encoding="utf-8"))
    return Checkpoint(kind, params, config, tokenizer, meta, table)


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
        checkpoint = load_checkpoint(checkpoint, CLASSIFIER)
    elif checkpoint.kind != CLASSIFIER:
        raise other_kind(Path("<checkpoint>"), checkpoint.kind, CLASSIFIER)
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


def save_run(
    out: str | os.PathLike,
    run: Any,
    settings: Any,
    tokenizer: Any,
    *,
    checkpoint: bool,
    bigram_table: np.ndarray | None = None,
) -> None:
    """Write what :func:`m2l_nlp.runs.experiment.train_and_evaluate` made into the folder
    ``out``, for every kind of model: ``metrics.json``, the training curves, the test
    confusion matrix where there is one, and with ``checkpoint`` the ``checkpoint/`` that
    the kind's command reads (its manifest names ``run.kind``)."""
    import dataclasses

    from m2l_nlp import plotting
    from m2l_nlp.fileio import write_json_atomic

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    if checkpoint:
        meta = dict(run.metrics, settings=dataclasses.asdict(settings), history=run.history)
        save_checkpoint(
            out / "checkpoint",
            run.kind.name,
            run.params,
            run.config,
            tokenizer,
            meta=meta,
            bigram_table=bigram_table,
        )
    write_json_atomic(out / "metrics.json", dict(run.metrics, history=run.history))
    curves = plotting.plot_training_curves(run.history, title=run.kind.curves_title)
    plotting.save_figure(curves, out / "training_curves.png")
    if run.test is not None and run.test.confusion is not None:
        matrix = plotting.plot_confusion_matrix(run.test.confusion, title="Test confusion matrix")
        plotting.save_figure(matrix, out / "confusion_matrix.png")
