"""Tests of m2l_nlp.runs.language_model: `m2l-nlp train --preset char-lm` and `generate`."""

from __future__ import annotations

import json

import pytest

from m2l_nlp import cli
from m2l_nlp.runs import experiment

TINY = [
    "--set",
    "seq_len=32",
    "--set",
    "model.num_layers=1",
    "--set",
    "model.d_model=16",
    "--set",
    "model.d_ff=32",
    "--set",
    "model.num_heads=2",
    "--set",
    "train.batch_size=32",
    "--set",
    "train.crop_len=32",
]


@pytest.mark.slow
def test_train_then_generate_and_resume(tmp_path, capsys, stopped_after_epoch_1, same_parameters):
    """A tiny char-lm on the bundled reviews: bits per character each epoch with a sample,
    test bits beside both baselines, a checkpoint that `generate` continues text from; a run
    stopped after epoch 1 resumes to the same numbers."""
    args = ["train", "--preset", "char-lm", "--data", "small", "--epochs", "2", "--no-progress"]
    args += [*TINY, "--cache-dir", str(tmp_path / "cache")]
    assert cli.main([*args, "--out", str(tmp_path / "lm")]) == 0
    out = capsys.readouterr().out
    assert "epoch 2/2: bits/char" in out and "val_bits/char" in out and "sample: 'The film" in out
    assert "baselines on the same text: bigram" in out
    assert "validation bits per character: " in out  # beside its baselines too
    metrics = json.loads((tmp_path / "lm" / "metrics.json").read_text())
    assert metrics["test_bits_per_char"] > 0 and set(metrics["baselines_bits_per_char"]) == {
        "unigram",
        "bigram",
    }
    checkpoint = str(tmp_path / "lm" / "checkpoint")
    assert cli.main(["generate", "--checkpoint", checkpoint, "I saw", "--max-chars", "20"]) == 0
    written = capsys.readouterr().out.strip()
    assert written.startswith("I saw") and len(written) == 5 + 20
    assert cli.main(["generate", "--checkpoint", checkpoint, "x" * 40]) == 2
    assert "the model reads at most 32 characters" in capsys.readouterr().err

    stopped = [*args, "--out", str(tmp_path / "stopped")]
    assert stopped_after_epoch_1(stopped) == 130
    assert cli.main([*stopped, "--resume"]) == 0
    again = json.loads((tmp_path / "stopped" / "metrics.json").read_text())
    assert again["history"] == metrics["history"]
    assert again["test_bits_per_char"] == metrics["test_bits_per_char"]
    same_parameters(tmp_path / "lm" / "checkpoint", tmp_path / "stopped" / "checkpoint")


def test_a_writer_without_a_working_cache_writes_the_same_text_more_slowly(capsys):
    """An unfinished or wrong `attend_with_cache` does not stop a run's samples: the Writer
    says so in one line and reads the whole window for every character instead."""
    import types

    import jax
    import numpy as np

    from m2l_nlp.config import TransformerConfig
    from m2l_nlp.data.characters import CharVocab
    from m2l_nlp.model.language_models import init_params, language_model
    from m2l_nlp.runs.language_model import Writer

    config = TransformerConfig(
        vocab_size=12, num_layers=1, num_heads=2, d_model=16, d_ff=32, max_len=24
    )
    funcs, p3 = language_model(config)
    params = init_params(funcs, 0, config.max_len)
    rng = np.random.default_rng(0)  # away from the initial LayerNorms and zero biases
    params = jax.tree_util.tree_map(lambda p: p + 0.3 * rng.standard_normal(p.shape), params)
    vocab = CharVocab("abcdefghij")

    class Unfinished(p3.CharLanguageModel):  # the cache's branch not written yet
        def __call__(self, *args, caches=None, at=0):
            if caches is not None:
                raise NotImplementedError("attend_with_cache: not implemented yet")
            return super().__call__(*args)

    broken = types.SimpleNamespace(**{**vars(p3), "CharLanguageModel": Unfinished})
    good = Writer(funcs, p3, config, vocab).write(params, "abc", 12, seed=3)
    assert capsys.readouterr().err == ""
    plain = Writer(funcs, broken, config, vocab).write(params, "abc", 12, seed=3)
    assert plain == good and len(good) >= 6  # (a drawn padding id writes nothing)
    assert capsys.readouterr().err.count("\n") == 1


