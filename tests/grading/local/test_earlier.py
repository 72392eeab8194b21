"""Tests of m2l_nlp.grading.local.earlier: a notebook's earlier practical, importable."""

from __future__ import annotations

import json
import shutil
import sys
import types
from pathlib import Path

import pytest

from m2l_nlp.grading.local import earlier
from m2l_nlp.impl import repo_root

ROOT = repo_root()


@pytest.fixture
def clean_modules():
    yield
    sys.modules.pop("practical2_transformers", None)


def test_a_notebook_gives_its_definitions_and_runs_nothing_else(
    tmp_path, monkeypatch, clean_modules
):
    """In Colab (a stand-in ``google.colab``), your uploaded notebook comes first."""
    notebook = json.loads((ROOT / "notebooks" / "practical2_transformers_solved.ipynb").read_text())
    notebook["cells"].append(  # a cell that would train, plot or fail if it ran
        {"cell_type": "code", "metadata": {}, "source": "raise SystemExit('ran')\nx = 1"}
    )
    (tmp_path / "practical2_transformers.ipynb").write_text(json.dumps(notebook))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setitem(sys.modules, "google.colab", types.ModuleType("google.colab"))
    module = earlier.use_practical("practical2_transformers")
    assert sys.modules["practical2_transformers"] is module
    assert module.__file__ == str((tmp_path / "practical2_transformers.ipynb").resolve())
    assert {"MultiheadAttention", "EncoderBlock", "masked_pool"} <= set(vars(module))
    assert "x" not in vars(module) and "train" not in vars(module)  # no training cell ran


@pytest.mark.parametrize("where", ["notebooks", "empty"])
def test_the_folder_a_notebook_is_opened_from_changes_nothing(
    where, tmp_path, monkeypatch, clean_modules, capsys
):
    """On your own machine: a solved notebook gets solutions/, a student's exercises/, even
    opened beside the stub notebooks (practical 3's solved notebook once got practical 2's
    stub notebook there, and stopped on its NotImplementedError)."""
    folder = ROOT / "notebooks" if where == "notebooks" else tmp_path
    monkeypatch.chdir(folder)
    monkeypatch.setattr(earlier, "PLACES", (Path("."), tmp_path / "content"))
    solved = earlier.use_practical("practical2_transformers", solved=True)
    assert solved.__file__ == str(ROOT / "solutions" / "practical2_transformers.py")
    assert "(the reference" in capsys.readouterr().out
    sys.modules.pop("practical2_transformers")
    stub = earlier.use_practical("practical2_transformers")
    assert stub.__file__ == str(ROOT / "exercises" / "practical2_transformers.py")
    assert sys.modules["practical2_transformers"] is stub
    assert "(yours)" in capsys.readouterr().out


def test_without_exercises_the_notebook_beside_is_used(tmp_path, monkeypatch, clean_modules):
    """A copy without the course's folders (the notebooks alone): the stub notebook beside."""
    shutil.copy(ROOT / "notebooks" / "practical2_transformers.ipynb", tmp_path)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(earlier, "repo_root", lambda: tmp_path)
    module = earlier.use_practical("practical2_transformers", solved=True)  # no solutions/
    assert module.__file__ == str((tmp_path / "practical2_transformers.ipynb").resolve())
    (tmp_path / "practical2_transformers.ipynb").unlink()
    sys.modules.pop("practical2_transformers")
    with pytest.raises(FileNotFoundError, match="was not found: put your"):
        earlier.use_practical("practical2_transformers")


def test_the_practical_3_notebook_imports_practical_2_by_name():
    """Its import cell reads `from practical2_transformers import`, after a cell that provides
    it and that the autograder's reading of a notebook leaves out (notebook-only)."""
    cells = json.loads((ROOT / "notebooks" / "practical3_translation.ipynb").read_text())["cells"]
    sources = ["".join(c["source"]) for c in cells]
    provide = next(
        i for i, s in enumerate(sources) if 'use_practical("practical2_transformers")' in s
    )
    imports = next(i for i, s in enumerate(sources) if "from practical2_transformers import" in s)
    assert provide < imports and cells[provide]["metadata"].get("active") == "ipynb"
    assert not any("from .practical2" in s for s in sources)
