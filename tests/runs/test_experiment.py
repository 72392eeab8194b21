"""Tests of m2l_nlp.runs.experiment: the whole job, saved as one run, and resumed after an
interruption with the same result as a run that never stopped."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
import pytest

from m2l_nlp import cli, config
from m2l_nlp.data.pipeline import prepare_for
from m2l_nlp.model.classifiers import ModelOutputError
from m2l_nlp.overrides import override
from m2l_nlp.runs import checkpoint, experiment
from m2l_nlp.runs import folders as runs

TINY = [
    "vocab_size=500",
    "seq_len=64",
    "bigram_tokens=0",
    "model.d_model=16",
    "model.d_ff=32",
    "train.crop_len=64",
]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """A tiny preset of 3 epochs and its data (the bundled reviews)."""
    preset = override(config.PRESETS["demo"], [*TINY, "train.epochs=3", "train.ema_decay=0.9"])
    cache = tmp_path_factory.mktemp("cache")
    return preset, prepare_for(preset, "small", cache_dir=cache, progress=False)


@pytest.mark.slow
def test_train_and_evaluate_tests_and_saves_the_run(tmp_path):
    preset = override(config.PRESETS["demo"], [*TINY, "train.epochs=1"])
    data = prepare_for(preset, "small", cache_dir=tmp_path / "cache", progress=False)
    out = tmp_path / "run"
    run = experiment.train_and_evaluate(preset, data, out, name="tiny", progress=False, log=None)
    n_test = len(data.test_labels)
    assert run.test is not None and run.test.count == n_test
    assert int(run.test.confusion.sum()) == n_test
    assert 0.0 <= run.test.accuracy <= 1.0
    assert run.config == preset.model_config(data.vocab_size)
    assert len(run.history["loss"]) == 1 and len(run.history["val_acc"]) == 1
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["preset"] == "tiny" and saved["val_size"] == preset.val_size
    assert saved["test_accuracy"] == pytest.approx(run.test.accuracy)
    assert saved["test_accuracy"] == run.metrics["test_accuracy"]
    assert saved["confusion"] == run.test.confusion.tolist()
    assert saved["history"] == run.history
    for name in ("training_curves.png", "confusion_matrix.png"):
        assert (out / name).is_file(), name
    loaded = checkpoint.load_checkpoint(out / "checkpoint", checkpoint.CLASSIFIER, run.config)
    jax.tree_util.tree_map(np.testing.assert_array_equal, loaded.params, run.params)


@pytest.mark.slow
def test_an_interrupted_run_resumes_to_the_same_result(tiny, tmp_path, monkeypatch):
    """Stopped after epoch 2 of 3 (Ctrl-C), then resumed: the same parameters, history and
    test accuracy as the run that was never stopped; its partial state is then gone."""
    preset, data = tiny
    whole = experiment.train_and_evaluate(
        preset, data, tmp_path / "whole", name="tiny", progress=False, log=None
    )
    saving = runs.RunFolder.save_progress

    def stop_after_epoch_2(self, info, arrays):
        saving(self, info, arrays)
        if info["epoch"] == 2:
            raise KeyboardInterrupt

    out = tmp_path / "stopped"
    monkeypatch.setattr(runs.RunFolder, "save_progress", stop_after_epoch_2)
    with pytest.raises(KeyboardInterrupt):
        experiment.train_and_evaluate(preset, data, out, name="tiny", progress=False, log=None)
    monkeypatch.undo()
    assert not out.exists() and (tmp_path / ".stopped.partial" / "progress.json").is_file()
    with pytest.raises(runs.RunFolderError, match="these differ: seed"):
        experiment.train_and_evaluate(preset, data, out, seed=1, resume=True, name="tiny", log=None)
    _refused_with_another_state_layout(preset, data, out)
    lines = []
    resumed = experiment.train_and_evaluate(
        preset, data, out, name="tiny", resume=True, progress=False, log=lines.append
    )
    assert "resuming after epoch 2 of 3" in lines
    assert [line.split(":")[0] for line in lines if line.startswith("epoch")] == ["epoch 3/3"]
    jax.tree_util.tree_map(np.testing.assert_array_equal, resumed.params, whole.params)
    assert resumed.history == whole.history
    assert resumed.test.accuracy == whole.test.accuracy
    assert resumed.metrics["best_epoch"] == whole.metrics["best_epoch"]
    assert not (tmp_path / ".stopped.partial").exists()


def _refused_with_another_state_layout(preset, data, out) -> None:
    """A saved state of another layout (an optimizer state of one array fewer, as another
    optimizer saves it) is refused in one line, and the saved epoch is left as it was."""
    partial = out.parent / f".{out.name}.partial"
    info = json.loads((partial / "progress.json").read_text())
    saved = partial / info["arrays"]
    original = saved.read_bytes()
    with np.load(saved) as arrays:
        kept = {key: arrays[key] for key in arrays.files}
    count = info["state_count"]
    kept.pop(f"state_{count - 1}")
    with saved.open("wb") as handle:
        np.savez(handle, **kept)
    (partial / "progress.json").write_text(json.dumps(dict(info, state_count=count - 1)))
    with pytest.raises(runs.RunFolderError, match="does not fit this run") as refused:
        experiment.train_and_evaluate(preset, data, out, resume=True, name="tiny", log=None)
    assert "\n" not in str(refused.value) and "--overwrite" in str(refused.value)
    assert not out.exists() and saved.is_file()
    saved.write_bytes(original)
    (partial / "progress.json").write_text(json.dumps(info))


@pytest.mark.slow
def test_the_cli_killed_after_an_epoch_resumes_to_the_same_run(tmp_path):
    """SIGKILL right after epoch 1 was saved; `--resume` then ends where a run that was never
    killed ends: same test accuracy and the same parameters."""
    args = ["train", "--data", "small", "--epochs", "2", "--no-progress"]
    args += ["--cache-dir", str(tmp_path / "cache")]
    assert cli.main([*args, "--out", str(tmp_path / "whole")]) == 0
    env = dict(os.environ, **{runs.CRASH_ENV: "epoch-1-saved"})
    killed = [*args, "--out", str(tmp_path / "killed")]
    command = [sys.executable, "-m", "m2l_nlp.cli", *killed]
    assert subprocess.run(command, env=env, capture_output=True).returncode == -signal.SIGKILL
    assert not (tmp_path / "killed").exists()
    assert cli.main(killed) == 2  # a new start is refused while the interrupted run waits
    assert cli.main([*killed, "--resume"]) == 0
    metrics = [json.loads((tmp_path / n / "metrics.json").read_text()) for n in ("whole", "killed")]
    assert metrics[0]["test_accuracy"] == metrics[1]["test_accuracy"]
    assert metrics[0]["history"] == metrics[1]["history"]
    params = [
        checkpoint.load_checkpoint(tmp_path / n / "checkpoint", checkpoint.CLASSIFIER).params
        for n in ("whole", "killed")
    ]
    jax.tree_util.tree_map(np.testing.assert_array_equal, *params)


@pytest.mark.slow
def test_ctrl_c_keeps_the_last_epoch_and_says_how_to_resume(tmp_path, monkeypatch, capsys):
    saving = runs.RunFolder.save_progress

    def interrupt_after_epoch_1(self, info, arrays):
        saving(self, info, arrays)
        raise KeyboardInterrupt

    monkeypatch.setattr(runs.RunFolder, "save_progress", interrupt_after_epoch_1)
    args = ["train", "--data", "small", "--epochs", "2", "--no-progress"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--out", str(tmp_path / "run")]
    assert cli.main(args) == 130
    err = capsys.readouterr().err
    assert "epoch 1 of 2 is kept" in err
    assert err.strip().endswith(f"continue with: m2l-nlp {' '.join(args)} --resume")
    monkeypatch.undo()
    assert cli.main([*args, "--resume"]) == 0
    assert json.loads((tmp_path / "run" / "metrics.json").read_text())["best_epoch"] in (1, 2)


@pytest.fixture(scope="module")
def tiny_backoff(tiny, tmp_path_factory):
    """The tiny preset with 50 pair tokens that back off to their first tokens, its data."""
    preset = override(tiny[0], ["bigram_tokens=50", "bigram_backoff=true"])
    cache = tmp_path_factory.mktemp("cache")
    return preset, prepare_for(preset, "small", cache_dir=cache, progress=False)


@pytest.mark.slow
def test_a_run_with_backoff_tests_and_saves_the_plain_classifier(
    tiny_backoff, tmp_path, monkeypatch
):
    """Trained through the tie, tested and saved as the plain classifier with the pairs'
    rows summed: the checkpoint alone gives the test result of the model that was trained."""
    from m2l_nlp.model import classifiers as model
    from m2l_nlp.train import evaluation

    preset, data = tiny_backoff
    preset = override(preset, ["train.epochs=1"])
    trained = []

    def keep(*args, **kwargs):
        trained.append((experiment_train(*args, **kwargs), kwargs["tie"]))
        return trained[-1][0]

    experiment_train = experiment.train
    monkeypatch.setattr(experiment, "train", keep)
    run = experiment.train_and_evaluate(
        preset, data, tmp_path / "run", name="tiny", progress=False, log=None
    )
    result, tie = trained[0]
    assert tie is not None
    loaded = checkpoint.load_checkpoint(tmp_path / "run" / "checkpoint", checkpoint.CLASSIFIER)
    jax.tree_util.tree_map(np.testing.assert_array_equal, loaded.params, result.params)
    test = (data.test_ids, data.test_mask, data.test_labels)
    again = evaluation.evaluate(loaded.params, model.classifier(loaded.config), test, window=64)
    assert again.accuracy == run.test.accuracy
    assert again.loss == pytest.approx(run.test.loss, rel=1e-5)


def test_a_run_with_backoff_starts_each_pair_as_its_first_token(tiny_backoff, monkeypatch):
    preset, data = tiny_backoff
    started = []

    def capture(funcs, params, *args, **kwargs):
        started.append(params)
        raise KeyboardInterrupt

    monkeypatch.setattr(experiment, "train", capture)
    with pytest.raises(KeyboardInterrupt):
        experiment.train_and_evaluate(preset, data, None, progress=False, log=None)
    table = np.asarray(started[0]["classifier/~/embedding/~/embed"]["embeddings"])
    base = data.vocab_size - len(data.bigram_table)
    assert not table[base:].any() and table[:base].all()


@pytest.mark.slow  # over 3 s here
@pytest.mark.parametrize("pairs", ["no pairs", "pairs that back off"])
def test_a_run_on_a_gpu_compiles_a_program_per_shape_and_four_more(
    pairs, tiny, tiny_backoff, monkeypatch
):
    """With a GPU's buckets: the training step (gradient and update, one program) and the
    evaluation step (once per split, its sums are as long as the split) for each width, plus
    initialisation, the fresh training state, the epoch keys and the scoring of each split;
    nothing per epoch, no eager op (the pairs' tie runs on the host)."""
    from m2l_nlp import devices

    preset, data = tiny if pairs == "no pairs" else tiny_backoff
    preset = override(preset, ["train.epochs=2"])
    monkeypatch.setattr(devices, "accelerator", lambda: "gpu")  # buckets as on a GPU
    jax.clear_caches()  # as in a fresh process: programs of earlier tests would be reused
    before = devices.compile_counter()["programs"]
    run = experiment.train_and_evaluate(preset, data, None, name="tiny", progress=False, log=None)
    widths = 1  # 64-token crops and windows: one bucket
    splits = 2  # validation and test
    expected = widths + widths * splits + 3 + splits
    assert run.metrics["compiled_programs"] == expected
    assert devices.compile_counter()["programs"] - before == expected


def notebook_globals(change_logits: Callable[[jax.Array], jax.Array]) -> dict[str, Any]:
    """A notebook's ``globals()``: the reference's names, its classifier's logits changed."""
    from m2l_nlp.impl import load_practical

    names = dict(vars(load_practical("practical2_transformers", "solutions")))
    right = names["classifier_forward"]
    names["classifier_forward"] = lambda *args, **kwargs: change_logits(right(*args, **kwargs))
    return names


@pytest.mark.parametrize(
    ("change_logits", "said"),
    [
        (lambda logits: logits[:, None], r"shape \(8, 1\) .* shape \(8,\), one per review"),
        (lambda logits: logits / 0.0, "NaN or infinite logits"),
    ],
    ids=["(B, 1)", "NaN"],
)
def test_a_notebooks_wrong_model_is_refused_before_the_first_epoch(
    tiny, tmp_path, monkeypatch, change_logits, said
):
    """The notebooks' training cell goes through train_and_evaluate: a classifier giving
    (B, 1) once trained to "train_acc 8.0968"; now one line names the expected output and
    the notebook's check() cell, before any epoch and before anything is written."""
    preset, data = tiny

    def never(*args, **kwargs):
        raise AssertionError("trained a wrong model")

    monkeypatch.setattr(experiment, "train", never)
    out = tmp_path / "run"
    with pytest.raises(ModelOutputError, match=said) as caught:
        experiment.train_and_evaluate(
            preset, data, out, impl=notebook_globals(change_logits), progress=False, log=None
        )
    assert 'check("classifier", ...)' in str(caught.value) and "\n" not in str(caught.value)
    assert list(tmp_path.iterdir()) == []  # no run, no lock


def test_run_json_says_whose_modules_were_trained(tiny, tmp_path, monkeypatch):
    """A forgotten --impl exercises trains the reference: run.json names it (or "notebook"
    for a notebook's own cells). The training and the files are skipped here: run.json is
    what is looked at."""
    from m2l_nlp.train.loop import TrainResult

    preset, data = tiny

    def untrained(funcs, params, *args, **kwargs):
        return TrainResult(params, {"loss": [0.7]}, None, 1)

    monkeypatch.setattr(experiment, "train", untrained)
    monkeypatch.setattr(checkpoint, "save_run", lambda out, *args, **kwargs: None)
    for impl, said in [("solutions", "solutions"), (notebook_globals(lambda x: x), "notebook")]:
        out = tmp_path / said
        experiment.train_and_evaluate(
            preset, data, out, impl=impl, no_test=True, progress=False, log=None
        )
        assert json.loads((out / "run.json").read_text())["impl"] == said


def test_run_training_checks_first_then_opens_the_folder_and_says_each_step(tmp_path, monkeypatch):
    """The whole job of ``m2l-nlp train`` around the training itself (stood in for here): a
    folder it cannot write is refused before anything is made; otherwise the run folder is
    opened, each step said, and the trained run returned."""
    preset = override(config.PRESETS["demo"], TINY)

    def request(out):
        return experiment.TrainRequest(
            name="demo", preset=preset, data="small", out=out, cache_dir=tmp_path / "cache",
            changed=("seq_len=64",), progress=False,
        )  # fmt: skip

    (tmp_path / "a-file").write_text("the user's")
    with pytest.raises(ValueError, match="--out"):
        experiment.run_training(request(tmp_path / "a-file" / "run"), say=print)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]

    seen = []
    monkeypatch.setattr(
        experiment, "_train_and_evaluate", lambda data, folder, req, say: seen.append(data) or "run"
    )
    said = []
    assert experiment.run_training(request(tmp_path / "run"), say=said.append) == "run"
    assert said[0].startswith("model: solutions/ (")
    assert said[1].startswith("devices: ") and said[2].startswith("preset demo: ")
    assert said[3] == "changed: seq_len=64" and said[4].startswith("data prepared (")
    assert len(seen) == 1 and seen[0].vocab_size > 0
