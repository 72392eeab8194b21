"""Tests of the notebook builder (m2l_nlp.authoring.notebooks) and of the committed notebooks."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from m2l_nlp.authoring import notebooks as make_notebooks
from m2l_nlp.data.pipeline import compilation_cache_dir
from m2l_nlp.impl import repo_root

ROOT = repo_root()
URL = make_notebooks.repo_url(ROOT)
PRACTICAL = "practical2_transformers"
STUDENT_NB = ROOT / "notebooks" / f"{PRACTICAL}.ipynb"
SOLVED_NB = ROOT / "notebooks" / f"{PRACTICAL}_solved.ipynb"


def copy_sources(tmp_path: Path) -> Path:
    """A scratch repository root holding copies of solutions/, exercises/ and pyproject.toml."""
    for folder in ("solutions", "exercises"):
        shutil.copytree(ROOT / folder, tmp_path / folder, ignore=shutil.ignore_patterns("__py*"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


# --- the builder -------------------------------------------------------------------------


def test_committed_notebooks_are_up_to_date(capsys):
    """`python -m m2l_nlp.authoring.notebooks --check` passes on the repository as committed."""
    assert make_notebooks.main(["--check"]) == 0, capsys.readouterr().err
    assert STUDENT_NB.is_file() and SOLVED_NB.is_file()


def test_check_command_line_exit_code():
    result = subprocess.run(
        [sys.executable, "-m", "m2l_nlp.authoring.notebooks", "--check"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert "up to date" in result.stdout


def test_build_then_check_detects_drift(tmp_path: Path, capsys):
    root = copy_sources(tmp_path)
    assert make_notebooks.main(["--root", str(root), "--check"]) == 1  # nothing built yet
    assert make_notebooks.main(["--root", str(root)]) == 0
    built = {p.name: p.read_text() for p in (root / "notebooks").glob("*.ipynb")}
    practicals = [p.stem for p in (root / "solutions").glob("*.py") if not p.stem.startswith("_")]
    assert PRACTICAL in practicals
    want = [f"{name}{suffix}.ipynb" for name in practicals for suffix in ("", "_solved")]
    assert sorted(built) == sorted(want)
    assert make_notebooks.main(["--root", str(root), "--check"]) == 0

    # Building again gives the same bytes (deterministic: no random cell ids, no outputs).
    assert make_notebooks.main(["--root", str(root)]) == 0
    assert {p.name: p.read_text() for p in (root / "notebooks").glob("*.ipynb")} == built
    assert not list((root / "notebooks").glob(".*"))  # no temporary files left

    # An edit to a source makes exactly its notebook stale, with a message saying what to do.
    source = root / "solutions" / f"{PRACTICAL}.py"
    source.write_text(source.read_text().replace("# # Practical 2", "# # Practical two", 1))
    capsys.readouterr()
    assert make_notebooks.main(["--root", str(root), "--check"]) == 1
    err = capsys.readouterr().err
    assert f"{PRACTICAL}_solved.ipynb" in err and f"{PRACTICAL}.ipynb" not in err
    assert "python -m m2l_nlp.authoring.notebooks" in err

    # A hand edit of a notebook is drift too.
    assert make_notebooks.main(["--root", str(root)]) == 0
    student = root / "notebooks" / f"{PRACTICAL}.ipynb"
    student.write_text(student.read_text().replace("Practical 2", "Practical 3", 1))
    assert make_notebooks.main(["--root", str(root), "--check"]) == 1


def test_missing_exercises_gives_a_clear_error(tmp_path: Path, capsys):
    root = copy_sources(tmp_path)
    (root / "exercises" / f"{PRACTICAL}.py").unlink()
    assert make_notebooks.main(["--root", str(root)]) == 2
    assert "python -m m2l_nlp.authoring.stubs" in capsys.readouterr().err


def test_notebook_structure_setup_cell_and_no_outputs():
    for path in (STUDENT_NB, SOLVED_NB):
        nb = nbformat.read(path, as_version=4)
        nbformat.validate(nb)
        assert nb.cells[0].cell_type == "markdown" and nb.cells[0].source.startswith("# ")
        setup_md, setup = nb.cells[1], nb.cells[2]
        assert make_notebooks.colab_url(f"notebooks/{path.name}", URL) in setup_md.source
        assert setup.source == make_notebooks.setup_code(URL, floor=make_notebooks.jax_floor())
        assert f'REPO_URL = "{URL}"' in setup.source
        for cell in nb.cells:
            if cell.cell_type == "code":
                assert cell.outputs == [] and cell.execution_count is None
        assert nb.metadata["kernelspec"]["name"] == "python3"
        assert nb.metadata["accelerator"] == "GPU"


def test_colab_url():
    url = make_notebooks.colab_url("notebooks/x.ipynb", "https://github.com/me/course.git", "dev")
    assert url == "https://colab.research.google.com/github/me/course/blob/dev/notebooks/x.ipynb"
    with pytest.raises(ValueError, match="https://github.com/"):
        make_notebooks.colab_url("notebooks/x.ipynb", "git@github.com:me/course")


def test_notebook_only_cells_become_code_in_the_notebook():
    """`# %% active="ipynb"` cells are comments in the .py and code in the notebook."""
    import jupytext

    source = jupytext.read(ROOT / "solutions" / f"{PRACTICAL}.py")
    only_nb = [c.source for c in source.cells if c.metadata.get("active") == "ipynb"]
    nb = nbformat.read(SOLVED_NB, as_version=4)
    nb_code = [c.source for c in nb.cells if c.cell_type == "code"]
    for cell_source in only_nb:
        assert cell_source in nb_code
    text = (ROOT / "solutions" / f"{PRACTICAL}.py").read_text()
    for block in text.split('# %% active="ipynb"\n')[1:]:
        body = block.split("\n# %%")[0]
        code_lines = [line for line in body.splitlines() if line and not line.startswith("#")]
        assert code_lines == [], f"notebook-only cell has uncommented code: {code_lines}"


def test_importing_the_practicals_runs_no_notebook_cell():
    """Importing solutions/ and exercises/ loads no data, training, grading or plotting."""
    code = textwrap.dedent(
        f"""
        import sys
        from m2l_nlp.impl import load_practical
        load_practical("{PRACTICAL}", "solutions")
        load_practical("{PRACTICAL}", "exercises")
        heavy = ("m2l_nlp.data", "m2l_nlp.data.imdb_archive", "m2l_nlp.train.loop",
                 "m2l_nlp.grading", "m2l_nlp.plotting", "matplotlib")
        print(sorted(m for m in heavy if m in sys.modules))
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip().splitlines()[-1] == "[]"


