"""End to end: the student handout (no solutions/) still grades the exercises, from the
reference's recorded answers, with the same messages as the full repository; a file that does
not parse is an error row there; the handout names only what it holds; a rebuild keeps what
its users made in it. The handout is built once for this file (``built``); a test that
changes it works on a copy."""

from __future__ import annotations

import ast
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from m2l_nlp.grading.checks import catalog
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.trusted import bundle
from m2l_nlp.grading.trusted.bundle import (
    HANDOUT_MARK,
    KEPT_IN_PLACE,
    BundleError,
    gitignored,
    handout,
    tracked_files,
)

ROOT = Path(__file__).resolve().parents[2]
REPOSITORY = "https://github.com/teacher-7f3a/course"
BROKEN = "\ndef broken(:\n"  # appended to a student's file: it no longer parses


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The handout, built once for this file's tests (minutes: the reference's answers are
    recorded); a test that changes it works on :func:`_copy`."""
    return handout(tmp_path_factory.mktemp("built") / "handout", ROOT, REPOSITORY)


def _copy(built: Path, tmp_path: Path, name: str = "handout") -> Path:
    copy = tmp_path / name
    shutil.copytree(built, copy, symlinks=True)
    return copy


def _env(folder: Path, **changes: str | None) -> dict[str, str]:
    """A student's environment in ``folder``: its own m2l_nlp, no instructor's settings."""
    env = {k: v for k, v in os.environ.items() if k not in ("M2L_ROOT", "M2L_IMPL")}
    env["PYTHONPATH"] = str(folder)  # this folder's m2l_nlp, not the repository's
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def _run(folder: Path, *args: str, **env: str | None) -> subprocess.CompletedProcess:
    """``python ARGS`` in ``folder`` as a student runs it there."""
    return subprocess.run(
        [sys.executable, *args],
        cwd=folder,
        env=_env(folder, **env),
        capture_output=True,
        text=True,
        timeout=600,
    )


CLI = ("-c", "import sys; from m2l_nlp.cli import main; sys.exit(main())")  # `m2l-nlp`


def _hidden_names() -> list[str]:
    """The course's hidden exercises."""
    from m2l_nlp.grading.checks.catalog import load_hidden

    return load_hidden()


def _grade(folder: Path, tmp_path: Path, name: str, *args: str) -> tuple[dict, str]:
    """``pytest`` in ``folder`` as a student runs it: ``(results.json, terminal output)``."""
    results = tmp_path / f"{name}.json"
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
            *args,
        ],
        cwd=folder,
        env=_env(folder),
        capture_output=True,
        text=True,
        timeout=600,
    )
    return json.loads(results.read_text()), run.stdout


