"""End to end: the student handout (no solutions/) still grades the exercises, from the
reference's recorded answers, with the same messages as the full repository."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.trusted.bundle import HANDOUT_MARK, BundleError, handout

ROOT = Path(__file__).resolve().parent.parent
REPOSITORY = "https://github.com/teacher-7f3a/course"


def _hidden_names() -> list[str]:
    """The course's hidden exercises."""
    from m2l_nlp.grading.checks.catalog import load_hidden

    return load_hidden()


def _grade(folder: Path, tmp_path: Path, name: str) -> tuple[dict, str]:
    """``pytest`` in ``folder`` as a student runs it: ``(results.json, terminal output)``."""
    results = tmp_path / f"{name}.json"
    env = {k: v for k, v in os.environ.items() if k not in ("M2L_ROOT", "M2L_IMPL")}
    env["PYTHONPATH"] = str(folder)  # this folder's m2l_nlp, not the repository's
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--results-json",
            str(results),
        ],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return json.loads(results.read_text()), run.stdout


@pytest.mark.slow
def test_handout_grades_without_solutions(tmp_path):
    mine = tmp_path / "mine"  # never written over a folder it did not write
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(BundleError, match="was not written by `make handout`"):
        handout(mine, ROOT, REPOSITORY)
    assert (mine / "notes.txt").read_text() == "keep"

    out = handout(tmp_path / "handout", ROOT, REPOSITORY)
    assert (out / HANDOUT_MARK).is_file() and not (out / "solutions").exists()
    _the_readme_names_only_what_the_handout_holds(out)
    _make_test_grades_the_exercises(out)
    _a_rebuild_keeps_git_and_refuses_foreign_files(out)
    hidden = _hidden_names()
    assert hidden  # the course has hidden checks, and nothing in the handout names them
    for path in out.rglob("*"):
        if path.is_file():
            text = path.read_bytes()
            if path.suffix == ".gz":
                text = gzip.decompress(text)
            assert not any(name.encode() in text for name in hidden), path
    assert "[hidden.points]\npractical2_transformers = 10" in (out / "grading.toml").read_text()
    assert not list(out.glob("notebooks/*_solved.ipynb"))
    practicals = dict.fromkeys(ex.practical for ex in load_exercises().values())
    for practical in practicals:
        records = out / "m2l_nlp" / "grading" / "checks" / "expected"
        assert (records / f"{practical}.json.gz").is_file()

    stubs, _ = _grade(out, tmp_path, "stubs")
    assert stubs["score"] == 0
    assert all(t["output"].startswith("**not started**") for t in stubs["tests"])

    for practical in practicals:  # the student's file in place of the stub
        text = (ROOT / "solutions" / f"{practical}.py").read_text()
        if practical == "practical2_transformers":
            text = text.replace(") / math.sqrt(d_k)", ")")  # one slip
        (out / "exercises" / f"{practical}.py").write_text(text)
    graded, terminal = _grade(out, tmp_path, "slip")
    tests = {t["name"]: t for t in graded["tests"]}
    assert tests["scaled_dot_product"]["score"] == 0
    assert "without dividing the scores" in tests["scaled_dot_product"]["output"]
    assert "fix that first" in tests["multihead_attention"]["output"]  # its own sdp is used
    notebook = (  # a notebook's check() says the same
        "import importlib.util\n"
        "path = 'exercises/practical2_transformers.py'\n"
        "spec = importlib.util.spec_from_file_location('p2', path)\n"
        "module = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(module)\n"
        "from m2l_nlp.grading import check\n"
        "print(check('multihead_attention', module.MultiheadAttention, verbose=False).note)\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("M2L_ROOT", "M2L_IMPL")}
    said = subprocess.run(
        [sys.executable, "-c", notebook],
        cwd=out,
        env={**env, "PYTHONPATH": str(out)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "calls your scaled_dot_product" in said.stdout, said.stdout + said.stderr[-2000:]
    assert tests["positional_encoding"]["score"] == tests["positional_encoding"]["max_score"]
    total = sum(ex.points for ex in load_exercises().values())  # the public exercises
    assert f"{graded['score']:g} / {total:g}" in terminal
    # practical 3 runs on the student's own practical 2 here (no reference in a handout)
    assert tests["causal_mask"]["score"] == tests["causal_mask"]["max_score"]
    assert "fix that first" in tests["decoder_block"]["output"]
    assert "10 more points are graded by the autograder only" in terminal


def _the_readme_names_only_what_the_handout_holds(out: Path) -> None:
    """Every relative link and Colab link of the handout's README names a file it holds;
    no instructor's command, section or marker is left."""
    readme = (out / "README.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", readme)
    colab = f"https://colab.research.google.com/github/{REPOSITORY.removeprefix('https://github.com/')}/blob/main/"
    assert any(link.startswith(colab) for link in links)
    for link in links:
        if link.startswith(colab):
            assert (out / link.removeprefix(colab)).is_file(), link
        elif not link.startswith("https://"):
            assert (out / link.split("#")[0]).exists(), link
        else:
            assert link.startswith("https://colab.research.google.com/assets/"), link
    for gone in (
        "make solutions",
        "make exercises",
        "make autograder",
        "## Instructor",
        "## Contributor",
        "_solved.ipynb",
        "handout:",
        "docs/",
        "benchmarks/",
        ".ci/",
    ):
        assert gone not in readme, gone
    makefile = (out / "Makefile").read_text()
    for target in re.findall(r"^([a-z-]+):", makefile, flags=re.M):
        assert target in ("venv", "test", "train", "demo", "clean"), target
    assert f'Repository = "{REPOSITORY}"' in (out / "pyproject.toml").read_text()
    for notebook in out.glob("notebooks/*.ipynb"):
        assert REPOSITORY in notebook.read_text()


def _make_test_grades_the_exercises(out: Path) -> None:
    """`make test` in a copy of the handout prints the score table of the fresh stubs and
    exits non-zero, as its README says (this environment stands in for its .venv)."""
    venv = Path(sys.prefix)
    stamp = out.parent / "installed-stamp"  # newer than pyproject.toml: nothing to install
    stamp.touch()
    env = {k: v for k, v in os.environ.items() if k not in ("M2L_ROOT", "M2L_IMPL")}
    env["PYTHONPATH"] = str(out)
    run = subprocess.run(
        ["make", "test", f"VENV={venv}", f"STAMP={stamp}"],
        cwd=out,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode != 0 and "not started" in run.stdout, run.stdout[-2000:] + run.stderr
    from m2l_nlp.grading.checks.catalog import load_exercises

    total = sum(ex.points for ex in load_exercises().values())  # the public exercises
    assert f"0 / {total:g}" in run.stdout


def _a_rebuild_keeps_git_and_refuses_foreign_files(out: Path) -> None:
    (out / ".git").mkdir()
    (out / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (out / "notes.md").write_text("mine")
    with pytest.raises(BundleError, match=r"did not write \(notes\.md\)"):
        handout(out, ROOT, REPOSITORY)
    assert (out / "notes.md").read_text() == "mine"
    (out / "notes.md").unlink()
    with pytest.raises(BundleError, match="name the handout's own repository"):
        handout(out, ROOT, "https://github.com/m2l-nlp/m2l-nlp")


def test_handout_readme_and_makefile_markers():
    from m2l_nlp.grading.trusted.handout_docs import MarkerError, handout_makefile, handout_readme

    text = (
        "a\n<!-- handout: cut -->\nteacher\n<!-- handout: end cut -->\n"
        "<!-- handout only\nstudent\n-->\n<!-- B -->old<!-- E -->\n"
    )
    assert handout_readme(text, "<!-- B -->new<!-- E -->", "<!-- B -->", "<!-- E -->") == (
        "a\nstudent\n<!-- B -->new<!-- E -->\n"
    )
    with pytest.raises(MarkerError, match="not closed"):
        handout_readme(
            "<!-- handout: cut -->\nx\n<!-- B --><!-- E -->", "", "<!-- B -->", "<!-- E -->"
        )
    make = "all:\n# handout: cut\nlint:\n# handout: end cut\n# handout only: test:\n"
    assert handout_makefile(make) == "all:\ntest:\n"
    with pytest.raises(MarkerError, match="not closed"):
        handout_makefile("# handout: cut\n")
