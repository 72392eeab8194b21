"""The README's recipe for a new practical, followed in a scratch copy of the repository: its
solution file, its checks where practicals live, a mutant and a correct variant where mutants
live, then `make solutions` (twice: it stops once to have the generated files committed) and
`pytest`.
No other file is edited. The files added are in tests/e2e/new_practical/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FILES = ROOT / "tests" / "e2e" / "new_practical"
ADDED = {  # where each file of tests/e2e/new_practical/ goes
    "solutions/practical9_demo.py": "practical9_demo.py",
    "m2l_nlp/grading/practicals/practical9/checks.py": "checks.py",
    "tests/mutants/practical9_demo.py": "mutants.py",
}

pytestmark = pytest.mark.slow


def _git(copy: Path, *args: str) -> str:
    identity = ["-c", "user.name=instructor", "-c", "user.email=instructor@example.org"]
    done = subprocess.run(
        ["git", *identity, *args], cwd=copy, capture_output=True, text=True, check=True
    )
    return done.stdout


def _venv() -> Path:
    """The environment the copy's `make` reuses (``$VENV``, else this interpreter's)."""
    venv = Path(os.environ.get("VENV") or Path(sys.executable).parent.parent)
    if not (venv / ".installed-stamp").is_file():
        pytest.skip(f"{venv} was not set up by `make venv` (no .installed-stamp)")
    return venv


def _make(copy: Path, *args: str) -> subprocess.CompletedProcess:
    venv = _venv()
    # the copy's pyproject.toml older than the environment's stamp: `make` must not reinstall
    # the course into that environment from the copy (it would then import the copy's)
    os.utime(copy / "pyproject.toml", (0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("M2L_ROOT", "M2L_IMPL")}
    # the graded suite of the new practical's exercise only: the others are make test's
    env["PYTEST_ADDOPTS"] = "-k self_attention"
    return subprocess.run(
        ["make", *args, f"VENV={venv}"], cwd=copy, env=env, capture_output=True, text=True
    )


def _course_copy(tmp_path: Path) -> Path:
    """This working tree's files (tests/e2e/new_practical/ aside), as a repository of its own."""
    copy = tmp_path / "course"
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file() and not name.startswith("tests/e2e/new_practical/"):
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    _git(copy, "init", "-q")
    _git(copy, "add", "-A")
    _git(copy, "commit", "-qm", "the course")
    return copy


def test_a_practical_is_added_in_one_place(tmp_path):
    copy = _course_copy(tmp_path)

    for target, source in ADDED.items():
        (copy / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(FILES / source, copy / target)
    (copy / "m2l_nlp/grading/practicals/practical9/__init__.py").write_text('"""Practical 9."""\n')

    first = _make(copy, "solutions")
    assert first.returncode != 0, first.stdout[-3000:] + first.stderr[-3000:]
    passed = re.search(r"practical9_demo\n  self_attention\s+passed\s+1/1", first.stdout)
    assert passed, first.stdout
    assert "review and commit them, then run make solutions again" in first.stdout
    _git(copy, "add", "-A")
    touched = _git(copy, "diff", "--cached", "--name-status", "HEAD").split("\n")
    _git(copy, "commit", "-qm", "practical 9")
    again = _make(copy, "solutions")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]

    # exactly the files written by hand, and what `make solutions` generated from them
    generated = {
        "M\tREADME.md",  # the notebooks' Colab links
        "M\texercises/.generated.json",
        "A\texercises/practical9_demo.py",
        "A\tnotebooks/practical9_demo.ipynb",
        "A\tnotebooks/practical9_demo_solved.ipynb",
    }
    by_hand = {f"A\t{t}" for t in ADDED} | {"A\tm2l_nlp/grading/practicals/practical9/__init__.py"}
    assert set(filter(None, touched)) == generated | by_hand

    env = {k: v for k, v in os.environ.items() if k not in ("M2L_ROOT", "M2L_IMPL")}
    graded = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/graded"]
        + ["tests/grading/practicals/test_mutants.py", "-k", "self_attention"],
        cwd=copy,
        env={**env, "PYTHONPATH": str(copy)},
        capture_output=True,
        text=True,
    )
    # the stub is graded (not started), the mutant is caught and the variant passes
    assert re.search(r"self_attention\s+not started\s+0/1\s+0 / 5", graded.stdout), graded.stdout
    assert "2 passed, 1 skipped" in graded.stdout, graded.stdout[-3000:]
    where = subprocess.run(
        [sys.executable, "-c", "import m2l_nlp; print(m2l_nlp.__file__)"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    ).stdout
    assert where.startswith(str(ROOT)), where  # this environment still runs this repository


# a kind of run: its module (new), and the three files it touches, each with the one change
KIND_MODULE = "m2l_nlp/runs/majority.py"
TOUCHED = {
    "m2l_nlp/config.py": "its config and preset",
    "m2l_nlp/runs/kinds.py": "its entry in the registry of kinds",
    "m2l_nlp/cli.py": "its command",
}


def test_a_kind_of_run_is_added_in_three_files(tmp_path):
    """A toy task with its own run, checkpoint and command: one new module and one change
    in each of three files. It trains through `m2l-nlp train` (run folder, loop,
    checkpoint), its command reads its checkpoint, and `predict` given that checkpoint
    names the toy's command in one line."""
    copy = _course_copy(tmp_path)
    shutil.copy2(FILES / "majority.py", copy / KIND_MODULE)
    with open(copy / "m2l_nlp/config.py", "a") as config:
        config.write((FILES / "config_addition.txt").read_text())
    with open(copy / "m2l_nlp/runs/kinds.py", "a") as kinds:
        kinds.write('\nKIND_MODULES["majority"] = ("m2l_nlp.runs.majority", ("majority",))\n')
    cli = copy / "m2l_nlp/cli.py"
    before = "KIND_COMMANDS: tuple[str, ...] = ()"
    assert before in cli.read_text()
    cli.write_text(cli.read_text().replace(before, 'KIND_COMMANDS = ("m2l_nlp.runs.majority",)'))

    _git(copy, "add", "-A")
    changed = set(filter(None, _git(copy, "diff", "--cached", "--name-status", "HEAD").split("\n")))
    assert changed == {f"M\t{name}" for name in TOUCHED} | {f"A\t{KIND_MODULE}"}

    env = {k: v for k, v in os.environ.items() if k not in ("M2L_ROOT", "M2L_IMPL")}

    def m2l_nlp(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "m2l_nlp.cli", *args],
            cwd=copy,
            env={**env, "PYTHONPATH": str(copy)},
            capture_output=True,
            text=True,
        )

    out = tmp_path / "run"
    trained = m2l_nlp("train", "--preset", "majority", "--out", str(out), "--no-progress")
    assert trained.returncode == 0, trained.stdout[-3000:] + trained.stderr[-3000:]
    accuracy = float(re.search(r"test accuracy: ([0-9.]+)", trained.stdout).group(1))
    assert accuracy > 0.8, trained.stdout  # a bag of digits counts them
    manifest = (out / "checkpoint" / "manifest.json").read_text()
    assert '"kind": "majority"' in manifest
    counted = m2l_nlp("majority", "--checkpoint", str(out / "checkpoint"), "1101111", "0001000")
    assert counted.stdout.splitlines() == ["1101111: 1s win", "0001000: 0s win"], counted
    refused = m2l_nlp("predict", "--checkpoint", str(out / "checkpoint"), "a fine film")
    assert refused.returncode == 2 and len(refused.stderr.splitlines()) == 1, refused.stderr
    assert "`m2l-nlp majority --checkpoint" in refused.stderr