# --- the setup cell ----------------------------------------------------------------------

RUN_SETUP = """
import json, os, subprocess, sys, types
calls = []
clone_dir, mode, failing = sys.argv[1], sys.argv[2], sys.argv[3]
if mode == "colab":
    # jax imports google.colab.output when it sees google.colab; fake both.
    sys.modules["google.colab"] = types.ModuleType("google.colab")
    sys.modules["google.colab.output"] = sys.modules["google.colab"].output = types.ModuleType(
        "google.colab.output"
    )

constraints = {}  # each pip call's constraints file: its name and what it held then

def fake_run(cmd, check=False, **kwargs):
    calls.append(list(cmd))
    if "-c" in cmd:
        name = cmd[cmd.index("-c") + 1]
        with open(name) as f:
            constraints[name] = f.read().split()
    if failing and failing in cmd:
        return subprocess.CompletedProcess(cmd, 1, "", "noise\\nfatal: the last line")
    if cmd[:2] == ["git", "clone"]:
        os.makedirs(os.path.join(cmd[-1], ".git"))
    return subprocess.CompletedProcess(cmd, 0, "", "")

subprocess.run = fake_run
os.environ.pop("XLA_PYTHON_CLIENT_PREALLOCATE", None)
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
os.environ.pop("M2L_ROOT", None)  # a course folder named by whoever runs the tests
source = sys.stdin.read()
shown = None
try:
    exec(compile(source, "<setup cell>", "exec"), {"__name__": "__main__"})
    exec(compile(source, "<setup cell>", "exec"), {"__name__": "__main__"})  # run twice
except Exception as error:
    shown = error._render_traceback_()  # what IPython shows instead of a traceback
print(json.dumps({
    "calls": calls,
    "constraints": constraints,
    "left": [name for name in constraints if os.path.exists(name)],
    "shown": shown,
    "prealloc": os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE"),
    "compile_cache": os.environ.get("JAX_COMPILATION_CACHE_DIR"),
    "m2l_root": os.environ.get("M2L_ROOT"),
    "path0": sys.path[0],
}))
"""


