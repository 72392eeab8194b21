"""``import m2l_nlp``: an environment holding a dm-haiku that cannot import beside its jax is
refused in one line that says what to install."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import m2l_nlp

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent


def _with_installed(tmp_path: Path, name: str, version: str) -> dict[str, str]:
    """An environment in which ``name`` reads as installed at ``version`` (its metadata only,
    first on the path)."""
    info = tmp_path / "site" / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    path = os.pathsep.join(filter(None, [str(info.parent), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path}


def test_the_floor_is_pyprojects():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (haiku,) = [d for d in project["dependencies"] if d.startswith("dm-haiku")]
    assert haiku == f"dm-haiku>={m2l_nlp.HAIKU_FLOOR}"


def test_a_dm_haiku_below_the_floor_is_one_line_at_import_and_in_the_cli(tmp_path):
    env = _with_installed(tmp_path, "dm-haiku", "0.0.16")
    for command in (["-c", "import m2l_nlp"], ["-m", "m2l_nlp.cli", "--help"]):
        done = subprocess.run(
            [sys.executable, *command], env=env, capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 1
        (line,) = done.stderr.strip().splitlines()
        assert re.fullmatch(
            r"error: this environment has dm-haiku 0\.0\.16 beside jax \S+; the course needs "
            r"dm-haiku 0\.0\.17 or newer .*: run `pip install -U 'dm-haiku>=0\.0\.17'`",
            line,
        ), line


def test_the_floor_itself_imports(tmp_path):
    env = _with_installed(tmp_path, "dm-haiku", m2l_nlp.HAIKU_FLOOR)
    done = subprocess.run(
        [sys.executable, "-c", "import m2l_nlp"], env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr


def test_the_public_api_imports_and_is_all_that_notebooks_use():
    """Every name of ``m2l_nlp.PUBLIC_API`` imports, and the notebooks and their setup cell
    import nothing else of the library."""
    import importlib

    import nbformat

    for module, names in m2l_nlp.PUBLIC_API.items():
        imported = importlib.import_module(module)
        assert all(hasattr(imported, name) for name in names), module
    used = set()
    sources = [ROOT / "m2l_nlp" / "authoring" / "setup_cell.py"]
    for path in [*sources, *sorted((ROOT / "notebooks").glob("*.ipynb"))]:
        if path.suffix == ".ipynb":
            cells = nbformat.read(path, as_version=4).cells
            text = "\n".join(c.source for c in cells if c.cell_type == "code")
        else:
            text = path.read_text()
        for module, names in re.findall(r"^\s*from (m2l_nlp[\w.]*) import ([\w, ]+)", text, re.M):
            used |= {(module, n.strip().split(" as ")[0]) for n in names.split(",")}
    public = {(module, name) for module, names in m2l_nlp.PUBLIC_API.items() for name in names}
    modules = {(m.rpartition(".")[0], m.rpartition(".")[2]) for m in m2l_nlp.PUBLIC_API}
    assert used - public - modules == set()
    assert {m for m, _ in used} >= {"m2l_nlp.grading", "m2l_nlp.train.loop"}  # it read them
