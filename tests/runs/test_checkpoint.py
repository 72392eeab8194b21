"""Tests of m2l_nlp.runs.checkpoint: atomic save, load checks, predict on custom reviews."""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import jax
import numpy as np
import pytest

from m2l_nlp.config import ClassifierConfig
from m2l_nlp.data.tokenization import train_tokenizer
from m2l_nlp.model import classifiers as model_lib
from m2l_nlp.runs import checkpoint as ck

TEXTS = [
    "a wonderful film, truly great acting",
    "terrible plot and awful dialogue, a boring mess",
    "the best movie of the year",
    "i hated every minute of it",
] * 5


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(TEXTS, vocab_size=60)


@pytest.fixture(scope="module")
def config(tokenizer):
    return ClassifierConfig(
        vocab_size=tokenizer.get_vocab_size(),
        num_layers=1,
        num_heads=2,
        d_model=8,
        d_ff=16,
        max_len=32,
    )


@pytest.fixture(scope="module")
def params(config):
    model = model_lib.classifier(config)
    return jax.device_get(model_lib.init_params(model, jax.random.PRNGKey(0), config.max_len))


def save(path, params, config, tokenizer, meta=None, bigram_table=None):
    """A classifier's checkpoint at ``path``."""
    return ck.save_checkpoint(
        path, ck.CLASSIFIER, params, config, tokenizer, meta=meta, bigram_table=bigram_table
    )


def load(path, expected_config=None):
    return ck.load_checkpoint(path, ck.CLASSIFIER, expected_config=expected_config)


def edit_manifest(path, **fields):
    """Give the manifest of the checkpoint at ``path`` other values of ``fields``."""
    manifest = json.loads((path / ck.MANIFEST_FILE).read_text())
    (path / ck.MANIFEST_FILE).write_text(json.dumps(dict(manifest, **fields)))


