"""Tests of m2l_nlp.grading.local.pytest_plugin: pytest in a subprocess on a copy of the
repository (the score table, exit codes, ``results.json``, import errors and timeouts,
parallel workers refused, programs kept on disk), as ``python -m m2l_nlp.grading`` runs it
too; the notes on failing earlier exercises of its Grader; and the one-line refusal of an
XLA flag XLA does not know (tests/conftest.py's, which a student's run loads).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import m2l_nlp
from m2l_nlp.authoring import stubs
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    outcome,
    reference,
)
from m2l_nlp.impl import repo_root

ROOT = repo_root()


def _copy_repo(tmp_path: Path, exercises_from_solutions: bool) -> Path:
    root = tmp_path / "repo"
    (root / "tests").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", root / "pyproject.toml")
    shutil.copy(ROOT / "tests" / "conftest.py", root / "tests" / "conftest.py")
    shutil.copytree(ROOT / "tests" / "graded", root / "tests" / "graded")
    shutil.copytree(ROOT / "solutions", root / "solutions")
    if exercises_from_solutions:
        shutil.copytree(ROOT / "solutions", root / "exercises")
    else:
        args = ["--solutions", str(root / "solutions"), "--exercises", str(root / "exercises")]
        assert stubs.main(args) == 0
    return root


def _pytest(
    root: Path, *args: str, extra_modules: str = "", impl: str = "", runner: str = "pytest"
) -> subprocess.CompletedProcess:
    package_home = Path(m2l_nlp.__file__).resolve().parent.parent  # the code under test
    path = os.pathsep.join([str(root), str(package_home), os.environ.get("PYTHONPATH", "")])
    env = dict(os.environ, M2L_ROOT=str(root), PYTHONPATH=path)
    env.pop("M2L_IMPL", None)
    if impl:
        env["M2L_IMPL"] = impl
    if extra_modules:
        env["M2L_GRADING_MODULES"] = extra_modules
    cmd = [sys.executable, "-m", runner, "-q", "-p", "no:cacheprovider", *args]
    cwd = root if runner == "pytest" else root.parent  # the grading entry point finds the root
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def test_fresh_stubs_are_all_not_started(tmp_path):
    root = _copy_repo(tmp_path, exercises_from_solutions=False)
    run = _pytest(root, "--results-json", "results.json")
    assert run.returncode != 0, run.stdout
    table = run.stdout.split("score (exercises/)")[1]
    for name in load_exercises():
        row = next(line for line in table.splitlines() if line.strip().startswith(name + " "))
        assert "not started" in row, row
    data = json.loads((root / "results.json").read_text())
    assert data["score"] == 0
    assert {t["name"] for t in data["tests"]} == set(load_exercises())
    assert all(t["status"] == "failed" and t["score"] == 0 for t in data["tests"])


@pytest.mark.slow
def test_solutions_as_exercises_get_full_points(tmp_path):
    root = _copy_repo(tmp_path, exercises_from_solutions=True)
    cheap = "scaled_dot_product or positional_encoding"
    run = _pytest(root, "-m", cheap, "--results-json", "r.json")
    assert run.returncode == 0, run.stdout + run.stderr
    data = json.loads((root / "r.json").read_text())
    assert data["score"] == 15 + 15
    assert all(t["status"] == "passed" and t["score"] == t["max_score"] for t in data["tests"])
    n = len(load_exercises())
    assert f"scaled_dot_product, positional_encoding passed; {n - 2} exercises not graded" in (
        run.stdout
    )
    # again, over the file it wrote, named the other way (an absolute path)
    again = _pytest(root, "-m", "scaled_dot_product", "--results-json", str(root / "r.json"))
    assert again.returncode == 0, again.stdout + again.stderr
    assert json.loads((root / "r.json").read_text())["score"] == 15


@pytest.mark.slow
def test_import_error_and_timeout_are_reported(tmp_path):
    root = _copy_repo(tmp_path, exercises_from_solutions=True)
    (root / "fake_checks.py").write_text(
        textwrap.dedent(
            """\
            from m2l_nlp.grading.checks.registry import exercise
            from m2l_nlp.grading.checks.tools import expect_close

            spin = exercise("spin", "practical8_spin", 3, targets=("spin",))
            fine = exercise("fine", "practical8_spin", 1, targets=("fine",))
            broken = exercise("broken", "practical9_broken", 2, targets=("ok",))


            @spin.check
            def check_spin(ctx):
                expect_close(ctx.student.spin(1.0), 1.0, "spin(1.0)")


            @spin.check
            def check_spin_again(ctx):
                expect_close(ctx.student.spin(2.0), 1.0, "spin(2.0)")


            @fine.check
            def check_fine(ctx):
                expect_close(ctx.student.fine(), 1.0, "fine()")


            @broken.check
            def check_ok(ctx):
                expect_close(ctx.student.ok(), 1.0, "ok()")
            """
        )
    )
    solution = "def {f}(*args):\n    # BEGIN SOLUTION\n    return 1.0\n    # END SOLUTION\n"
    (root / "solutions" / "practical8_spin.py").write_text(
        solution.format(f="spin") + "\n\n" + solution.format(f="fine")
    )
    (root / "solutions" / "practical9_broken.py").write_text(solution.format(f="ok"))
    (root / "exercises" / "practical8_spin.py").write_text(
        "def spin(x):\n    while True:\n        x = x + 1\n\n\ndef fine():\n    return 1.0\n"
    )
    (root / "exercises" / "practical9_broken.py").write_text("def ok():\n    return (1.0\n")
    run = _pytest(
        root,
        "-m",
        "spin or fine or broken",
        "--grade-timeout",
        "2",
        "--results-json",
        "r.json",
        extra_modules="fake_checks",
    )
    out = run.stdout
    assert run.returncode != 0, out
    assert out.count("syntax error") == 1, out
    assert "practical9_broken.py, line 2: syntax error" in out
    assert "stopped after 2 s" in out
    tests = {t["name"]: t for t in json.loads((root / "r.json").read_text())["tests"]}
    assert tests["fine"]["status"] == "passed"  # the other practical is still graded
    assert tests["spin"]["status"] == "failed" and "stopped after 2 s" in tests["spin"]["output"]
    # the exercise's second check is not run at all: one hang costs its time once
    assert "not run: an earlier check of this exercise was stopped" in tests["spin"]["output"]
    assert tests["spin"]["output"].count("stopped after 2 s") == 1
    assert tests["broken"]["status"] == "failed" and tests["broken"]["output"].startswith(
        "**error**"
    )


def test_grading_entry_point_and_impl_env(tmp_path):
    """`python -m m2l_nlp.grading` (what `m2l-nlp grade` calls) with M2L_IMPL=solutions."""
    root = _copy_repo(tmp_path, exercises_from_solutions=False)
    run = _pytest(root, "-m", "scaled_dot_product", impl="solutions", runner="m2l_nlp.grading")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "score (solutions/)" in run.stdout and "15 / 15" in run.stdout


def test_graded_checks_refuse_parallel_workers(tmp_path):
    """Under pytest-xdist an undone exercise (a skip in a worker) would not fail the run: a
    run of graded checks alone is refused in one line before any worker starts."""
    pytest.importorskip("xdist")
    root = _copy_repo(tmp_path, exercises_from_solutions=False)
    run = _pytest(root, "-m", "scaled_dot_product", "-n", "2")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR, run.stdout + run.stderr
    assert "graded checks cannot run in parallel workers" in run.stderr
    assert "bringing up nodes" not in run.stdout + run.stderr  # no worker was started


@pytest.mark.slow
def test_graded_checks_among_other_tests_refuse_parallel_workers(tmp_path):
    """Other tests beside them: the workers start, and each graded check fails in them."""
    pytest.importorskip("xdist")
    root = _copy_repo(tmp_path, exercises_from_solutions=True)
    (root / "tests" / "test_other.py").write_text("def test_other():\n    pass\n")
    run = _pytest(root, "tests", "-m", "scaled_dot_product or not graded", "-n", "2")
    assert run.returncode != 0
    assert "1 passed" in run.stdout and "graded checks cannot run in parallel" in run.stdout


@pytest.mark.parametrize(
    ("where", "args", "advice"),
    [
        ("exercises", [], "run pytest from the repository root"),
        (".", ["-m", "multihead"], "nothing matched your selection"),
    ],
)
def test_a_run_that_grades_nothing_says_how_to_select(where, args, advice):
    """Run from exercises/ (no tests there) or with a marker typo: say why, list the names."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args],
        cwd=ROOT / where,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, proc.stdout[-2000:]
    assert f"no graded check ran: {advice}" in proc.stdout, proc.stdout[-2000:]
    assert "multihead_attention" in proc.stdout