def run_setup(
    tmp_path: Path,
    mode: str,
    floor: str = "0",
    failing: str = "",
    tested: str | None = None,
    installed: str = "",
) -> tuple[dict, str]:
    """Run the setup cell twice in a fresh interpreter, as Colab (``mode="colab"``, with a
    stand-in ``google.colab``) or locally; ``failing`` makes the command holding that word
    fail; ``installed``: more packages the runtime has (pip freeze lines, their metadata
    only). Returns the cell's effects and what it printed."""
    clone_dir = str(tmp_path / "clone")
    env = dict(os.environ)
    if installed:
        site = tmp_path / "runtime-site"
        for name, version in (line.split("==") for line in installed.split()):
            info = site / f"{name.replace('-', '_')}-{version}.dist-info"
            info.mkdir(parents=True)
            meta = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            (info / "METADATA").write_text(meta)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    result = subprocess.run(
        [sys.executable, "-c", RUN_SETUP, clone_dir, mode, failing],
        input=make_notebooks.setup_code(URL, clone_dir=clone_dir, floor=floor, tested=tested),
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    *printed, last = result.stdout.strip().splitlines()
    return json.loads(last), "\n".join(printed)


def test_setup_cell_locally_installs_nothing(tmp_path: Path):
    state, printed = run_setup(tmp_path, "local")
    assert state["calls"] == []
    assert state["prealloc"] == "false"
    assert state["compile_cache"] == str(compilation_cache_dir())
    assert state["m2l_root"] is None
    assert re.search(r"JAX \S+: \d+ \w+ device\(s\)", printed)  # CPU, GPU or TPU
    assert "imported before" not in printed  # the second run imports jax, after the first


def test_setup_cell_in_colab_clones_once_and_pins_jax(tmp_path: Path):
    from importlib.metadata import version

    state, printed = run_setup(tmp_path, "colab")
    clone_dir = str(tmp_path / "clone")
    clones = [c for c in state["calls"] if c[:2] == ["git", "clone"]]
    assert clones == [["git", "clone", "--quiet", "--depth", "1", URL, clone_dir]]
    pips = [c for c in state["calls"] if c[1:4] == ["-m", "pip", "install"]]
    assert len(pips) == 2  # the cell was run twice: clone once, install (no-op) twice
    pip = pips[0]
    assert pip[-2:] == ["-e", clone_dir]
    assert "--upgrade" not in pip and "-U" not in pip
    # each run's constraints in a file of its own (a shared name was rewritten by another
    # runtime's cell between this one's writing and this test's reading)
    assert len({c[c.index("-c") + 1] for c in pips}) == 2
    assert state["left"] == []  # and removes it once pip has read it
    constraints = state["constraints"][pip[pip.index("-c") + 1]]
    for package in ("jax", "jaxlib", "numpy"):
        assert f"{package}=={version(package)}" in constraints
    for pin in make_notebooks.colab_tested().split():  # what Colab lacks, as tested
        assert pin in constraints
    assert state["prealloc"] == "false"
    assert state["compile_cache"] == str(compilation_cache_dir())
    assert state["m2l_root"] == clone_dir and state["path0"] == clone_dir
    assert "device(s)" in printed


def test_setup_cell_keeps_every_cuda_plugin_the_runtime_has(tmp_path: Path):
    """Colab's GPU image with jax's CUDA 13 plugins (and CUDA 12's beside them): the cell
    pins each at its installed version, so pip neither reinstalls nor removes one."""
    colab = "jax-cuda13-plugin==0.7.2 jax-cuda13-pjrt==0.7.2 nvidia-nccl-cu13==2.28.9"
    colab += " jax-cuda12-plugin==0.7.1 jax_cuda12_pjrt==0.7.1"
    state, _ = run_setup(tmp_path, "colab", installed=colab)
    pip = next(c for c in state["calls"] if c[1:4] == ["-m", "pip", "install"])
    assert not {"--upgrade", "-U", "--force-reinstall", "uninstall"} & set(pip)
    constraints = state["constraints"][pip[pip.index("-c") + 1]]
    for pin in (
        "jax-cuda13-plugin==0.7.2",
        "jax-cuda13-pjrt==0.7.2",
        "jax-cuda12-plugin==0.7.1",
        "jax_cuda12_pjrt==0.7.1",
    ):
        assert pin in constraints
    assert not any(c.startswith("nvidia") for c in constraints)  # jax's plugins pull those
    state, _ = run_setup(tmp_path / "old", "colab", floor="99.0", installed=colab)
    assert "`!pip install -q 'jax[cuda13]>=99.0'`" in state["shown"][0]


@pytest.mark.parametrize(
    ("failing", "message"),
    [
        ("clone", "downloading the course from"),
        ("pip", "installing the course package failed (fatal: the last line): run this cell"),
    ],
)
def test_a_failed_clone_or_install_is_one_line_that_says_what_to_do(tmp_path, failing, message):
    state, _ = run_setup(tmp_path, "colab", failing=failing)
    assert state["shown"] is not None and len(state["shown"]) == 1
    assert state["shown"][0].startswith("Setup failed: ") and message in state["shown"][0]


def test_a_jax_older_than_the_floor_is_one_message(tmp_path):
    state, _ = run_setup(tmp_path, "colab", floor="99.0")
    assert state["calls"] == []  # nothing cloned or installed
    (shown,) = state["shown"]
    assert "the course needs 99.0 or newer" in shown and "Restart session" in shown


def test_an_untested_dm_haiku_already_installed_is_one_message(tmp_path):
    from importlib.metadata import version

    state, _ = run_setup(tmp_path, "colab", tested="dm-haiku==0.0.1 jmp==" + version("jmp"))
    assert state["calls"] == []  # nothing cloned or installed
    (shown,) = state["shown"]
    assert shown == (
        f"Setup failed: this runtime has dm-haiku {version('dm-haiku')}, which the course has "
        "not tested: run `!pip install -q dm-haiku==0.0.1` in a cell, then Runtime > Restart "
        "session, and run this cell again"
    )


def test_the_tested_versions_are_one_setting():
    """m2l_nlp/authoring/colab_tested.txt reaches every notebook's setup cell and the Colab lane."""
    tested = make_notebooks.colab_tested()
    assert any(pin.startswith("dm-haiku==") for pin in tested.split())
    for path, text in make_notebooks.planned(ROOT).items():
        if path.suffix == ".ipynb":
            assert f'TESTED = \\"{tested}\\"' in text
    assert "colab_tested.txt" in (ROOT / ".ci" / "versions.py").read_text()


def test_the_repository_url_is_one_setting(tmp_path):
    """pyproject's [project.urls] Repository reaches the setup cell, the notebooks' and the
    README's Colab links; another address regenerates all of them."""
    fork = "https://github.com/teacher/course-handout"
    plan = make_notebooks.planned(ROOT, fork)
    readme = plan[ROOT / "README.md"]
    assert "github/m2l-nlp/m2l-nlp/" not in readme
    notebooks = [path for path in plan if path.suffix == ".ipynb"]  # a link to each
    links = readme.count("colab.research.google.com/github/teacher/course-handout/blob/")
    assert links == len(notebooks) > 0
    for path, text in plan.items():
        if path.suffix == ".ipynb":
            assert f'REPO_URL = \\"{fork}\\"' in text and URL not in text


# --- executing the notebooks -------------------------------------------------------------


@pytest.fixture
def small_imdb(monkeypatch, users_xla_flags):
    """Kernels started by the test read the bundled small dataset wherever a notebook asks
    for IMDB without naming a source (``prepare_imdb()``, ``load_imdb()``): no download. They
    compile with the user's XLA_FLAGS, not pytest's checking flags, as in a student's kernel
    (``check()`` gives its own programs the checking options)."""
    from m2l_nlp.data.imdb_archive import SOURCE_ENV
    from m2l_nlp.data.pipeline import SMALL_DATA

    monkeypatch.setenv(SOURCE_ENV, str(SMALL_DATA))


def execute(path: Path, cwd: Path, timeout: int = 600) -> nbformat.NotebookNode:
    """Run a notebook top to bottom in a fresh kernel; raises CellExecutionError on error.

    The kernel inherits this process's environment (see the ``small_imdb`` fixture).
    """
    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    client = NotebookClient(
        nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(cwd)}}
    )
    try:
        client.execute()
    finally:
        execute.last = nb
    return nb