def test_round_trip(tmp_path, params, config, tokenizer):
    path = save(tmp_path / "ckpt", params, config, tokenizer, {"acc": 0.5})
    loaded = load(path, expected_config=config)
    assert loaded.config == config and loaded.meta == {"acc": 0.5}
    assert jax.tree_util.tree_structure(loaded.params) == jax.tree_util.tree_structure(params)
    leaves = jax.tree_util.tree_leaves
    for a, b in zip(leaves(params), leaves(loaded.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert loaded.tokenizer.encode(TEXTS[0]).ids == tokenizer.encode(TEXTS[0]).ids
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary left


def test_save_replaces_atomically_and_cleans_up_on_failure(tmp_path, params, config, tokenizer):
    path = tmp_path / "ckpt"
    save(path, params, config, tokenizer, {"run": 1})
    save(path, params, config, tokenizer, {"run": 2})
    assert load(path).meta == {"run": 2}

    class Broken:
        def save(self, _path):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        save(path, params, config, Broken(), {"run": 3})
    assert load(path).meta == {"run": 2}  # the old checkpoint is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_an_interrupted_replace_keeps_the_old_checkpoint(
    tmp_path, params, config, tokenizer, monkeypatch
):
    """Ctrl-C between moving the old checkpoint aside and renaming the new one into place:
    the old one is put back, and nothing else is left in the folder."""
    path = save(tmp_path / "ckpt", params, config, tokenizer, {"run": 1})
    real_replace = ck.os.replace

    def interrupted(src, dst):
        if str(src).endswith(".tmp"):  # the new checkpoint's rename
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(ck.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        save(path, params, config, tokenizer, {"run": 2})
    monkeypatch.undo()
    assert load(path).meta == {"run": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]

    def restore_fails(src, dst):
        if str(src).endswith(".tmp") or Path(dst) == path:
            raise KeyboardInterrupt  # the new rename, then putting the old one back
        real_replace(src, dst)

    monkeypatch.setattr(ck.os, "replace", restore_fails)
    with pytest.raises(KeyboardInterrupt):
        save(path, params, config, tokenizer, {"run": 3})
    monkeypatch.undo()
    (kept,) = [p for p in tmp_path.iterdir() if p.name.endswith(".old")]  # not deleted
    assert load(kept / "ckpt").meta == {"run": 1}


def test_checkpoint_folder_gets_ordinary_permissions(tmp_path, params, config, tokenizer):
    """tempfile makes the folder private (0700); the checkpoint is an ordinary folder."""
    path = save(tmp_path / "ckpt", params, config, tokenizer)
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o777 & ~mask


@pytest.mark.parametrize(
    ("file", "damage"),
    [
        (ck.MANIFEST_FILE, lambda text: text[: len(text) // 2]),
        (ck.MANIFEST_FILE, lambda text: text.replace('"config": {', '"config": {"colour": 1, ')),
        (ck.MANIFEST_FILE, lambda text: text.replace('"kind": "classifier"', '"kind": "poem"')),
        (ck.MANIFEST_FILE, lambda text: text.replace('"tokenizer": {', '"tokenizer": [{')),
        (ck.TOKENIZER_FILE, lambda text: "not a tokenizer"),
        (ck.META_FILE, lambda text: text[:-3]),
        (ck.PARAMS_FILE, None),
    ],
    ids=[
        "truncated manifest",
        "unknown setting",
        "unknown kind",
        "tokenizer entry",
        "tokenizer",
        "meta",
        "truncated params",
    ],
)
def test_a_damaged_file_is_a_checkpoint_error(tmp_path, params, config, tokenizer, file, damage):
    path = save(tmp_path / "ckpt", params, config, tokenizer, {"run": 1})
    target = path / file
    if damage is None:
        target.write_bytes(target.read_bytes()[:100])
    else:
        target.write_text(damage(target.read_text()))
    with pytest.raises(ck.CheckpointError, match=f"{file} is damaged") as error:
        load(path)
    assert "\n" not in str(error.value) and "m2l-nlp train --preset default" in str(error.value)


def test_params_that_do_not_fit_the_model_are_refused_before_predicting(
    tmp_path, params, config, tokenizer, capsys
):
    """The manifest's config edited to another d_ff or another number of layers: a clear
    error."""
    from m2l_nlp import cli

    path = save(tmp_path / "ckpt", params, config, tokenizer)
    for change, message in (
        ({"d_ff": 48}, r"has shape \(8, 16\), the model wants \(8, 48\)"),
        ({"num_layers": 2}, r"block_1.* is missing"),
    ):
        edit_manifest(path, config=config.to_dict() | change)
        with pytest.raises(ck.CheckpointError, match=message):
            ck.predict("good", path)
        assert cli.main(["predict", "good", "--checkpoint", str(path)]) == 2
        assert "do not belong together" in capsys.readouterr().err


def test_load_refuses_a_mismatched_config(tmp_path, params, config, tokenizer):
    path = save(tmp_path / "ckpt", params, config, tokenizer)
    other = dataclasses.replace(config, d_model=16)
    with pytest.raises(ck.CheckpointError, match=r"d_model: saved 8 vs expected 16"):
        load(path, expected_config=other)
    # a config that does not fit the saved arrays
    edited = dict(config.to_dict(), d_model=4, num_heads=2)
    edit_manifest(path, config=edited)
    with pytest.raises(ck.CheckpointError, match="do not belong together"):
        load(path)


def test_load_names_missing_files_or_a_missing_folder(tmp_path, params, config, tokenizer):
    path = save(tmp_path / "ckpt", params, config, tokenizer, bigram_table=np.zeros((1, 2)))
    for name in (ck.PARAMS_FILE, ck.TOKENIZER_FILE, "bigrams.npy"):
        (path / name).rename(tmp_path / name)
        with pytest.raises(ck.CheckpointError, match=f"not a complete checkpoint .missing {name}"):
            load(path)
        (tmp_path / name).rename(path / name)
    (tmp_path / "half").mkdir()
    with pytest.raises(ck.CheckpointError, match="half has no manifest.json: it is not a check"):
        load(tmp_path / "half")
    with pytest.raises(ck.CheckpointError, match="there is no checkpoint at .*train one"):
        load(tmp_path / "never")
    (tmp_path / "params.npz").write_bytes(b"")
    with pytest.raises(ck.CheckpointError, match="params.npz is a file, not a checkpoint folder"):
        load(tmp_path / "params.npz")


def test_predict_any_text(tmp_path, params, config, tokenizer):
    path = save(tmp_path / "ckpt", params, config, tokenizer)
    texts = ["", "great " * 5000, "Très bien, 素晴らしい映画 🎬", TEXTS[1], "   "]
    probs = ck.predict(texts, path)
    assert probs.shape == (5,) and np.isfinite(probs).all()
    assert ((probs > 0) & (probs < 1)).all()
    assert ck.predict("", path).shape == (1,)
    assert ck.predict([], path).shape == (0,)
    # the same numbers as the model applied directly to the encoded, truncated review
    from m2l_nlp.data.tokenization import batch_encode

    ids, mask = batch_encode(tokenizer, texts, seq_len=config.max_len)
    model = model_lib.classifier(config)
    logits = np.asarray(model.predict_fw(params, ids, mask))
    np.testing.assert_allclose(probs, 1 / (1 + np.exp(-logits)), rtol=1e-4, atol=1e-6)
    with pytest.raises(TypeError, match="list of strings"):
        ck.predict([1, 2], path)


def test_predict_reads_long_reviews_in_training_windows(tmp_path, params, config, tokenizer):
    meta = {"settings": {"crop_len": 8}}
    path = save(tmp_path / "ckpt", params, config, tokenizer, meta)
    text = " ".join(TEXTS)  # longer than max_len=32 tokens: 4 windows of 8
    prob = ck.predict(text, path)[0]
    from m2l_nlp.data.tokenization import batch_encode

    ids, mask = batch_encode(tokenizer, [text], seq_len=config.max_len)
    assert mask.sum() == 32
    model = model_lib.classifier(config)
    logits = [
        float(model.predict_fw(params, ids[:, s : s + 8], mask[:, s : s + 8])[0])
        for s in (0, 8, 16, 24)
    ]
    assert prob == pytest.approx(1 / (1 + np.exp(-np.mean(logits))), rel=1e-4)


def _bigram_model(tokenizer, seed: int):
    """A pair table fitted on TEXTS, and a tiny model (config, apply, params) with room for it."""
    from m2l_nlp.data import bigrams
    from m2l_nlp.data.tokenization import batch_encode

    base = tokenizer.get_vocab_size()
    ids, mask = batch_encode(tokenizer, TEXTS, seq_len=16)
    table = bigrams.fit_bigram_table(ids, mask, size=10, base=base)
    config = ClassifierConfig(
        vocab_size=bigrams.vocab_size_with_bigrams(base, table),
        num_layers=1,
        num_heads=2,
        d_model=8,
        d_ff=16,
        max_len=32,
    )
    model = model_lib.classifier(config)
    params = jax.device_get(model_lib.init_params(model, jax.random.PRNGKey(seed), config.max_len))
    return base, table, config, model, params


def test_a_bigram_checkpoint_round_trips_and_predicts_like_the_model(tmp_path, tokenizer):
    from m2l_nlp.data import bigrams
    from m2l_nlp.data.tokenization import batch_encode

    base, table, config, model, params = _bigram_model(tokenizer, seed=1)
    path = save(tmp_path / "ckpt", params, config, tokenizer, bigram_table=table)
    loaded = load(path, expected_config=config)
    np.testing.assert_array_equal(loaded.bigram_table, table)
    plain = save(tmp_path / "plain", params, config, tokenizer)
    assert load(plain).bigram_table is None

    texts = ["", "great " * 500, "Très bien, 素晴らしい映画 🎬", TEXTS[1]]
    probs = ck.predict(texts, path)
    ids, mask = batch_encode(tokenizer, texts, seq_len=32)
    pair_ids = bigrams.merge_bigram_tokens(ids, mask, table, base)
    assert (pair_ids >= base).any()  # the texts do contain pairs of the table
    logits = np.asarray(model.predict_fw(params, pair_ids, mask))
    np.testing.assert_allclose(probs, 1 / (1 + np.exp(-logits)), rtol=1e-4, atol=1e-6)

    # a model with too few embedding rows for the table is refused
    small = dataclasses.replace(config, vocab_size=base + 5)
    small_model = model_lib.classifier(small)
    small_params = jax.device_get(
        model_lib.init_params(small_model, jax.random.PRNGKey(1), small.max_len)
    )
    path = save(tmp_path / "bad", small_params, small, tokenizer, bigram_table=table)
    with pytest.raises(ck.CheckpointError, match="bigram table 10 pairs"):
        load(path)


def test_predict_tokenizes_no_more_than_the_model_reads(
    tmp_path, params, config, tokenizer, monkeypatch
):
    """A 50 MB file once cost 2.8 GB and 11 s to read its first tokens; now the tokenizer
    sees a few times the model's window, and the probability is the same."""
    path = save(tmp_path / "ckpt", params, config, tokenizer)
    long = (TEXTS[1] + " ") * 20_000
    from m2l_nlp.data import tokenization

    seen = []
    encode = tokenization.batch_encode

    def counting(tok, texts, seq_len=600):
        seen.extend(len(t) for t in texts)
        return encode(tok, texts, seq_len)

    monkeypatch.setattr(tokenization, "batch_encode", counting)
    prob = ck.predict(long, path)
    assert max(seen) < 64 * config.max_len < len(long)
    ids, mask = encode(tokenizer, [long], seq_len=config.max_len)
    logits = np.asarray(model_lib.classifier(config).predict_fw(params, ids, mask))
    np.testing.assert_allclose(prob, 1 / (1 + np.exp(-logits)), rtol=1e-4, atol=1e-6)


def test_a_run_without_a_checkpoint_says_which_runs_write_one(tmp_path):
    run = tmp_path / "runs" / "bow-mlp"
    run.mkdir(parents=True)
    (run / "run.json").write_text("{}")
    with pytest.raises(ck.CheckpointError, match="is a run without a checkpoint: only runs that"):
        load(run / "checkpoint")


# --- one format for every kind: the manifest, and each command's answer to the others -------

COMMANDS = {ck.CLASSIFIER: "predict", ck.LANGUAGE_MODEL: "generate", ck.TRANSLATOR: "translate"}
PRESETS = {ck.CLASSIFIER: "default", ck.LANGUAGE_MODEL: "char-lm", ck.TRANSLATOR: "translate"}
ARGUMENTS = {"predict": ["good film"], "generate": ["The"], "translate": ["Hello."]}


@pytest.fixture(scope="module")
def kinds(params, config, tokenizer):
    """kind -> (params, config, tokenizer) of a tiny model of each kind. The character model
    and the translator get made-up parameters: the format does not look inside them."""
    from m2l_nlp.config import TransformerConfig
    from m2l_nlp.data.characters import CharVocab

    sizes = dict(num_layers=1, num_heads=2, d_model=8, d_ff=16, p_dropout=0.0, max_len=24)
    made_up = {"model/~/embed": {"embeddings": np.arange(12, dtype=np.float32).reshape(3, 4)}}
    return {
        ck.CLASSIFIER: (params, config, tokenizer),
        ck.LANGUAGE_MODEL: (
            made_up,
            TransformerConfig(vocab_size=10, **sizes),
            CharVocab(" Thefilm"),
        ),
        ck.TRANSLATOR: (made_up, TransformerConfig(vocab_size=64, **sizes), tokenizer),
    }


@pytest.fixture(scope="module")
def saved(kinds, tmp_path_factory):
    """kind -> the folder of its checkpoint."""
    folder = tmp_path_factory.mktemp("kinds")
    return {
        kind: ck.save_checkpoint(folder / kind, kind, *made, meta={"kind": kind})
        for kind, made in kinds.items()
    }


@pytest.mark.parametrize("kind", list(COMMANDS))
def test_every_kind_round_trips_through_its_manifest(kinds, saved, kind):
    import dataclasses as dc

    params, config, tokenizer = kinds[kind]
    manifest = json.loads((saved[kind] / ck.MANIFEST_FILE).read_text())
    assert manifest["format_version"] == ck.FORMAT_VERSION == 1
    assert manifest["kind"] == kind and manifest["config"] == dc.asdict(config)
    assert manifest["params"] == ck.PARAMS_FILE and manifest["extras"] == {"meta": ck.META_FILE}
    if kind == ck.LANGUAGE_MODEL:
        assert manifest["tokenizer"] == {"type": "characters", "characters": " Thefilm"}
    else:
        assert manifest["tokenizer"] == {"type": "tokenizers", "file": ck.TOKENIZER_FILE}
    loaded = ck.load_checkpoint(saved[kind], kind, expected_config=config)
    assert loaded.kind == kind and loaded.config == config and loaded.meta == {"kind": kind}
    assert loaded.bigram_table is None
    leaves = jax.tree_util.tree_leaves
    assert jax.tree_util.tree_structure(loaded.params) == jax.tree_util.tree_structure(params)
    for a, b in zip(leaves(params), leaves(loaded.params), strict=True):
        np.testing.assert_array_equal(a, b)
    if kind == ck.LANGUAGE_MODEL:
        assert loaded.tokenizer == tokenizer
    else:
        assert loaded.tokenizer.encode(TEXTS[0]).ids == tokenizer.encode(TEXTS[0]).ids


@pytest.mark.parametrize(
    ("given", "command"),
    [
        (kind, command)
        for kind in COMMANDS
        for command in COMMANDS.values()
        if command != COMMANDS[kind]
    ],
)
def test_each_command_names_the_command_that_reads_another_kinds_checkpoint(
    saved, given, command, capsys
):
    from m2l_nlp import cli

    path = saved[given]
    assert cli.main([command, *ARGUMENTS[command], "--checkpoint", str(path)]) == 2
    said = capsys.readouterr()
    assert said.out == "" and "Traceback" not in said.err
    (line,) = said.err.splitlines()  # one line
    assert line.startswith(f"error: {path} is ")
    assert line.endswith(f"`m2l-nlp {COMMANDS[given]} --checkpoint {path}`")
    assert f"which `m2l-nlp {command}` does not read" in line


@pytest.mark.parametrize("kind", list(COMMANDS))
def test_a_folder_without_a_manifest_says_to_train_again(tmp_path, kind, capsys):
    """A checkpoint of the layouts before the manifest (or any folder): train again."""
    from m2l_nlp import cli

    old = tmp_path / "old"
    old.mkdir()
    for name in ("params.npz", "config.json", "characters.json", "tokenizer.json"):
        (old / name).write_bytes(b"{}")
    command = COMMANDS[kind]
    assert cli.main([command, *ARGUMENTS[command], "--checkpoint", str(old)]) == 2
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith(f"error: {old} has no manifest.json: it is not a checkpoint, or one")
    cost = ck.spec_of(kind).cost
    assert line.endswith(
        f"again with `m2l-nlp train --preset {PRESETS[kind]}` (`--data small`: {cost})"
    )
    assert sorted(p.name for p in old.iterdir()) == [  # nothing of it deleted
        "characters.json",
        "config.json",
        "params.npz",
        "tokenizer.json",
    ]


def test_another_format_version_says_to_train_again(tmp_path, params, config, tokenizer):
    path = save(tmp_path / "ckpt", params, config, tokenizer)
    edit_manifest(path, format_version=0)
    with pytest.raises(ck.CheckpointError, match="is a checkpoint of format 0, and this m2l-nl"):
        load(path)


def test_predict_refuses_a_loaded_checkpoint_of_another_kind(saved):
    loaded = ck.load_checkpoint(saved[ck.TRANSLATOR], ck.TRANSLATOR)
    with pytest.raises(ck.CheckpointError, match="m2l-nlp translate --checkpoint"):
        ck.predict("good", loaded)


@pytest.mark.parametrize("kind", list(COMMANDS))
def test_a_write_that_fails_halfway_leaves_nothing_under_the_name(kinds, tmp_path, kind):
    """The parameters are written, then the tokenizer fails: no checkpoint appears, and no
    temporary folder stays behind."""
    params, config, _ = kinds[kind]

    class Broken:  # a tokenizer, or a character model's characters, that cannot be written
        @property
        def chars(self):
            raise OSError("disk full")

        def save(self, _path):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(tmp_path / "ckpt", kind, params, config, Broken())
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ck.CheckpointError, match="there is no checkpoint at"):
        ck.load_checkpoint(tmp_path / "ckpt", kind)


def test_save_refuses_a_config_of_another_kind(tmp_path, params, config, tokenizer):
    with pytest.raises(TypeError, match="a translate checkpoint holds a TransformerConfig"):
        ck.save_checkpoint(tmp_path / "ckpt", ck.TRANSLATOR, params, config, tokenizer)
    with pytest.raises(ValueError, match="kind must be one of classifier, char-lm, translate"):
        ck.save_checkpoint(tmp_path / "ckpt", "poem", params, config, tokenizer)
    assert list(tmp_path.iterdir()) == []


def test_predict_reads_a_long_review_alike_whatever_the_tokenizers_padding(
    tmp_path, params, config, tokenizer
):
    """A tokenizer set to pad (a notebook may do it) made every cut look long enough: a
    review of long unknown words (one token each, 21 characters) was cut before its first
    max_len tokens, and scored on fewer of them than batch_encode gives the model."""
    from tokenizers import Tokenizer

    from m2l_nlp.data.tokenization import batch_encode

    padded = Tokenizer.from_str(tokenizer.to_str())
    padded.enable_padding(length=4 * config.max_len)
    review = "zzzzzzzzzzzzzzzzzzzz " * 24 + (TEXTS[0] + " ") * 2_000
    path = save(tmp_path / "ckpt", params, config, tokenizer)
    loaded = load(path)
    prob = ck.predict(review, loaded._replace(tokenizer=padded))
    ids, mask = batch_encode(tokenizer, [review], seq_len=config.max_len)
    assert mask.sum() == config.max_len
    logits = np.asarray(model_lib.classifier(config).predict_fw(params, ids, mask))
    np.testing.assert_allclose(prob, 1 / (1 + np.exp(-logits)), rtol=1e-4, atol=1e-6)


SHOWCASE = [
    "One of the best films I have seen this year.",
    "A dull, tedious waste of two hours.",
    "A warm, funny and clever film.",
    "The plot made no sense and the acting was wooden.",
]


def _showcase_cell() -> str:
    """The code of practical 2's solved notebook cell that scores new sentences (read as JSON:
    the Colab lanes have no jupytext; the notebook is generated from solutions/, drift-checked)."""
    import json

    from m2l_nlp.impl import repo_root

    path = repo_root() / "notebooks" / "practical2_transformers_solved.ipynb"
    notebook = json.loads(path.read_text(encoding="utf-8"))
    sources = ["".join(c["source"]) for c in notebook["cells"] if c["cell_type"] == "code"]
    cells = [source for source in sources if "reviews = [" in source]
    assert len(cells) == 1, "practical 2's notebook should have one showcase cell"
    return cells[0]


def test_the_notebook_showcase_scores_as_predict_does(tmp_path, tokenizer, capsys):
    """The notebook's showcase and `m2l-nlp predict` are one path: the same sentences, pair
    tokens merged as in training, read in training windows. The old cell encoded without
    the pair tokens and got other numbers (0.65 / 0.88 against 0.17 / 0.05)."""
    import types

    from m2l_nlp.data import bigrams
    from m2l_nlp.data.tokenization import batch_encode

    base, table, config, model, params = _bigram_model(tokenizer, seed=2)
    crop = 8
    namespace = {
        "result": types.SimpleNamespace(params=params),
        "classifier": model,
        "data": types.SimpleNamespace(tokenizer=tokenizer, bigram_table=table),
        "config": config,
        "settings": types.SimpleNamespace(crop_len=crop),
        "predict_fw": model.predict_fw,  # what the notebook defined before the cell
        "batch_encode": batch_encode,
        "jax": jax,
    }
    exec(_showcase_cell(), namespace)
    assert namespace["reviews"] == SHOWCASE
    printed = capsys.readouterr().out.splitlines()
    assert [line.split("  ", 1)[1] for line in printed] == SHOWCASE

    meta = {"settings": {"crop_len": crop}}
    path = save(tmp_path / "ckpt", params, config, tokenizer, meta, table)
    expected = ck.predict(SHOWCASE, path)
    shown = np.asarray(namespace["probabilities"], np.float64).reshape(-1)
    np.testing.assert_allclose(shown, expected, rtol=1e-5, atol=1e-6)
    # the pairs matter here, so a cell that skips them would fail the line above
    ids, mask = batch_encode(tokenizer, SHOWCASE, seq_len=config.max_len)
    assert (bigrams.merge_bigram_tokens(ids, mask, table, base) != ids).any()
    plain = ck.review_probabilities(SHOWCASE, params, model, tokenizer, max_len=config.max_len)
    assert not np.allclose(plain, expected, rtol=1e-3, atol=1e-4)


def test_save_run_writes_the_metrics_plots_and_the_checkpoint_its_command_reads(
    tmp_path, params, config, tokenizer
):
    """What a run leaves: ``metrics.json`` with the history, the curves, the test confusion
    matrix, and a checkpoint of the run's kind with the settings; no checkpoint unless asked."""
    from m2l_nlp.config import TrainSettings
    from m2l_nlp.train.metrics import EvalResult

    history = {"loss": [0.7, 0.5], "val_accuracy": [0.6, 0.75]}
    test = EvalResult(0.75, 0.5, np.array([[3, 1], [1, 3]]), 8)
    kind = type("Kind", (), {"name": ck.CLASSIFIER, "curves_title": "Training curves"})
    run = type("Run", (), {})()
    run.kind, run.params, run.config, run.history, run.test = kind, params, config, history, test
    run.metrics = {"test_accuracy": 0.75}
    settings = TrainSettings(learning_rate=1e-3)

    ck.save_run(tmp_path / "run", run, settings, tokenizer, checkpoint=True)
    names = {p.name for p in (tmp_path / "run").iterdir()}
    assert names == {"checkpoint", "metrics.json", "training_curves.png", "confusion_matrix.png"}
    saved = json.loads((tmp_path / "run" / "metrics.json").read_text())
    assert saved == {"test_accuracy": 0.75, "history": history}
    for picture in ("training_curves.png", "confusion_matrix.png"):
        assert (tmp_path / "run" / picture).read_bytes().startswith(b"\x89PNG")
    loaded = load(tmp_path / "run" / "checkpoint", expected_config=config)
    assert loaded.meta["test_accuracy"] == 0.75 and loaded.meta["history"] == history
    assert loaded.meta["settings"] == json.loads(json.dumps(dataclasses.asdict(settings)))

    run.test = None  # a language model's or translator's run: no confusion matrix
    ck.save_run(tmp_path / "bare", run, settings, tokenizer, checkpoint=False)
    assert {p.name for p in (tmp_path / "bare").iterdir()} == {
        "metrics.json",
        "training_curves.png",
    }