@pytest.mark.parametrize(
    ("flags", "status"),
    [
        ("--xla_m2l_nlp_no_such_flag=1", pytest.ExitCode.USAGE_ERROR),
        ("--xla_force_host_platform_device_count=1", pytest.ExitCode.OK),
    ],
)
def test_a_flag_that_xla_does_not_know_is_named_in_one_line(flags, status):
    """XLA ends a process at a flag it does not know, and pytest's capture would hide its
    message: a student's run names the flag in one line before any check starts. A flag XLA
    knows changes nothing."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-m", "tfidf", "--co", "-q"],
        cwd=ROOT,
        env=dict(os.environ, XLA_FLAGS=flags),
        capture_output=True,
        text=True,
        timeout=300,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == status, out[-2000:]
    assert ("ERROR: XLA_FLAGS names --xla_m2l_nlp_no_such_flag=1," in proc.stderr) == bool(status)
    assert "Traceback" not in out


def test_a_graded_run_keeps_its_programs_on_disk_for_the_next_run(tmp_path, monkeypatch):
    """A student's `pytest -m <exercise>` stores its compiled programs in the data cache, so
    that the next run loads them; the library tests' own temporary folder does not take over."""
    root = _copy_repo(tmp_path, exercises_from_solutions=True)
    cache = tmp_path / "cache"
    monkeypatch.setenv("M2L_NLP_CACHE", str(cache))
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR", raising=False)  # as a student has it
    run = _pytest(root, "-m", "scaled_dot_product")
    assert run.returncode == 0, run.stdout + run.stderr
    assert len(list((cache / "jax").glob("*"))) >= 5  # the checks' programs, each a file