def outputs_text(cell: nbformat.NotebookNode) -> str:
    parts = []
    for out in cell.get("outputs", []):
        parts.append(out.get("text", ""))
        parts.append(out.get("data", {}).get("text/plain", ""))
    return "".join(parts)


PRACTICALS = sorted(p.stem for p in (ROOT / "solutions").glob("*.py") if not p.stem.startswith("_"))


# Every solved notebook from notebooks/; from an empty folder, the first only: the folder is
# the same code path for every practical, and the colab lanes run every one from a clone.
PLACES = [(p, "notebooks/") for p in PRACTICALS] + [(PRACTICALS[0], "an empty folder")]


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize(("practical", "where"), PLACES)
def test_solved_notebook_runs_top_to_bottom(practical: str, where: str, tmp_path: Path, small_imdb):
    """From notebooks/ as Jupyter opens it: there the stub notebooks lie beside it, and the
    solved one must still import the solved earlier practicals; and from an empty folder."""
    folder = ROOT / "notebooks" if where == "notebooks/" else tmp_path
    before = set(folder.iterdir())
    nb = execute(ROOT / "notebooks" / f"{practical}_solved.ipynb", folder)
    left = set(folder.iterdir()) - before  # named, never removed: it may be someone's
    assert folder == tmp_path or not left, f"the notebook left {sorted(left)} in {folder}"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert all(c.execution_count is not None for c in code)
    assert "device(s)" in outputs_text(code[0])
    errors = [o for c in code for o in c.outputs if o.output_type == "error"]
    assert errors == []
    images = [c for c in code if any("image/png" in o.get("data", {}) for o in c.outputs)]
    plot_cells = [c for c in code if re.search(r"\bplot_\w+\(", c.source)]
    assert len(images) == len(plot_cells), "every plotting cell should show a figure"
    for cell in code:
        if cell.source.startswith("check("):
            assert ": passed" in outputs_text(cell), outputs_text(cell)
        if "use_practical(" in cell.source:  # the reference, not a stub beside the notebook
            assert "solutions/" in outputs_text(cell) and "(the reference" in outputs_text(cell)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("practical", PRACTICALS)