def test_a_folder_the_handout_did_not_write_is_never_written_over(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    with pytest.raises(BundleError, match="was not written by `make handout`"):
        handout(mine, ROOT, REPOSITORY)
    assert (mine / "notes.txt").read_text() == "keep"


@pytest.mark.slow
def test_handout_grades_without_solutions(built, tmp_path):
    out = _copy(built, tmp_path)
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
    said = _run(out, "-c", notebook)
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
    run = _make_test(out)
    assert run.returncode != 0 and "not started" in run.stdout, run.stdout[-2000:] + run.stderr
    from m2l_nlp.grading.checks.catalog import load_exercises

    total = sum(ex.points for ex in load_exercises().values())  # the public exercises
    assert f"0 / {total:g}" in run.stdout


def _make_test(out: Path, *args: str) -> subprocess.CompletedProcess:
    """`make test` in the handout ``out`` (this environment stands in for its .venv)."""
    stamp = out.parent / "installed-stamp"  # newer than pyproject.toml: nothing to install
    stamp.touch()
    return subprocess.run(
        ["make", "test", f"VENV={sys.prefix}", f"STAMP={stamp}", *args],
        cwd=out,
        env=_env(out),
        capture_output=True,
        text=True,
        timeout=600,
    )


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


# --------------------------------------------------------------------------- errors as errors


def _error_row(stdout: str, exercise: str) -> str:
    """The score table's row of ``exercise``."""
    table = stdout.split("score (exercises/)")[-1]
    return next(line for line in table.splitlines() if line.strip().startswith(f"{exercise} "))


@pytest.mark.slow
def test_a_file_that_does_not_parse_is_an_error_row_in_a_built_handout(built, tmp_path):
    """`pytest`, `make test`, `m2l-nlp grade` and a notebook's check(): the file that does not
    parse is named with its line, the other practicals are graded (the catalog used to read
    the teaching order from exercises/ here, and pytest stopped with INTERNALERROR)."""
    out = _copy(built, tmp_path)
    path = out / "exercises" / "practical1_baselines.py"
    path.write_text(path.read_text() + BROKEN)
    line = path.read_text().count("\n")  # the line of `def broken(:`
    said = f"{path}, line {line}: syntax error"
    chosen = "multi_hot or scaled_dot_product"

    graded, terminal = _grade(out, tmp_path, "broken", "-m", chosen)
    assert "INTERNALERROR" not in terminal and said in terminal, terminal[-3000:]
    tests = {t["name"]: t for t in graded["tests"]}
    assert tests["multi_hot"]["output"].startswith("**error**"), tests["multi_hot"]
    assert said in graded["output"]
    assert tests["scaled_dot_product"]["output"].startswith("**not started**")  # still graded
    assert re.search(r"multi_hot\s+error\s+0/3", _error_row(terminal, "multi_hot"))

    run = _make_test(out, "PYTEST_ADDOPTS=-m '" + chosen + "'")
    assert run.returncode != 0 and "INTERNALERROR" not in run.stdout, run.stdout[-3000:]
    assert said in run.stdout and " error " in _error_row(run.stdout, "multi_hot")
    assert "not started" in _error_row(run.stdout, "scaled_dot_product")

    run = _run(out, "-m", "m2l_nlp.grading", "-m", chosen)  # what `m2l-nlp grade` runs
    assert run.returncode == 1 and said in run.stdout, run.stdout[-3000:] + run.stderr[-2000:]
    assert " error " in _error_row(run.stdout, "multi_hot")

    reference = tmp_path / "reference_p2.py"  # a notebook's correct cells, beside the handout
    reference.write_text((ROOT / "solutions" / "practical2_transformers.py").read_text())
    notebook = (
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('cells', {str(reference)!r})\n"
        "cells = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(cells)\n"
        "from m2l_nlp.grading import check\n"
        "print(check('scaled_dot_product', cells.scaled_dot_product, verbose=False).status)\n"
    )
    run = _run(out, "-c", notebook)
    assert run.returncode == 0 and run.stdout.strip() == "passed", run.stderr[-3000:]


def test_a_student_file_that_does_not_parse_keeps_the_teaching_order(tmp_path):
    """A handout orders exercises by exercises/ (it has no solutions/): a file that does not
    parse, or holds null bytes, gives the same order (read line by line), never an error."""
    shutil.copytree(ROOT / "exercises", tmp_path / "exercises")
    path = tmp_path / "exercises" / "practical2_transformers.py"
    order = list(catalog.collect(tmp_path))
    assert order == list(catalog.collect(ROOT))  # the stub's order is the solution's
    for damage in (BROKEN, "\0\n"):
        path.write_text((ROOT / "exercises" / "practical2_transformers.py").read_text() + damage)
        assert list(catalog.collect(tmp_path)) == order, repr(damage)


# --------------------------------------------------------------------------- names it holds

# What the handout's m2l_nlp may name that the handout lacks, and why. Only its string
# literals are read (comments and docstrings are the library's notes to its developers);
# every other file of the handout (README, Makefile, grading.toml, pyproject.toml,
# exercises, notebooks, tests) may name nothing it lacks.
BUILDER = "the instructor's handout and autograder builder: it refuses to run without solutions/"
GENERATOR = "an instructor's generator: it writes exercises/ or notebooks/ from solutions/"
ALLOWED = {
    ("m2l_nlp/authoring/notebooks.py", "make solutions"): GENERATOR,
    ("m2l_nlp/authoring/notebooks.py", "make exercises"): GENERATOR,
    ("m2l_nlp/authoring/notebooks.py", "solutions/"): GENERATOR,
    ("m2l_nlp/authoring/stubs.py", "solutions/"): GENERATOR,
    ("m2l_nlp/authoring/stubs.py", "make exercises"): GENERATOR,
    ("m2l_nlp/cli.py", "--impl solutions"): "said only where the copy holds solutions/ "
    "(the stub error's other way out; triggered below)",
    ("m2l_nlp/grading/checks/expected.py", "solutions/"): "said only where a copy holds "
    "neither the reference nor its recorded answers: a handout built wrong, for its instructor",
    ("m2l_nlp/grading/checks/expected.py", "make handout"): "the same message: the instructor "
    "rebuilds the handout",
    ("m2l_nlp/grading/checks/settings.py", "solutions/"): "the autograder's hidden checks' "
    "folder, read only where it exists",
    ("m2l_nlp/grading/local/cli.py", "exercises,solutions"): "the --impl line of "
    "`m2l-nlp grade --help`, printed only where the copy holds solutions/ (triggered below)",
    ("m2l_nlp/grading/local/pytest_plugin.py", "--impl solutions"): "the refusal of -n in the "
    "course repository; a handout's names no folder (triggered below)",
    ("m2l_nlp/grading/local/pytest_plugin.py", "exercises|solutions"): "the header's choice, "
    "printed only where the copy holds solutions/ (triggered below)",
    ("m2l_nlp/grading/trusted/bundle.py", "solutions/"): BUILDER,
    ("m2l_nlp/grading/trusted/bundle.py", "m2l_nlp/grading/classroom/"): BUILDER,
    ("m2l_nlp/grading/trusted/bundle.py", "solutions/hidden/"): BUILDER,
    ("m2l_nlp/grading/trusted/bundle.py", ".ci/"): BUILDER,
    ("m2l_nlp/grading/trusted/bundle.py", "benchmarks/"): BUILDER,
    ("m2l_nlp/grading/trusted/bundle.py", "docs/"): BUILDER,
    ("m2l_nlp/grading/trusted/bundle.py", "make handout"): BUILDER,
    ("m2l_nlp/grading/trusted/grader.py", "solutions/"): "the autograder, which runs where "
    "setup.sh installed solutions/",
    ("m2l_nlp/impl.py", "make exercises"): "said only where the copy holds solutions/ (an "
    "instructor's missing stub; the handout's form is triggered below)",
}


def _held(out: Path) -> set[str]:
    return {
        path.relative_to(out).as_posix()
        for path in out.rglob("*")
        if path.is_file()
        and path.relative_to(out).parts[0] not in KEPT_IN_PLACE
        and "__pycache__" not in path.parts
    }


def _targets(makefile: str) -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", makefile, flags=re.M))


def lacking(out: Path) -> re.Pattern[str]:
    """What the course repository holds and the handout ``out`` lacks, as one pattern: its
    files (by path, and by name where no file of the handout has that name), its folders,
    `make` targets, and the option that grades the reference."""
    have = _held(out)
    names = set()
    for name in set(tracked_files(ROOT)) - have:
        names.add(name)
        parts = name.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth]) + "/"
            if not any(h.startswith(folder) for h in have):
                names.add(folder)
        if len(parts) > 1 and "." in parts[-1]:
            if not any(h.rsplit("/", 1)[-1] == parts[-1] for h in have):
                names.add(parts[-1])
    alternatives = [re.escape(n) for n in sorted(names, key=len, reverse=True)]
    targets = _targets((ROOT / "Makefile").read_text()) - _targets((out / "Makefile").read_text())
    alternatives.append(
        "make (?:" + "|".join(sorted(map(re.escape, targets), key=len, reverse=True)) + r")\b(?!-)"
    )
    alternatives.append(r"--impl[^\w-]{1,12}solutions|M2L_IMPL=solutions")
    alternatives.append(r"exercises\|solutions|exercises,solutions")
    return re.compile(r"(?<![\w./-])(?:" + "|".join(alternatives) + ")")