@pytest.mark.slow  # records the reference's answers to two exercises first
def test_a_note_names_a_failing_earlier_exercise_the_run_did_not_select(
    tmp_path, monkeypatch, _module_from, _mutate, SOLUTION, P2
):
    """As in a handout (recorded answers; the student's own scaled_dot_product called),
    `pytest -m multihead_attention` alone, with a wrong scaled_dot_product, is told to fix
    that first: scaled_dot_product is graded quietly, and stays out of the score table."""
    from m2l_nlp.grading.checks.expected import Replay
    from m2l_nlp.grading.local import pytest_plugin
    from m2l_nlp.grading.trusted.recording import record

    module = _module_from(_mutate(SOLUTION, "/ math.sqrt(d_k)", ""), tmp_path)
    catalog = load_exercises()
    graded = {name: catalog[name] for name in ("scaled_dot_product", "multihead_attention")}
    records = json.loads(json.dumps(record(graded, P2, reference(P2)).records))
    monkeypatch.setattr(pytest_plugin, "reference", lambda practical: Replay(records))
    grader = pytest_plugin.Grader("exercises")
    grader.modules[P2] = module
    for chk in catalog["multihead_attention"].checks:
        try:
            grader.run("multihead_attention", chk.name)
            err = None
        except Exception as caught:  # noqa: BLE001 - its verdict is what is tested
            err = caught
        verdict = outcome(err, {module.__file__})
        grader.record("multihead_attention", CheckResult("multihead_attention", chk.name, *verdict))
    [result] = grader.exercise_results()
    assert result.status == "failed"
    assert result.note.startswith(
        "note: this exercise calls your scaled_dot_product, and scaled_dot_product fails: "
        "fix that first"
    ), result.note
    assert list(grader.quiet) == ["scaled_dot_product"]
    assert grader.quiet["scaled_dot_product"].status == "failed"


def test_an_import_error_is_told_once_at_the_graded_files_line(monkeypatch):
    """A practical that cannot be imported is reported at its own file's line (where the
    graded implementation lives), and each exercise of it then says it was not graded."""
    from m2l_nlp.grading.checks.runner import PracticalError
    from m2l_nlp.grading.local import pytest_plugin

    grader = pytest_plugin.Grader("exercises")
    path = repo_root() / "exercises" / "practical2_transformers.py"
    assert grader.path_of("practical2_transformers") == path

    def fails_at_line_2(practical, impl):
        exec(compile("x = 1\nx / 0\n", str(path), "exec"), {})

    monkeypatch.setattr(pytest_plugin, "load_practical", fails_at_line_2)
    with pytest.raises(PracticalError, match="could not be imported, so this exercise"):
        grader.student("practical2_transformers")
    [said] = grader.import_errors()
    assert said.startswith(f"{path}, line 2: ZeroDivisionError"), said


def test_earlier_work_graded_quietly_stops_at_its_first_failing_check(
    tmp_path, _module_from, _apply, SOLUTION, P2
):
    from m2l_nlp.grading.local import pytest_plugin

    grader = pytest_plugin.Grader("exercises")
    grader.modules[P2] = _module_from(SOLUTION, tmp_path)
    passed = grader.grade_quietly("scaled_dot_product")
    checks = load_exercises()["scaled_dot_product"].checks
    assert passed.status == "passed" and len(passed.checks) == len(checks) > 1

    grader = pytest_plugin.Grader("exercises")
    grader.modules[P2] = _module_from(
        _apply(("scaled_dot_product", "scores not divided")), tmp_path
    )
    failed = grader.grade_quietly("scaled_dot_product")
    assert failed.status == "failed" and failed.checks[-1].status == "failed"
    assert all(c.status == "passed" for c in failed.checks[:-1])
    assert len(failed.checks) < len(checks)  # nothing after the first failure ran
    assert grader.results == {}  # quiet: nothing recorded for the score table