def test_student_notebook_runs_until_its_first_not_implemented_error(
    practical: str, tmp_path: Path, small_imdb
):
    """The setup and every cell before the first use of a stub run; then NotImplementedError."""
    from nbclient.exceptions import CellExecutionError

    path = ROOT / "notebooks" / f"{practical}.ipynb"
    try:
        execute(path, tmp_path, timeout=300)
        stopped = None
    except CellExecutionError as err:
        stopped = err.ename
    nb = execute.last
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert "device(s)" in outputs_text(code[0]), "the setup cell should run cleanly"
    if practical == PRACTICAL:  # it has check and plot cells, so it must reach a stub
        assert stopped == "NotImplementedError"
    assert stopped in (None, "NotImplementedError"), f"{path.name} stopped on {stopped}"
    failed = [i for i, c in enumerate(code) if any(o.output_type == "error" for o in c.outputs)]
    assert len(failed) == (stopped is not None)
    last = failed[0] if failed else len(code)
    assert all(c.execution_count is not None for c in code[:last])
    for cell in code[:last]:
        if cell.source.startswith("check("):
            assert "not started" in outputs_text(cell), outputs_text(cell)


def test_readme_colab_links_point_at_the_generated_notebooks():
    """Every "Open in Colab" link in the README opens a notebook that exists, in REPO_URL;
    once the README has such links, every notebook has one."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    links = set(re.findall(r"https://colab\.research\.google\.com/github/[^)\s\"']+", readme))
    expected = {
        make_notebooks.colab_url(path.relative_to(ROOT).as_posix(), URL)
        for path in sorted((ROOT / "notebooks").glob("*.ipynb"))
    }
    assert links <= expected, f"README links to notebooks that do not exist: {links - expected}"
    if links:
        assert links == expected, f"notebooks without a Colab badge: {expected - links}"
