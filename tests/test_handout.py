"""End to end: the student handout (no solutions/) still grades the exercises, from the
reference's recorded answers, with the same messages as the full repository."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from m2l_nlp.grading.trusted.bundle import HANDOUT_MARK, BundleError, handout

ROOT = Path(__file__).resolve().parent.parent
PRACTICALS = ("practical1_baselines", "practical2_transformers")

pytestmark = pytest.mark.slow


def _hidden_names() -> list[str]:
    """The course's hidden exercises, read in a process of their own (once imported, they
    stay registered)."""
    code = "from m2l_nlp.grading.checks.catalog import load_hidden\n"
    code += "print('\\n'.join(load_hidden()))\n"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return out.stdout.split()


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


def test_handout_grades_without_solutions(tmp_path):
    mine = tmp_path / "mine"  # never written over a folder it did not write
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(BundleError, match="was not written by `make handout`"):
        handout(mine, ROOT)
    assert (mine / "notes.txt").read_text() == "keep"

    out = handout(tmp_path / "handout", ROOT)
    assert (out / HANDOUT_MARK).is_file() and not (out / "solutions").exists()
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
    for practical in PRACTICALS:
        records = out / "m2l_nlp" / "grading" / "checks" / "expected"
        assert (records / f"{practical}.json.gz").is_file()

    stubs, _ = _grade(out, tmp_path, "stubs")
    assert stubs["score"] == 0
    assert all(t["output"].startswith("**not started**") for t in stubs["tests"])

    for practical in PRACTICALS:  # the student's file in place of the stub
        text = (ROOT / "solutions" / f"{practical}.py").read_text()
        if practical == "practical2_transformers":
            text = text.replace(") / math.sqrt(d_k)", ")")  # one slip
        (out / "exercises" / f"{practical}.py").write_text(text)
    graded, terminal = _grade(out, tmp_path, "slip")
    tests = {t["name"]: t for t in graded["tests"]}
    assert tests["scaled_dot_product"]["score"] == 0
    assert "without dividing the scores" in tests["scaled_dot_product"]["output"]
    assert "fix that first" in tests["multihead_attention"]["output"]  # its own sdp is used
    assert tests["positional_encoding"]["score"] == tests["positional_encoding"]["max_score"]
    assert f"{graded['score']:g} / 170" in terminal
    assert "10 more points are graded by the autograder only" in terminal
