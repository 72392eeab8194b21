"""The bundles' checks of the hidden exercises (m2l_nlp/grading/trusted/bundle.py), made
before a class sees them (the handout's own README and Makefile: tests/e2e/)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from m2l_nlp.grading.trusted import bundle
from m2l_nlp.grading.trusted.bundle import BundleError, hidden_points

ROOT = Path(__file__).resolve().parents[3]

HEADER = """
from m2l_nlp.grading.checks.registry import exercise
from m2l_nlp.grading.checks.tools import fail, grading_seed
"""


def _root(tmp_path: Path, hidden: str) -> Path:
    (tmp_path / "solutions" / "hidden").mkdir(parents=True)
    (tmp_path / "solutions" / "hidden" / "practical2_transformers.py").write_text(HEADER + hidden)
    return tmp_path


def test_a_hidden_exercise_with_a_public_name_is_refused_naming_both(tmp_path):
    root = _root(
        tmp_path,
        'ex = exercise("positional_encoding", "practical2_transformers", 5, '
        '("PositionalEncoding",), hidden=True)\n',
    )
    with pytest.raises(BundleError, match="hidden exercise 'positional_encoding' has the name"):
        hidden_points(root)


def test_a_hidden_exercise_that_targets_an_unknown_name_is_refused(tmp_path):
    root = _root(
        tmp_path,
        'ex = exercise("hidden_x", "practical2_transformers", 5, ("NoSuchLayer",), hidden=True)\n'
        "@ex.check(gate=True)\ndef check_x(ctx):\n    pass\n",
    )
    with pytest.raises(BundleError, match="targets 'NoSuchLayer', which solutions/practical2"):
        hidden_points(root, seeds=5)


def test_a_hidden_check_the_reference_fails_on_a_grading_seed_is_refused(tmp_path):
    """It passes on the local seed 0 (as pytest would run it), fails on any other."""
    root = _root(
        tmp_path,
        'ex = exercise("hidden_y", "practical2_transformers", 5, ("scaled_dot_product",), '
        "hidden=True)\n"
        "@ex.check(gate=True)\ndef check_y(ctx):\n    if grading_seed() != 0:\n"
        '        fail("only at seed 0")\n',
    )
    assert hidden_points(root) == {"practical2_transformers": 5.0}  # importing alone passes
    with pytest.raises(BundleError, match=r"fails the hidden check hidden_y/y on grading seed"):
        hidden_points(root, seeds=5)


def test_a_reference_that_fails_at_grading_names_no_hidden_check_to_students(tmp_path, monkeypatch):
    from m2l_nlp.grading.trusted import grader

    def reference_pass(*args, **kwargs):
        raise grader.GraderBroken("the reference fails hidden_y/y: inputs (2, 3)")

    monkeypatch.setenv("M2L_GRADER_USER", "root")
    monkeypatch.setattr(grader, "reference_pass", reference_pass)
    (tmp_path / "submission").mkdir()  # a practical's file: its reference is then needed
    shutil.copy2(ROOT / "exercises" / "practical2_transformers.py", tmp_path / "submission")
    results = tmp_path / "results.json"
    logged = []  # the hidden log (main() prints it, and exits 1)
    with pytest.raises(grader.GraderBroken):
        grader.grade([(tmp_path / "submission", results)], log=logged.append)
    said = json.loads(results.read_text())["output"]
    assert "hidden_y" not in said and "instructor has the details" in said
    assert any("hidden_y" in line for line in logged)


def test_an_exercise_whose_gates_leave_a_target_uncovered_is_refused(tmp_path):
    root = _root(
        tmp_path,
        'ex = exercise("hidden_z", "practical2_transformers", 5, '
        '("scaled_dot_product", "MultiheadAttention"), hidden=True)\n'
        '@ex.check(gate=True, covers=("scaled_dot_product",))\ndef check_z(ctx):\n    pass\n',
    )
    with pytest.raises(BundleError, match="'hidden_z': no gate check compares MultiheadAttention"):
        hidden_points(root)


def test_gates_chosen_in_grading_toml_must_cover_every_target(tmp_path):
    (tmp_path / "grading.toml").write_text('[gates]\nmulti_hot = ["mh_shape_dtype"]\n')
    with pytest.raises(BundleError, match="'multi_hot': no gate check compares multi_hot"):
        hidden_points(tmp_path)


def test_make_autograder_refuses_a_gate_that_compares_nothing_in_one_line(
    tmp_path, monkeypatch, capsys
):
    """A shapes check as the only gate: uniform attention would pass it."""
    (tmp_path / "solutions").mkdir()
    (tmp_path / "grading.toml").write_text('[gates]\nmultihead_attention = ["mha_shapes"]\n')
    monkeypatch.setattr(bundle, "repo_root", lambda: tmp_path)
    monkeypatch.setenv("XLA_FLAGS", os.environ.get("XLA_FLAGS", ""))  # main adds to it
    zip_path = tmp_path / "autograder.zip"
    assert bundle.main(["autograder", str(zip_path)]) == 1
    said = capsys.readouterr().err
    assert said.startswith(
        "error: the exercise 'multihead_attention': no gate check compares MultiheadAttention"
    )
    assert said.count("\n") == 1 and "Traceback" not in said
    assert not zip_path.exists()


def test_the_files_of_a_course_are_gits_own_list_or_else_all_but_caches(tmp_path):
    """In a checkout: tracked files and new ones git does not ignore; elsewhere (a copy
    without .git): every file but the caches, environments and runs."""
    for name in ("a.py", "lib/b.py", "notes.log", "runs/x/metrics.json", ".venv/bin/python"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(name)
    (tmp_path / "lib" / "__pycache__").mkdir()
    (tmp_path / "lib" / "__pycache__" / "b.pyc").write_bytes(b"")
    assert bundle.tracked_files(tmp_path) == ["a.py", "lib/b.py", "notes.log"]

    (tmp_path / ".gitignore").write_text("*.log\nruns/\n.venv/\n__pycache__/\n")
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-C", str(tmp_path)]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "a.py", ".gitignore"], check=True)
    subprocess.run([*git, "commit", "-qm", "first"], check=True)
    (tmp_path / "a.py").unlink()  # tracked but gone: not a file to bundle
    assert bundle.tracked_files(tmp_path) == [".gitignore", "lib/b.py"]


def test_gitignore_patterns_are_read_as_git_reads_them():
    ignored = bundle.gitignored(
        "# a comment\n*.pyc\n/build\ndocs/*.tmp\nruns/\n!keep.pyc\ncache/\n!cache/wanted\n"
    )
    assert ignored("x.pyc") and ignored("deep/x.pyc") and not ignored("keep.pyc")
    assert ignored("build") and ignored("build/out.txt") and not ignored("src/build")
    assert ignored("docs/a.tmp") and not ignored("other/docs/a.tmp")
    assert ignored("runs", folder=True) and ignored("runs/x/metrics.json")
    assert not ignored("runs")  # a file called runs: the rule is for folders
    assert ignored("cache/wanted")  # in an ignored folder, whatever a later ! says
    assert not ignored("src/main.py")
