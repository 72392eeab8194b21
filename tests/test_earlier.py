"""Tests of m2l_nlp.grading.local.earlier: a notebook's earlier practical, importable."""

from __future__ import annotations

import json
import sys

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
    notebook = json.loads((ROOT / "notebooks" / "practical2_transformers_solved.ipynb").read_text())
    notebook["cells"].append(  # a cell that would train, plot or fail if it ran
        {"cell_type": "code", "metadata": {}, "source": "raise SystemExit('ran')\nx = 1"}
    )
    (tmp_path / "practical2_transformers.ipynb").write_text(json.dumps(notebook))
    monkeypatch.chdir(tmp_path)
    module = earlier.use_practical("practical2_transformers")
    assert sys.modules["practical2_transformers"] is module
    assert module.__file__ == str((tmp_path / "practical2_transformers.ipynb").resolve())
    assert {"MultiheadAttention", "EncoderBlock", "masked_pool"} <= set(vars(module))
    assert "x" not in vars(module) and "train" not in vars(module)  # no training cell ran


def test_without_a_notebook_the_repository_file_is_used(tmp_path, monkeypatch, clean_modules):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(earlier, "PLACES", (tmp_path,))
    module = earlier.use_practical("practical2_transformers")
    assert module.__file__.endswith("practical2_transformers.py")
    assert sys.modules["practical2_transformers"] is module


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
