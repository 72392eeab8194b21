"""Tests of the ``m2l-nlp`` command line (train / predict / grade)."""

from __future__ import annotations

import json
import os
import sys

import pytest

from m2l_nlp import cli


def test_bad_arguments_exit_with_usage(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--preset", "nope"])
    assert "invalid choice" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([])


@pytest.mark.parametrize(
    ("option", "text", "said"),
    [
        ("--epochs", "x", "invalid whole-number value: 'x'"),
        ("--epochs", "0", "must be 1 or more, not 0"),
        ("--seed", "-1", "must be 0 or more, not -1"),
    ],
)
def test_a_bad_number_is_named_in_the_users_words(option, text, said, capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", option, text])
    err = capsys.readouterr().err
    assert f"argument {option}: {said}" in err and "_" not in err.splitlines()[-1]


def test_cli_keeps_compiled_programs_beside_the_data_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("M2L_NLP_CACHE", str(tmp_path))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)  # restored afterwards
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path / "jax")


def test_unusable_data_is_an_error_message_not_a_traceback(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # runs/default of the repository is not this test's
    assert cli.main(["train", "--data", str(tmp_path / "missing.tar.gz")]) == 2
    captured = capsys.readouterr()
    assert "does not exist" in captured.err and "devices:" not in captured.out
    (tmp_path / "bad.tar.gz").write_bytes(b"not an archive")
    args = ["train", "--data", str(tmp_path / "bad.tar.gz"), "--cache-dir", str(tmp_path)]
    assert cli.main(args) == 2
    assert "is not a .tar or .tar.gz archive" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.tar.gz"]  # no runs/, no lock


@pytest.mark.parametrize(
    "command", [["predict", "great film"], ["generate", "The film"], ["translate", "I love you."]]
)
def test_reading_a_missing_checkpoint_says_what_to_do(command, tmp_path, capsys):
    assert cli.main([*command, "--checkpoint", str(tmp_path / "none")]) == 2
    assert "m2l-nlp train" in capsys.readouterr().err


def test_training_unfinished_exercises_says_what_to_do(tmp_path, capsys):
    # exercises/ holds the generated stubs (make test checks that they match solutions/)
    args = ["train", "--impl", "exercises", "--data", "small", "--preset", "demo"]
    args += ["--no-progress", "--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path)]
    assert cli.main(args) == 2
    err = capsys.readouterr().err
    assert "not implemented yet" in err and "--impl solutions" in err
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("model", ["transformer", "bow-mlp"])
def test_an_unfinished_exercise_is_named_before_the_run_folder_and_the_data(
    tmp_path, capsys, model
):
    """A student whose earlier run sits in --out hears first which exercise is left, not that
    the folder needs --overwrite; no data is prepared and the earlier run is left as it was."""
    earlier = tmp_path / "run"
    earlier.mkdir()
    (earlier / "metrics.json").write_text("{}")
    cache = tmp_path / "cache"
    args = ["train", "--impl", "exercises", "--data", "small", "--model", model]
    args += ["--no-progress", "--out", str(earlier), "--cache-dir", str(cache)]
    assert cli.main(args) == 2
    captured = capsys.readouterr()
    first = "sinusoidal_encoding" if model == "transformer" else "multi_hot"
    assert f"{first}: not implemented yet" in captured.err
    assert "--overwrite" not in captured.err and "data prepared" not in captured.out
    assert not cache.exists()
    assert [f.name for f in earlier.iterdir()] == ["metrics.json"]


def test_grade_forwards_to_the_grader(monkeypatch):
    seen = {}

    def fake_main(argv):
        seen["argv"] = list(argv)
        return 3

    import m2l_nlp.grading.local.cli as grading_cli

    monkeypatch.setattr(grading_cli, "main", fake_main)
    assert cli.main(["grade", "-m", "classifier", "--impl", "solutions"]) == 3
    assert seen["argv"] == ["-m", "classifier", "--impl", "solutions"]


@pytest.mark.slow
def test_train_then_predict_on_the_small_dataset(tmp_path, capsys, monkeypatch):
    """`--data small` alone trains the demo preset into runs/demo, never over runs/default;
    predict names the checkpoint it reads."""
    monkeypatch.chdir(tmp_path)
    args = ["train", "--data", "small", "--epochs", "1", "--no-progress"]
    assert cli.main([*args, "--cache-dir", str(tmp_path / "cache")]) == 0
    out = tmp_path / "runs" / "demo"
    assert not (tmp_path / "runs" / "default").exists()
    printed = capsys.readouterr().out
    assert "preset demo:" in printed
    assert "epoch 1/1" in printed and "test accuracy" in printed and "true pos" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert sum(map(sum, metrics["confusion"])) == 500  # every test review counted once
    assert 0.0 <= metrics["test_accuracy"] <= 1.0 and metrics["preset"] == "demo"
    assert metrics["compiled_programs"] > 0 and "XLA programs" in printed
    assert len(metrics["history"]["loss"]) == 1
    checkpoint = ("manifest.json", "params.npz", "tokenizer.json", "bigrams.npy", "meta.json")
    for name in (
        "training_curves.png",
        "confusion_matrix.png",
        *(f"checkpoint/{f}" for f in checkpoint),
    ):
        assert (out / name).is_file(), name
    assert cli.main(["predict", "I loved it"]) == 2  # no runs/default/checkpoint here
    assert "runs/default/checkpoint" in capsys.readouterr().err
    review = tmp_path / "review.txt"
    review.write_text("A long review.\n" * 5000, encoding="utf-8")  # beyond the argument limit
    command = ["predict", "I loved it", "--file", str(review), "--checkpoint"]
    assert cli.main([*command, str(out / "checkpoint")]) == 0
    said = capsys.readouterr()
    assert "note: review 2 ('A long review." in said.err and "review 1" not in said.err
    lines = said.out.strip().splitlines()
    assert lines[0].startswith(f"checkpoint: {out / 'checkpoint'} (preset demo, impl solutions")
    assert len(lines) == 3 and all("p(positive)=" in line for line in lines[1:])


def test_help_texts_state_every_default(capsys):
    for command in (["train"], ["predict"]):
        with pytest.raises(SystemExit):
            cli.main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        for option in ("--impl", "--seed", "--checkpoint"):
            if option in text:
                start = text.rindex(option + " ")  # the option list, not the usage line
                assert "default" in text[start : start + 400], option
    assert "runs/default/checkpoint" in text  # predict's default checkpoint is stated
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    lines = capsys.readouterr().out.splitlines()
    for name, preset in cli.PRESETS.items():  # every preset is described
        assert any(line.split()[:2] == [name, preset.description.split()[0]] for line in lines)
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "``" not in capsys.readouterr().out


def test_grade_help_is_the_graders_own(capsys):
    assert cli.main(["grade", "--help"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("usage: m2l-nlp grade") and "--results-json" in text
    assert len(text.splitlines()) < 30


def test_module_entry_point_runs():
    import subprocess

    proc = subprocess.run(
        [sys.executable, "-m", "m2l_nlp.cli", "--help"], capture_output=True, text=True
    )
    assert proc.returncode == 0 and "train" in proc.stdout


@pytest.mark.slow
def test_val_size_zero_trains_on_the_whole_split_and_bad_sizes_are_refused(tmp_path, capsys):
    common = ["train", "--data", "small", "--preset", "demo", "--epochs", "1", "--no-progress"]
    common += ["--cache-dir", str(tmp_path / "cache")]
    out = tmp_path / "run"
    assert cli.main([*common, "--val-size", "0", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert " 0 validation " in printed and "val_acc" not in printed
    history = json.loads((out / "metrics.json").read_text())["history"]
    assert set(history) == {"loss", "train_acc"}
    assert cli.main([*common, "--val-size", "100000", "--out", str(out), "--overwrite"]) == 2
    assert "leaves nothing to train on" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        cli.main([*common, "--val-size", "-5"])
    assert "must be 0 or more" in capsys.readouterr().err
    # refused before the data load: a missing archive is not even looked at
    missing = ["train", "--data", str(tmp_path / "missing.tar.gz"), "--no-test"]
    assert cli.main([*missing, "--val-size", "0"]) == 2
    assert "--no-test needs a validation split" in capsys.readouterr().err


@pytest.mark.slow
def test_final_fit_run_says_so_and_has_no_validation_history(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--data", "small", "--preset", "demo", "--epochs", "1", "--no-progress"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert cli.main([*args, "--set", "final_fit=true"]) == 0
    printed = capsys.readouterr().out
    assert " 0 validation " in printed and "final fit: the 50 validation reviews" in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["history"]) == {"loss", "train_acc"} and metrics["best_epoch"] == 1
    assert cli.main([*args, "--set", "final_fit=true", "--val-size", "50", "--overwrite"]) == 0
    printed = capsys.readouterr().out
    assert " 50 validation " in printed and "final fit" not in printed


@pytest.mark.slow
def test_no_test_run_reports_validation_only(tmp_path, capsys):
    out = tmp_path / "run"
    args = ["train", "--data", "small", "--preset", "demo", "--epochs", "1", "--no-progress"]
    args += ["--cache-dir", str(tmp_path / "cache"), "--out", str(out)]
    assert cli.main([*args, "--no-test", "--set", "train.crop_len=64"]) == 0
    printed = capsys.readouterr().out
    assert "changed: train.crop_len=64" in printed and "test accuracy" not in printed
    metrics = json.loads((out / "metrics.json").read_text())
    assert "test_accuracy" not in metrics and metrics["changed"] == ["train.crop_len=64"]
    assert len(metrics["history"]["val_acc"]) == 1
    assert 0.0 <= metrics["val_accuracy"] <= 1.0
    assert not (out / "checkpoint").exists()
    assert cli.main([*args, "--set", "train.crop_len=0"]) == 2
    assert "crop_len" in capsys.readouterr().err
    assert cli.main([*args, "--no-test", "--val-size", "0"]) == 2
    assert "needs a validation split" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--set", "vocab_size=-5"], "vocab_size must be at least 6"),
        (["--set", "seq_len=0"], "seq_len must be at least 1"),
        (["--set", "bigram_tokens=-1"], "bigram_tokens must be at least 0"),
        (["--set", "final_fit=1"], "final_fit must be true or false"),
        (["--set", "train.epochs=2.5"], "epochs must be a whole number, not 2.5"),
        (["--set", "train.learning_rate=abc"], "learning_rate must be a finite number, not 'abc'"),
        (["--set", "model.d_model=32.0"], "d_model must be a whole number"),
        (["--set", "vocab_size=abc"], "vocab_size must be a whole number, not 'abc'"),
        (["--set", "seq_len=null"], "seq_len must be a whole number, not None"),
        (["--set", "val_size=2.5"], "val_size must be a whole number, not 2.5"),
        (["--set", "train.learning_rate=NaN"], "learning_rate must be a finite number, not nan"),
        (["--set", "train.learning_rate=Infinity"], "learning_rate must be a finite number"),
        (["--set", "train.learning_rate=1e400"], "learning_rate must be a finite number, not inf"),
        (["--set", "embed_scale=-Infinity"], "embed_scale must be a finite number, not -inf"),
        (["--set", "model.num_heads=0"], "num_heads must be at least 1, not 0"),
        (["--set", "model.num_layers=0"], "num_layers must be at least 1, not 0"),
        (["--set", "model.p_dropout=1"], "p_dropout must be in [0, 1), not 1"),
        (["--set", "train.warmup_fraction=1.5"], "warmup_fraction must be in [0, 1], not 1.5"),
        (["--set", "train.final_lr_fraction=-0.1"], "final_lr_fraction must be in [0, 1]"),
        (["--set", "train.weight_decay=-1"], "weight_decay must be >= 0 (0: off), not -1"),
        (["--set", "train.seed=-1"], "seed must be at least 0, not -1"),
        (["--model", "bow-mlp", "--set", "model.hidden_sizes=[64, 0]"], "hidden_sizes must be"),
        (["--out", "FILE"], "is a file, not a folder: choose another folder with --out"),
        (["--cache-dir", "FILE"], "choose another folder with --cache-dir"),
        (["--model", "lstm", "--preset", "demo"], "--model lstm and --preset demo: give one"),
        (["--model", "transformer", "--preset", "lstm"], "--preset lstm is a baseline"),
        (["--model", "bow-mlp", "--set", "model.d_model=64"], "unknown key 'model.d_model'"),
        (["--model", "bow-mlp", "--out", "FILE"], "choose another folder with --out"),
    ],
)
def test_bad_settings_are_refused_before_the_data_is_read(tmp_path, capsys, extra, message):
    """Each is an error message (exit status 2) and not a traceback after minutes of work:
    the data source is an empty folder, so reading it would be another error."""
    (tmp_path / "FILE").write_text("not a folder")
    (tmp_path / "not-imdb").mkdir()
    extra = [str(tmp_path / "FILE") if e == "FILE" else e for e in extra]
    args = ["train", "--data", str(tmp_path / "not-imdb"), "--no-progress"]
    assert cli.main([*args, "--cache-dir", str(tmp_path / "cache"), *extra]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("option", ["--epochs", "--seed"])
def test_counts_must_not_be_negative(capsys, option):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(["train", option, "-2"])
    assert exit_info.value.code == 2
    assert f"argument {option}: must be" in capsys.readouterr().err


def test_ctrl_c_is_a_message_and_status_130(monkeypatch, capsys):
    def interrupted(_args):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "cmd_predict", interrupted)
    assert cli.main(["predict", "fine"]) == 130
    assert "interrupted" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "stdin", "message"),
    [
        (["   "], b"", "review 1 is empty"),
        (["--file", "-"], b"\n\t", "error: standard input is empty"),
        (["--file", "-"], "caf\xe9".encode("latin-1"), "error: standard input is not UTF-8 text"),
        (["--file", "MISSING"], b"", "cannot read MISSING"),
        ([], b"", "nothing to read"),
        (["caf\udce9"], b"", "review 1 is not valid UTF-8"),  # bytes the shell passed as-is
        (
            ["--file", "-", "--max-mb", "1"],
            b"x" * (10**6 + 1),
            "standard input is larger than 1 MB",
        ),
    ],
)
def test_text_that_cannot_be_scored_is_one_line(monkeypatch, capsys, given, stdin, message):
    """Checked before any checkpoint is read: one line, status 2, no traceback."""
    import io

    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(stdin)))
    assert cli.main(["predict", *given, "--checkpoint", "no-such-checkpoint"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and len(err.splitlines()) == 1


def test_a_full_disk_is_one_line(monkeypatch, capsys, tmp_path):
    def no_space(_args):
        raise OSError(28, "No space left on device", str(tmp_path / "run"))

    monkeypatch.setattr(cli, "cmd_train", no_space)
    assert cli.main(["train"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: No space left on device") and len(err.splitlines()) == 1


def test_an_existing_run_or_the_users_files_are_refused_before_the_data_is_read(tmp_path, capsys):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.csv").write_text("mine")
    (tmp_path / "not-imdb").mkdir()  # reading it would be another error
    args = ["train", "--data", str(tmp_path / "not-imdb"), "--out", str(out)]
    assert cli.main([*args, "--overwrite"]) == 2
    assert "not an m2l-nlp run" in capsys.readouterr().err
    assert (out / "precious.csv").read_text() == "mine"


@pytest.mark.slow
def test_a_run_whose_loss_stops_being_finite_keeps_the_old_run_and_its_last_finite_epoch(
    tmp_path, capsys, monkeypatch
):
    """The loss turns NaN in epoch 2 (the step's sums are poisoned once epoch 1 is kept): exit
    1, one line that says to lower the learning rate, the old run untouched, epoch 1 kept."""
    import jax.numpy as jnp

    from m2l_nlp.runs import folders as runs
    from m2l_nlp.train import loop as training

    out = tmp_path / "out"
    with runs.open_run(out) as folder:  # a good run already there
        folder.commit(lambda new: (new / "metrics.json").write_text('{"good": 1}'), {})
    real = training._make_epoch_step
    poisoned = {"on": True}

    def make_step(*args):
        step = real(*args)

        def run(state, sums, *rest):
            state, sums, at = step(state, sums, *rest)
            kept = runs.RunFolder(out).read_progress()
            return state, sums * jnp.nan if kept and poisoned["on"] else sums, at

        return run

    monkeypatch.setattr(training, "_make_epoch_step", make_step)
    args = ["train", "--data", "small", "--epochs", "2", "--no-progress", "--out", str(out)]
    args += ["--cache-dir", str(tmp_path / "cache")]
    assert cli.main([*args, "--overwrite"]) == 1
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "loss became nan in epoch 2" in err
    assert "try a lower learning rate" in err and "epoch 1 of 2 is kept" in err
    assert json.loads((out / "metrics.json").read_text()) == {"good": 1}
    poisoned["on"] = False
    assert cli.main([*args, "--resume"]) == 0
    assert "resuming after epoch 1 of 2" in capsys.readouterr().out
    assert len(json.loads((out / "metrics.json").read_text())["history"]["loss"]) == 2


def test_a_model_with_the_wrong_output_shape_is_refused_before_training(tmp_path):
    """A classifier giving (B, 1) instead of (B,) once trained to "train_acc 8.0968" and a
    test accuracy of 0.5; now one line names the shape and the exercise, exit 2, no run."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    repo = tmp_path / "repo"
    shutil.copytree(root / "solutions", repo / "exercises", ignore=shutil.ignore_patterns("hidden"))
    path = repo / "exercises" / "practical2_transformers.py"
    text = path.read_text()
    right = (
        '    return TransformerClassifier(config or ClassifierConfig(), name="classifier")(\n'
        "        input_ids, mask, is_train\n    )\n"
    )
    assert right in text
    wrong = right.replace("    return ", "    logits = ") + "    return logits[:, None]\n"
    path.write_text(text.replace(right, wrong, 1))
    env = {**os.environ, "M2L_ROOT": str(repo)}
    command = ["train", "--data", "small", "--impl", "exercises", "--out", str(tmp_path / "run")]
    run = subprocess.run(
        [sys.executable, "-m", "m2l_nlp.cli", *command, "--no-progress"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stdout[-2000:] + run.stderr[-2000:]
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert "shape (2, 1)" in run.stderr and "shape (2,)" in run.stderr
    assert "pytest -m classifier" in run.stderr
    assert not (tmp_path / "run").exists()


def test_grade_prints_no_pytest_warning():
    import subprocess

    run = subprocess.run(
        [sys.executable, "-m", "m2l_nlp.cli", "grade", "-m", "multi_hot", "-rw"],
        capture_output=True,
        text=True,
        timeout=300,
        env={k: v for k, v in os.environ.items() if k != "M2L_IMPL"},
    )
    assert "score" in run.stdout and "warning" not in (run.stdout + run.stderr).lower()


def test_a_local_results_json_says_how_long_the_checks_took(tmp_path):
    import subprocess

    out = tmp_path / "results.json"
    command = ["grade", "-m", "multi_hot", "--impl", "solutions", "--results-json", str(out)]
    subprocess.run(
        [sys.executable, "-m", "m2l_nlp.cli", *command], capture_output=True, timeout=300
    )
    data = json.loads(out.read_text())
    assert data["execution_time"] > 0 and data["tests"][0]["execution_time"] > 0


def test_an_error_in_the_students_code_while_training_names_file_line_and_hint(tmp_path):
    """A sub-module not given is_train asks for a random key in evaluation: haiku's raw line
    once; now the file, the line and the grader's hint."""
    import shutil
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    repo = tmp_path / "repo"
    shutil.copytree(root / "solutions", repo / "exercises", ignore=shutil.ignore_patterns("hidden"))
    path = repo / "exercises" / "practical2_transformers.py"
    text = path.read_text()
    assert "x = self.encoder(x, mask, is_train)" in text
    path.write_text(
        text.replace("x = self.encoder(x, mask, is_train)", "x = self.encoder(x, mask)")
    )
    command = ["train", "--data", "small", "--impl", "exercises", "--out", str(tmp_path / "run")]
    run = subprocess.run(
        [sys.executable, "-m", "m2l_nlp.cli", *command, "--no-progress"],
        env={**os.environ, "M2L_ROOT": str(repo)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr and run.stderr.count("\n") == 1, run.stderr
    assert "practical2_transformers.py, line" in run.stderr
    # The line named is the call that dropped the flag, not the dropout inside the sub-module.
    assert "x = self.encoder(x, mask)" in run.stderr, run.stderr
    assert "this line calls a sub-module without is_train" in run.stderr


def test_a_run_says_first_whose_modules_it_trains(tmp_path, capsys, monkeypatch):
    """A forgotten --impl exercises silently trained the reference: the run's first line
    now says which modules it trains (the data load is stopped here: nothing is trained)."""
    from m2l_nlp.data import pipeline
    from m2l_nlp.data.imdb_archive import DataError

    def stop(*args, **kwargs):
        raise DataError("stopped before the data")

    monkeypatch.setattr(pipeline, "prepare_for", stop)
    args = ["train", "--data", "small", "--impl", "solutions", "--no-progress"]
    args += ["--out", str(tmp_path / "run"), "--cache-dir", str(tmp_path / "cache")]
    assert cli.main(args) == 2
    first = capsys.readouterr().out.splitlines()[0]
    assert first == "model: solutions/ (the reference; --impl exercises trains yours)"


def test_predict_prints_a_long_review_without_splitting_all_of_it(tmp_path, capsys, monkeypatch):
    """The line printed for a review split the whole text into words: 640 MB for a 50 MB
    file. Now its memory is about twice the file (read, decoded); the scoring is left out."""
    import tracemalloc
    from types import SimpleNamespace

    import numpy as np

    from m2l_nlp.runs import checkpoint

    monkeypatch.setattr(checkpoint, "load_checkpoint", lambda *a: SimpleNamespace(meta={}))
    monkeypatch.setattr(checkpoint, "predict", lambda texts, *a, **k: np.full(len(texts), 0.9))
    monkeypatch.setattr(cli, "_cut_notes", lambda texts, checkpoint: [])  # tested on its own
    command = ["predict", "--checkpoint", str(tmp_path), "--file"]
    review = tmp_path / "review.txt"
    review.write_text("A short one.", encoding="utf-8")
    assert cli.main([*command, str(review)]) == 0  # what it imports is not counted below
    size = 4 * 10**6
    review.write_text("A long review.\n" * (size // 15), encoding="utf-8")
    tracemalloc.start()
    try:
        assert cli.main([*command, str(review)]) == 0
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 4 * size, f"{peak / 1e6:.0f} MB for a {size / 1e6:.0f} MB review"
    shown = "A long review. A long review. A long review. A long revie..."
    assert capsys.readouterr().out.splitlines()[-1] == f"positive  p(positive)=0.900  {shown!r}"


@pytest.mark.parametrize("command", ["generate", "translate"])
def test_practical_3s_help_states_every_default(command, capsys):
    """Every option and argument of `generate` and `translate` that has a default says it,
    generate's prompt included."""
    sub = next(a for a in cli._parser()._actions if a.dest == "command").choices[command]
    for action in sub._actions:
        if action.default not in (None, False, [], "==SUPPRESS==") and action.dest != "help":
            assert "default" in (action.help or ""), action.dest
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    if command == "generate":
        assert "(default: 'The film')" in " ".join(capsys.readouterr().out.split())


@pytest.fixture(scope="module")
def char_lm(tmp_path_factory):
    """A tiny character language model's checkpoint, at its initialisation, that has seen
    only a few characters."""
    from m2l_nlp.config import TransformerConfig
    from m2l_nlp.data.characters import CharVocab
    from m2l_nlp.model.language_models import init_params, language_model
    from m2l_nlp.runs.checkpoint import LANGUAGE_MODEL, save_checkpoint

    config = TransformerConfig(
        vocab_size=10, num_layers=1, num_heads=2, d_model=8, d_ff=16, p_dropout=0.0, max_len=24
    )
    folder = tmp_path_factory.mktemp("char-lm") / "checkpoint"
    params = init_params(language_model(config, "solutions")[0], 0, config.max_len)
    vocab = CharVocab(" Thefilm")  # ids 2 to 9
    return str(save_checkpoint(folder, LANGUAGE_MODEL, params, config, vocab))


@pytest.mark.slow
def test_generate_notes_characters_the_model_never_saw(char_lm, capsys):
    assert cli.main(["generate", "--checkpoint", char_lm, "--max-chars", "4"]) == 0
    said = capsys.readouterr()
    assert said.out.startswith("The film") and "note:" not in said.err  # the default prompt
    assert cli.main(["generate", "--checkpoint", char_lm, "The film¡ßx", "--max-chars", "4"]) == 0
    said = capsys.readouterr()
    (note,) = [line for line in said.err.splitlines() if line.startswith("note:")]
    assert note == (
        "note: the model never saw '¡', 'ß', 'x' in training: it reads each as one unknown "
        "character"
    )
    assert cli.main(["generate", "--checkpoint", char_lm, "x" * 30]) == 2
    assert "shorten the prompt to at most 23 characters" in capsys.readouterr().err


def test_predict_notes_a_review_longer_than_the_model_reads():
    """The classifier reads its first max_len tokens: a longer review is scored on them
    alone, which predict now says, with how many words that is."""
    from types import SimpleNamespace

    from tokenizers import Tokenizer, models, pre_tokenizers

    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "good": 1, "film": 2}, "[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.enable_truncation(4)  # as a checkpoint's may be: the count must not stop there
    checkpoint = SimpleNamespace(config=SimpleNamespace(max_len=8), tokenizer=tokenizer)
    long = " ".join(["good film."] * 1000)  # 3 tokens a time
    huge = "good " * 10**6  # beyond what is tokenised to count
    notes = cli._cut_notes(["good film", "a " * 8, long, huge], checkpoint)
    assert notes == [
        "review 3 ('good film. good film. good ...') is longer than the model reads: only its "
        "first 8 tokens, 6 of its 2000 words, are scored",
        "review 4 ('good good good good good go...') is longer than the model reads: only its "
        "first 8 tokens, 8 of its 1000000 words, are scored",
    ]


def test_a_missing_exercise_file_is_named_not_blamed_on_the_disk(tmp_path, capsys, monkeypatch):
    """A practical's file that is not there was once told "free some space or fix the
    permissions": now the message that names the file and the folder to run from."""
    (tmp_path / "exercises").mkdir()
    monkeypatch.setenv("M2L_ROOT", str(tmp_path))
    out = str(tmp_path / "run")
    code = cli.main(["train", "--data", "small", "--impl", "exercises", "--out", out])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1, err
    assert "practical2_transformers.py does not exist" in err
    assert "free some space" not in err