def test_a_run_that_does_not_beat_the_baselines_says_what_it_learned():
    from m2l_nlp.runs.language_model import beside_baselines, learning_note

    baselines = {"unigram": 4.458, "bigram": 3.155}
    nothing = learning_note(4.463, baselines)
    assert nothing.startswith("note: this run learned nothing: 4.463 bits per character")
    assert "unigram model's 4.458" in nothing and "--epochs" in nothing
    frequencies = learning_note(3.79, baselines)
    assert "not yet learned which character follows which" in frequencies
    assert "bigram model's counts (3.155 bits per character) still beat its 3.790" in frequencies
    assert learning_note(1.922, baselines) is None
    line = beside_baselines("validation", 1.922, baselines)
    assert line == (
        "validation bits per character: 1.922; baselines on the same text: bigram 3.155, "
        "unigram 4.458"
    )


def test_the_small_data_gets_the_presets_small_recipe_and_set_still_wins(monkeypatch, capsys):
    """`--preset char-lm --data small` trains the recipe made for 800 reviews (one epoch of
    the full recipe is 32 steps there and learns nothing); --set and --epochs change it."""
    from m2l_nlp.config import PRESETS
    from m2l_nlp.runs import experiment

    asked = []

    def record(request, say=print):
        asked.append(request.preset)
        raise ValueError("recorded")

    monkeypatch.setattr(experiment, "run_training", record)
    base = ["train", "--preset", "char-lm", "--no-progress"]
    assert cli.main([*base, "--data", "small"]) == 2
    assert cli.main([*base, "--data", "small", "--epochs", "5", "--set", "model.d_model=32"]) == 2
    assert cli.main([*base, "--data", "somewhere/aclImdb"]) == 2
    assert "recorded" in capsys.readouterr().err
    small, changed, full = asked
    assert small == PRESETS["char-lm"].for_small_data() and small.small_data == {}
    assert (small.model["d_model"], small.model["num_layers"], small.train["epochs"]) == (64, 1, 3)
    assert small.model["num_heads"] == PRESETS["char-lm"].model["num_heads"]  # merged, not replaced
    assert (changed.model["d_model"], changed.train["epochs"]) == (32, 5)
    assert full == PRESETS["char-lm"]
    small.check()


@pytest.mark.slow
def test_the_small_data_recipe_beats_the_bigram_model(tmp_path, capsys):
    """`m2l-nlp train --preset char-lm --data small` as a student runs it: its test bits per
    character below the bigram model's, printed beside both baselines, with no note. The
    full recipe's one epoch there ends at the unigram model's bits (4.463 against 4.458)."""
    args = ["train", "--preset", "char-lm", "--data", "small", "--no-progress"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "lm")]
    assert cli.main(args) == 0
    out = capsys.readouterr().out
    metrics = json.loads((tmp_path / "lm" / "metrics.json").read_text())
    bits, baselines = metrics["test_bits_per_char"], metrics["baselines_bits_per_char"]
    assert bits < baselines["bigram"] - 0.5, (bits, baselines)
    assert f"test bits per character: {bits:.3f}" in out
    assert f"bigram {baselines['bigram']:.3f}, unigram {baselines['unigram']:.3f}" in out
    assert "note: this run" not in out


def test_a_loss_that_is_nan_from_the_start_is_named_with_its_exercise(tmp_path, monkeypatch):
    """The student's next_token_loss trains their model: a run that diverges in its first
    epoch says to check it, beside the learning rate."""
    from m2l_nlp.config import PRESETS
    from m2l_nlp.train.loop import DivergedError

    def diverge(*args, **kwargs):
        raise DivergedError(1, float("nan"), 0.01)

    monkeypatch.setattr(experiment, "_train_and_evaluate", diverge)
    preset = PRESETS["char-lm"].for_small_data()
    for impl, named in (("exercises", True), ("solutions", False)):
        request = experiment.TrainRequest(
            name="char-lm", preset=preset, data="small", out=tmp_path / impl, impl=impl,
            cache_dir=tmp_path / "cache", progress=False,
        )  # fmt: skip
        with pytest.raises(experiment.TrainStopped) as stopped:
            experiment.run_training(request, say=lambda line: None)
        said = str(stopped.value)
        assert "try a lower learning rate" in said
        assert ("`pytest -m next_token_loss` says where" in said) is named
