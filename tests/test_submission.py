"""Reading a submission as the root grader does: the student controls every byte of it (file
types, links, names, notebook JSON), so nothing is followed, nothing outside it is read, and a
bad file costs its own practical only."""

from __future__ import annotations

import json
from pathlib import Path

from m2l_nlp.grading.submission import (
    Found,
    find_practicals,
    module_from_notebook,
)

ROOT = Path(__file__).resolve().parent.parent


def _notebook(*sources: object, **extra: object) -> str:
    cells = [{"cell_type": "code", "metadata": {}, "source": s, "outputs": []} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, **extra})


# -------------------------------------------------------------------------------- notebooks


def test_notebook_becomes_a_module_of_definitions_only():
    def cell(source, **metadata):
        return {"cell_type": "code", "metadata": metadata, "source": source, "outputs": []}

    setup_first_line = (ROOT / "m2l_nlp" / "setup_cell.py").read_text().splitlines()[0]
    notebook = {
        "cells": [
            cell(f"{setup_first_line}\nimport subprocess\nsubprocess.run(['pip'])"),
            cell("from __future__ import annotations\nimport math\nRATE = 0.1\n"),
            {"cell_type": "markdown", "metadata": {}, "source": "# title"},
            cell(["@staticmethod\n", "def f(x):\n", "    return math.sqrt(x)\n", "f(4)\n"]),
            cell('check("f", f)\n'),  # metadata dropped by an editor: still not kept
            cell("train(model)\n", active="ipynb"),
            cell("!pip install x\n%time f(2)\nclass C:\n    pass\n"),
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    source = module_from_notebook(json.dumps(notebook), "practical_x.ipynb")
    assert source.startswith("from __future__ import annotations\n")
    for kept in ("import math", "RATE = 0.1", "@staticmethod\ndef f(x):", "class C:"):
        assert kept in source
    for dropped in ("subprocess", "f(4)", "check(", "train(", "pip", "%time"):
        assert dropped not in source
    compile(source, "practical_x.py", "exec")


# ------------------------------------------------------------------------ one file per practical


def test_find_practicals_prefers_py_files_then_exercises_then_notebooks(tmp_path):
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "p1.py").write_text("A = 1\n")
    (tmp_path / "p1.py").write_text("A = 2\n")
    (tmp_path / "p1.ipynb").write_text(_notebook("A = 3"))
    (tmp_path / "exercises" / "p2.py").write_text("B = 1\n")
    (tmp_path / "p2.ipynb").write_text(_notebook("B = 2"))
    (tmp_path / "Copy of p3.ipynb").write_text(_notebook("C = 3"))
    found = find_practicals(tmp_path, ["p1", "p2", "p3", "p4"])
    assert found["p1"] == Found(
        "A = 2\n",
        "p1.py",
        notes=("also found exercises/p1.py (not graded)", "also found p1.ipynb (not graded)"),
    )
    assert found["p2"] == Found("B = 1\n", "exercises/p2.py", notes=found["p2"].notes)
    assert found["p2"].notes == ("also found p2.ipynb (not graded)",)
    assert found["p3"] == Found("C = 3\n\n", "Copy of p3.ipynb")
    assert found["p4"] == Found(None)
