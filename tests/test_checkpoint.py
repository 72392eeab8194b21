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


def test_round_trip(tmp_path, params, config, tokenizer):
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer, {"acc": 0.5})
    loaded = ck.load_checkpoint(path, expected_config=config)
    assert loaded.config == config and loaded.meta == {"acc": 0.5}
    assert jax.tree_util.tree_structure(loaded.params) == jax.tree_util.tree_structure(params)
    leaves = jax.tree_util.tree_leaves
    for a, b in zip(leaves(params), leaves(loaded.params), strict=True):
        np.testing.assert_array_equal(a, b)
    assert loaded.tokenizer.encode(TEXTS[0]).ids == tokenizer.encode(TEXTS[0]).ids
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary left


def test_save_replaces_atomically_and_cleans_up_on_failure(tmp_path, params, config, tokenizer):
    path = tmp_path / "ckpt"
    ck.save_checkpoint(path, params, config, tokenizer, {"run": 1})
    ck.save_checkpoint(path, params, config, tokenizer, {"run": 2})
    assert ck.load_checkpoint(path).meta == {"run": 2}

    class Broken:
        def save(self, _path):
            raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        ck.save_checkpoint(path, params, config, Broken(), {"run": 3})
    assert ck.load_checkpoint(path).meta == {"run": 2}  # the old checkpoint is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]


def test_an_interrupted_replace_keeps_the_old_checkpoint(
    tmp_path, params, config, tokenizer, monkeypatch
):
    """Ctrl-C between moving the old checkpoint aside and renaming the new one into place:
    the old one is put back, and nothing else is left in the folder."""
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer, {"run": 1})
    real_replace = ck.os.replace

    def interrupted(src, dst):
        if str(src).endswith(".tmp"):  # the new checkpoint's rename
            raise KeyboardInterrupt
        real_replace(src, dst)

    monkeypatch.setattr(ck.os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(path, params, config, tokenizer, {"run": 2})
    monkeypatch.undo()
    assert ck.load_checkpoint(path).meta == {"run": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]

    def restore_fails(src, dst):
        if str(src).endswith(".tmp") or Path(dst) == path:
            raise KeyboardInterrupt  # the new rename, then putting the old one back
        real_replace(src, dst)

    monkeypatch.setattr(ck.os, "replace", restore_fails)
    with pytest.raises(KeyboardInterrupt):
        ck.save_checkpoint(path, params, config, tokenizer, {"run": 3})
    monkeypatch.undo()
    (kept,) = [p for p in tmp_path.iterdir() if p.name.endswith(".old")]  # not deleted
    assert ck.load_checkpoint(kept / "ckpt").meta == {"run": 1}


def test_checkpoint_folder_gets_ordinary_permissions(tmp_path, params, config, tokenizer):
    """tempfile makes the folder private (0700); the checkpoint is an ordinary folder."""
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer)
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o777 & ~mask


@pytest.mark.parametrize(
    ("file", "damage"),
    [
        (ck.CONFIG_FILE, lambda text: text[: len(text) // 2]),
        (ck.CONFIG_FILE, lambda text: text.replace("{", '{"colour": "red", ', 1)),
        (ck.TOKENIZER_FILE, lambda text: "not a tokenizer"),
        (ck.META_FILE, lambda text: text[:-3]),
        (ck.PARAMS_FILE, None),
    ],
    ids=["truncated config", "unknown setting", "tokenizer", "meta", "truncated params"],
)
def test_a_damaged_file_is_a_checkpoint_error(tmp_path, params, config, tokenizer, file, damage):
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer, {"run": 1})
    target = path / file
    if damage is None:
        target.write_bytes(target.read_bytes()[:100])
    else:
        target.write_text(damage(target.read_text()))
    with pytest.raises(ck.CheckpointError, match=f"{file} is damaged"):
        ck.load_checkpoint(path)


def test_params_that_do_not_fit_the_model_are_refused_before_predicting(
    tmp_path, params, config, tokenizer, capsys
):
    """config.json edited to another d_ff or another number of layers: a clear error."""
    from m2l_nlp import cli

    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer)
    for change, message in (
        ({"d_ff": 48}, r"has shape \(8, 16\), the model wants \(8, 48\)"),
        ({"num_layers": 2}, r"block_1.* is missing"),
    ):
        (path / ck.CONFIG_FILE).write_text(json.dumps(dict(config.to_dict(), **change)))
        with pytest.raises(ck.CheckpointError, match=message):
            ck.predict("good", path)
        assert cli.main(["predict", "good", "--checkpoint", str(path)]) == 2
        assert "do not belong together" in capsys.readouterr().err


