"""End to end: the Gradescope bundle installed in a fresh folder grades honest, partial, broken
and hanging submissions, and the tricks that fooled the in-process grader earn nothing.

As on Gradescope, ``setup.sh`` installs the library into the ``python3`` on ``PATH`` (here a
virtual environment made from the system Python, in a folder every user can read) and
``run_autograder`` grades ``$AUTOGRADER_ROOT/submission``. Run as root, student code runs as
the unprivileged user ``nobody``.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

import pytest

from m2l_nlp.grading.bundle import autograder

ROOT = Path(__file__).resolve().parent.parent
P1, P2 = "practical1_baselines", "practical2_transformers"
FULL = 170

pytestmark = pytest.mark.slow


def _python_for_everyone() -> str:
    """A ``python3`` that the unprivileged user can run too (pyenv's may sit under /root)."""
    if os.geteuid() != 0:
        return sys.executable
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        probe = subprocess.run(
            ["runuser", "-u", "nobody", "--", candidate, "-c", "import venv"],
            capture_output=True,
        )
        if probe.returncode == 0:
            return candidate
    pytest.skip("no python3 that user nobody may run (the autograder drops to that user)")


@pytest.fixture(scope="module")
def installed():
    """``(autograder root, env)``: the bundle unpacked and ``setup.sh`` run, as on Gradescope."""
    base = Path(tempfile.mkdtemp(prefix="m2l-autograder-", dir="/tmp"))
    base.chmod(0o755)
    try:
        root = base / "autograder"
        source = root / "source"
        source.mkdir(parents=True)
        with zipfile.ZipFile(autograder(base / "autograder.zip", ROOT)) as zf:
            zf.extractall(source)
        for script in ("setup.sh", "run_autograder"):
            (source / script).chmod(0o755)
        shutil.copy2(source / "run_autograder", root / "run_autograder")
        subprocess.run([_python_for_everyone(), "-m", "venv", str(base / "python")], check=True)
        env = {
            **os.environ,
            "AUTOGRADER_ROOT": str(root),
            "PATH": f"{base / 'python' / 'bin'}:{os.environ['PATH']}",
        }
        for name in ("M2L_ROOT", "M2L_IMPL", "PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(name, None)
        setup = subprocess.run(
            ["bash", str(source / "setup.sh")], env=env, capture_output=True, text=True
        )
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        yield root, env
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _stubs(folder: Path) -> None:
    folder.mkdir(parents=True)
    for practical in (P1, P2):
        shutil.copy2(ROOT / "exercises" / f"{practical}.py", folder / f"{practical}.py")


def _with(folder: Path, practical: str, extra: str) -> None:
    path = folder / f"{practical}.py"
    path.write_text(path.read_text() + "\n" + extra)


def _submissions(base: Path, results_file: Path) -> dict[str, Path]:
    """The submissions graded below, by name (each a folder)."""
    made: dict[str, Path] = {}
    base.mkdir(parents=True)

    def new(name: str) -> Path:
        made[name] = base / name
        return made[name]

    honest = new("honest")
    honest.mkdir()
    for practical in (P1, P2):
        shutil.copy2(ROOT / "solutions" / f"{practical}.py", honest / f"{practical}.py")

    partial = new("partial_in_exercises_folder") / "exercises"  # the repository's layout
    shutil.copytree(honest, partial)
    path = partial / f"{P1}.py"
    path.write_text(path.read_text().replace(".max(present)", ".add(present)"))  # counts
    path = partial / f"{P2}.py"
    path.write_text(path.read_text().replace(") / math.sqrt(d_k)", ")"))  # no scaling

    notebooks = new("notebooks")  # as Colab downloads them: p1 solved, p2 left as handed out
    notebooks.mkdir()
    shutil.copy2(ROOT / "notebooks" / f"{P1}_solved.ipynb", notebooks / f"{P1}.ipynb")
    shutil.copy2(ROOT / "notebooks" / f"{P2}.ipynb", notebooks / f"Copy of {P2}.ipynb")

    syntax = new("syntax_error")
    shutil.copytree(honest, syntax)
    _with(syntax, P2, "def broken(:\n    pass\n")

    hang = new("hang")
    shutil.copytree(honest, hang)
    path = hang / f"{P1}.py"
    path.write_text(
        path.read_text().replace(
            "def fit_idf(", "def fit_idf(*_):\n    while True:\n        pass\n\n\ndef _unused(", 1
        )
    )

    # The tricks, each on top of the untouched stubs (no work done).
    trick = new("import_solutions")
    _stubs(trick)
    _with(trick, P2, "from solutions.practical2_transformers import *  # noqa\n")
    trick = new("read_solutions_by_path")
    _stubs(trick)
    _with(
        trick,
        P2,
        "import importlib.util as _u, os as _os\n"
        f"_p = _os.path.join({str(results_file.parent.parent)!r}, 'source', 'solutions', "
        f"'{P2}.py')\n"
        "_s = _u.spec_from_file_location('_ref', _p)\n_m = _u.module_from_spec(_s)\n"
        "_s.loader.exec_module(_m)\nglobals().update({k: v for k, v in vars(_m).items() "
        "if not k.startswith('__')})\n",
    )
    trick = new("replace_run_check")
    _stubs(trick)
    _with(
        trick,
        P2,
        "import m2l_nlp.grading.runner as _r\n_r.run_check = lambda *a, **k: None\n"
        "try:\n    import m2l_nlp.grading.pytest_plugin as _p\n"
        "    _p.run_check = lambda *a, **k: None\nexcept ImportError:\n    pass\n",
    )
    trick = new("replace_outcome")
    _stubs(trick)
    _with(
        trick,
        P2,
        "import m2l_nlp.grading.runner as _r\n_r.outcome = lambda *a, **k: ('passed', '')\n",
    )
    trick = new("rewrite_results")
    _stubs(trick)
    forged = json.dumps({"score": FULL, "tests": []})
    _with(
        trick,
        P2,
        "import atexit as _a, os as _os, time as _t\n"
        "def _forge():\n"
        "    try:\n"
        f"        open({str(results_file)!r}, 'w').write({forged!r})\n"
        "    except OSError:\n        pass\n"
        "_forge()\n_a.register(_forge)\n"
        "if _os.fork() == 0:\n"
        "    _os.setsid()\n"
        "    for _ in range(40):\n        _t.sleep(0.5)\n        _forge()\n"
        "    _os._exit(0)\n",
    )
    trick = new("borrow_from_stack")
    _stubs(trick)
    path = trick / f"{P2}.py"
    text = path.read_text()
    path.write_text(
        text.replace(
            "def scaled_dot_product(",
            "def scaled_dot_product(q, k, v, mask=None):\n"
            "    import inspect\n"
            "    for info in inspect.stack():\n"
            "        for value in list(info.frame.f_locals.values()):\n"
            "            ref = getattr(value, 'ref', None)\n"
            "            if ref is not None:\n"
            "                return ref.scaled_dot_product(q, k, v, mask)\n"
            "    raise RuntimeError('no reference on the stack')\n\n\n"
            "def _stub_scaled_dot_product(",
            1,
        )
    )
    trick = new("conftest")
    _stubs(trick)
    (trick / "conftest.py").write_text(
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )
    return made


def test_gradescope_bundle_grades_and_resists_tricks(installed, tmp_path):
    root, env = installed
    results_file = root / "results" / "results.json"
    cases = _submissions(tmp_path / "cases", results_file)
    submission = root / "submission"
    shutil.copytree(cases["honest"], submission)

    run = subprocess.run(
        [str(root / "run_autograder")], env=env, capture_output=True, text=True, timeout=600
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    honest = json.loads(results_file.read_text())
    assert honest["score"] == FULL
    assert [t["score"] for t in honest["tests"]] == [t["max_score"] for t in honest["tests"]]
    assert "170 / 170" in run.stdout  # the terminal says what the file says

    # Every other case in one run of the grader (the reference is checked once for all). A
    # trick that writes results.json targets the real results file, as it would on Gradescope.
    pairs = []
    for name, folder in cases.items():
        if name == "honest":
            continue
        target = results_file if name == "rewrite_results" else tmp_path / f"{name}.json"
        pairs += [str(folder), str(target)]
    graded = subprocess.run(
        [
            sys.executable if os.geteuid() != 0 else "python3",
            "-m",
            "m2l_nlp.grading.trusted",
            *pairs,
        ],
        env={**env, "M2L_ROOT": str(root / "source")},
        cwd=root / "source",
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert graded.returncode == 0, graded.stdout[-3000:] + graded.stderr[-3000:]

    def result(name: str) -> dict:
        path = results_file if name == "rewrite_results" else tmp_path / f"{name}.json"
        return json.loads(path.read_text())

    def by_test(data: dict) -> dict[str, dict]:
        return {t["name"]: t for t in data["tests"]}

    for name in cases:  # shown with `pytest -s`: the table in the closing note
        data = result(name) if name != "honest" else honest
        sdp = by_test(data).get("scaled_dot_product", {}).get("output", "")
        print(f"{name:28s} {data['score']:>3g} / {FULL}  sdp: {sdp.splitlines()[0][:100]}")

    partial = by_test(result("partial_in_exercises_folder"))
    assert partial["multi_hot"]["score"] == 0 and partial["scaled_dot_product"]["score"] == 0
    assert "without dividing the scores" in partial["scaled_dot_product"]["output"]
    assert "fix that first" in partial["multihead_attention"]["output"]
    assert partial["tfidf"]["score"] == partial["tfidf"]["max_score"]

    assert result("notebooks")["score"] == 70  # practical 1 solved, practical 2 not started

    syntax = result("syntax_error")
    assert syntax["score"] == 70 and "syntax error" in syntax["output"]

    hang = by_test(result("hang"))
    assert hang["tfidf"]["score"] == 0 and "stopped after" in hang["tfidf"]["output"]
    assert sum(t["score"] for t in hang.values()) == FULL - hang["tfidf"]["max_score"]

    for trick in (
        "import_solutions",
        "read_solutions_by_path" if os.geteuid() == 0 else None,  # file modes need root
        "replace_run_check",
        "replace_outcome",
        "rewrite_results",
        "borrow_from_stack",
        "conftest",
    ):
        if trick is not None:
            assert result(trick)["score"] == 0, (trick, result(trick))