def _printable(path: Path) -> list[str]:
    """The string literals of a module of ``m2l_nlp``, docstrings left out."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                docstrings.add(id(first.value))
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def _named_but_lacking(out: Path) -> dict[tuple[str, str], str]:
    """``{(file, name): the text}`` for every name of what the handout lacks in its text
    (the m2l_nlp modules' string literals; every other file whole)."""
    pattern, found = lacking(out), {}
    for path in sorted(out.rglob("*")):
        rel = path.relative_to(out)
        if not path.is_file() or rel.parts[0] in KEPT_IN_PLACE or "__pycache__" in rel.parts:
            continue
        if rel.parts[0] == "m2l_nlp":  # the library: what it prints
            if path.suffix != ".py":
                continue  # recorded answers, the autograder's scripts and version lists
            texts = _printable(path)
        else:
            texts = [path.read_text(encoding="utf-8")]
        for text in texts:
            for match in pattern.finditer(text):
                found.setdefault((rel.as_posix(), match.group()), text[:200])
    return found


@pytest.mark.slow
def test_the_handout_names_only_what_it_holds(built, tmp_path):
    """Its files, and the messages a student meets there (each triggered here), name no file,
    folder, make target or option that the handout lacks; what its library may name is
    listed in ALLOWED, each with its reason."""
    found = _named_but_lacking(built)
    assert set(found) - set(ALLOWED) == set(), found
    assert set(ALLOWED) - set(found) == set(), "ALLOWED lists what no longer needs it"
    for name in ("benchmarks/generation.py", "solutions/", "make autograder", "docs/"):
        assert lacking(built).search(f"see {name}"), name  # the grep sees what it looks for

    out = _copy(built, tmp_path)
    pattern, said = lacking(out), {}
    run = _run(out, "-m", "pytest", "-p", "no:cacheprovider", "-m", "multi_hot")
    said["pytest"] = run.stdout + run.stderr
    assert f"m2l-nlp grader: grading {out}/exercises/\n" in run.stdout  # its whole path
    run = _run(out, "-m", "pytest", "--help")
    said["pytest --help"] = run.stdout.split("m2l-nlp auto-grader")[1].split("\n\n")[0]
    assert "--impl={exercises}" in said["pytest --help"], said["pytest --help"]
    said["grade --help"] = _run(out, "-m", "m2l_nlp.grading", "--help").stdout
    assert "-m EXERCISE" in said["grade --help"]
    for command in ("train", "predict", "generate", "translate"):
        said[f"{command} --help"] = _run(out, *CLI, command, "--help").stdout
        assert "--impl {exercises}" in said[f"{command} --help"], said[f"{command} --help"]
    run = _run(out, *CLI, "train", "--data", "small", "--impl", "exercises", "--out", "runs/t")
    said["train on the stubs"] = run.stderr
    assert run.returncode == 2 and "finish the exercises first" in run.stderr, run.stderr[-2000:]
    run = _run(out, *CLI, "train", "--data", "small", "--impl", "solutions")
    assert run.returncode == 2 and "invalid choice: 'solutions'" in run.stderr, run.stderr
    assert not (out / "data" / "cache").exists()  # refused before any data was prepared
    run = _run(out, "-m", "pytest", "-p", "no:cacheprovider", "-m", "multi_hot", "-n", "2")
    said["pytest -n 2"] = run.stderr
    assert run.returncode == pytest.ExitCode.USAGE_ERROR and "without -n" in run.stderr
    grade = ("-m", "pytest", "-p", "no:cacheprovider", "-m", "multi_hot")
    run = _run(out, *grade, M2L_IMPL="solutions")
    assert run.returncode == pytest.ExitCode.USAGE_ERROR and "has no solutions/" in run.stderr
    run = _run(out, *CLI, "class", "grade", "export.zip")  # the instructor's, left out
    said["class grade"] = run.stderr
    assert run.returncode == 2 and "the class commands are the instructor's" in run.stderr
    assert not (out / "m2l_nlp" / "grading" / "classroom").exists()
    (out / "exercises" / "practical1_baselines.py").unlink()  # a student's file gone
    run = _run(out, "-m", "pytest", "-p", "no:cacheprovider", "-m", "multi_hot")
    said["pytest, a file gone"] = run.stdout
    assert "practical1_baselines.py does not exist" in run.stdout, run.stdout[-2000:]
    for what, text in said.items():
        assert not pattern.search(text), (what, pattern.search(text).group(), text[-2000:])


# --------------------------------------------------------------------------- rebuilt after a run


def test_gitignored_reads_the_course_gitignore_as_git_does():
    paths = [
        "data/cache/jax/program",
        "data/cache/imdb-prepared-0a1b/tokens.npy",
        "data/aclImdb/train/pos/1_9.txt",
        "data/small/train/pos/1_9.txt",
        "data/README.md",
        "data/make_small.py",
        "runs/demo/checkpoint/params.npz",
        "exercises/runs/x",  # /runs/ is the top folder only
        "results.json",
        "notebooks/results.json",
        "m2l_nlp.egg-info/PKG-INFO",
        ".venv/bin/python",
        "notes.md",
        "exercises/practical1_baselines.py",
        "exercises/__pycache__/x.pyc",
    ]
    git = shutil.which("git")
    if git is None or not (ROOT / ".git").exists():
        pytest.skip("git and the course's checkout tell what git ignores")
    said = subprocess.run(
        [git, "check-ignore", "--no-index", "--stdin"],
        cwd=ROOT,
        input="\n".join(paths),
        capture_output=True,
        text=True,
    ).stdout.split()
    ignored = gitignored((ROOT / ".gitignore").read_text())
    assert [p for p in paths if ignored(p)] == said
    assert "data/cache/jax/program" in said and "notes.md" not in said


@pytest.mark.slow
def test_a_rebuild_after_runs_in_the_handout_keeps_what_they_made(tmp_path, monkeypatch):
    """What a student's runs leave in the handout (its .venv, runs/, the git-ignored caches
    and downloads under data/) moves into the rebuilt one, never refused; a file of its own
    outside them still is. An unchanged pyproject.toml keeps its date (make installs again
    only when it changed). The reference's answers are not recorded here (minutes; the
    built-handout tests record them)."""
    from m2l_nlp.grading.checks import expected
    from m2l_nlp.grading.trusted import recording

    monkeypatch.setattr(recording, "record", lambda *args: None)
    monkeypatch.setattr(expected, "save", lambda *args: None)
    out = handout(tmp_path / "handout", ROOT, REPOSITORY)
    made = {
        ".venv/bin/python": "venv",
        "runs/demo/checkpoint/params.npz": "run",
        "data/cache/jax/program": "compiled",
        "data/cache/imdb-prepared-0a1b/tokens.npy": "prepared",
        "data/aclImdb/README": "downloaded",
        "m2l_nlp.egg-info/PKG-INFO": "installed",
        "results.json": "{}",
    }
    for name, text in made.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(text)
    (out / "exercises" / "__pycache__").mkdir(exist_ok=True)
    (out / "exercises" / "__pycache__" / "x.pyc").write_text("dropped")
    (out / "exercises" / "practical1_baselines.py").write_text("# my work\n")  # the handout's
    old = (out / "pyproject.toml").stat().st_mtime_ns - 10**10
    os.utime(out / "pyproject.toml", ns=(old, old))

    assert handout(out, ROOT, REPOSITORY) == out
    assert {name: (out / name).read_text() for name in made} == made
    assert not (out / "exercises" / "__pycache__").exists()
    assert (out / "exercises" / "practical1_baselines.py").read_text() == (
        ROOT / "exercises" / "practical1_baselines.py"
    ).read_text()  # the handout's own file is written again
    assert (out / "pyproject.toml").stat().st_mtime_ns == old
    assert not list(tmp_path.glob(".handout*"))  # no temporary folder left

    (out / "exercises" / "helper.py").write_text("mine")  # not ignored: the instructor's to place
    with pytest.raises(BundleError, match=r"did not write \(exercises/helper\.py\)"):
        handout(out, ROOT, REPOSITORY)
    assert (out / "exercises" / "helper.py").read_text() == "mine"


@pytest.mark.slow
def test_a_graded_run_in_a_built_handout_leaves_only_what_a_rebuild_keeps(built, tmp_path):
    """A real run: grading keeps its compiled programs under data/cache/ (git-ignored), which
    the next `make handout` used to refuse ("commit them to the course repository")."""
    out = _copy(built, tmp_path)
    (out / "exercises" / "practical1_baselines.py").write_text(  # work done: programs compiled
        (ROOT / "solutions" / "practical1_baselines.py").read_text()
    )
    env = {"JAX_COMPILATION_CACHE_DIR": None, "M2L_NLP_CACHE": None}  # a student's defaults
    run = _run(out, "-m", "pytest", "-m", "multi_hot", **env)
    assert "score (exercises/)" in run.stdout, run.stdout[-2000:] + run.stderr[-2000:]
    assert any((out / "data" / "cache").rglob("*")), "the run cached nothing"
    kept, foreign = bundle._made_there(out)
    assert foreign == [] and "data/cache" in kept
    bundle._check_replaceable(out)  # not refused


@pytest.mark.slow
def test_the_header_names_the_folder_graded_by_its_whole_path(built, tmp_path):
    """An m2l_nlp installed from one copy grades that copy, wherever pytest runs: the header
    names it by its whole path, and says so when pytest runs in another copy."""
    one, other = _copy(built, tmp_path, "one"), _copy(built, tmp_path, "other")
    pytest_script = Path(sys.executable).with_name("pytest")  # not `python -m`: no cwd on path
    run = subprocess.run(
        [str(pytest_script), "-p", "no:cacheprovider", "-m", "multi_hot"],
        cwd=other,
        env=_env(one),  # one's m2l_nlp, as an install shared between two copies
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert f"m2l-nlp grader: grading {one}/exercises/\n" in run.stdout, run.stdout[-2000:]
    assert f"m2l-nlp grader: not {other}/exercises/: the m2l_nlp imported is that of {one}" in (
        run.stdout
    )