def test_load_refuses_a_mismatched_config(tmp_path, params, config, tokenizer):
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer)
    other = dataclasses.replace(config, d_model=16)
    with pytest.raises(ck.CheckpointError, match=r"d_model: saved 8 vs expected 16"):
        ck.load_checkpoint(path, expected_config=other)
    # a config.json that does not fit the saved arrays
    edited = dict(config.to_dict(), d_model=4, num_heads=2)
    (path / ck.CONFIG_FILE).write_text(json.dumps(edited))
    with pytest.raises(ck.CheckpointError, match="do not belong together"):
        ck.load_checkpoint(path)


def test_load_names_missing_files_or_a_missing_folder(tmp_path):
    (tmp_path / "half").mkdir()
    with pytest.raises(ck.CheckpointError, match="missing params.npz, config.json"):
        ck.load_checkpoint(tmp_path / "half")
    with pytest.raises(ck.CheckpointError, match="there is no checkpoint at .*train one"):
        ck.load_checkpoint(tmp_path / "never")
    (tmp_path / "params.npz").write_bytes(b"")
    with pytest.raises(ck.CheckpointError, match="params.npz is a file, not a checkpoint folder"):
        ck.load_checkpoint(tmp_path / "params.npz")


def test_predict_any_text(tmp_path, params, config, tokenizer):
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer)
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
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer, meta)
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
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer, bigram_table=table)
    loaded = ck.load_checkpoint(path, expected_config=config)
    np.testing.assert_array_equal(loaded.bigram_table, table)
    plain = ck.save_checkpoint(tmp_path / "plain", params, config, tokenizer)
    assert ck.load_checkpoint(plain).bigram_table is None

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
    path = ck.save_checkpoint(tmp_path / "bad", small_params, small, tokenizer, bigram_table=table)
    with pytest.raises(ck.CheckpointError, match="bigram table 10 pairs"):
        ck.load_checkpoint(path)


def test_predict_tokenizes_no_more_than_the_model_reads(
    tmp_path, params, config, tokenizer, monkeypatch
):
    """A 50 MB file once cost 2.8 GB and 11 s to read its first tokens; now the tokenizer
    sees a few times the model's window, and the probability is the same."""
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer)
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
    with pytest.raises(ck.CheckpointError, match="is a run without a checkpoint: only the trans"):
        ck.load_checkpoint(run / "checkpoint")


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
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer)
    loaded = ck.load_checkpoint(path)
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
    path = ck.save_checkpoint(tmp_path / "ckpt", params, config, tokenizer, meta, table)
    expected = ck.predict(SHOWCASE, path)
    shown = np.asarray(namespace["probabilities"], np.float64).reshape(-1)
    np.testing.assert_allclose(shown, expected, rtol=1e-5, atol=1e-6)
    # the pairs matter here, so a cell that skips them would fail the line above
    ids, mask = batch_encode(tokenizer, SHOWCASE, seq_len=config.max_len)
    assert (bigrams.merge_bigram_tokens(ids, mask, table, base) != ids).any()
    plain = ck.review_probabilities(SHOWCASE, params, model, tokenizer, max_len=config.max_len)
    assert not np.allclose(plain, expected, rtol=1e-3, atol=1e-4)
