"""Find a student's practical files in a submission folder, or rebuild them from notebooks.

A submission holds, for each practical, ``<practical>.py`` at its top, or
``exercises/<practical>.py``, or a notebook whose file name contains the practical's name
(``practical2_transformers.ipynb`` as Colab downloads it, ``Copy of ...`` included).
From a notebook only what a module needs is kept: imports, functions, classes and constant
assignments of its code cells (never the setup cell, the ``check`` calls, the training cells
or shell lines), so nothing runs but definitions.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

SETUP_CELL = Path(__file__).parent.parent / "setup_cell.py"  # the notebooks' setup cell

_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class SubmissionError(Exception):
    """The submission cannot be read; the message says what to hand in."""


def _setup_first_line() -> str:
    return SETUP_CELL.read_text(encoding="utf-8").splitlines()[0]


def _constant(node: ast.AST) -> bool:
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if value is None:
        return False
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False
    return True


def _cell_code(source: str) -> str | None:
    """The definitions in one notebook cell, or None if it holds none (or does not parse:
    then the whole cell is kept, so that the syntax error is reported where it is)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("!", "%"))]
    text = "\n".join(lines)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    kept = [node for node in tree.body if isinstance(node, _KEPT) or _constant(node)]
    if not kept:
        return None
    return "\n".join("\n".join(lines[_first_line(node) - 1 : node.end_lineno]) for node in kept)


def _first_line(node: ast.AST) -> int:
    """The statement's first line, its decorators included."""
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def module_from_notebook(path: Path) -> str:
    """The Python module that the definitions in the notebook at ``path`` make up."""
    try:
        notebook = json.loads(path.read_text(encoding="utf-8"))
        cells = notebook["cells"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise SubmissionError(f"{path.name} is not a readable notebook ({err})") from None
    future, body = [], []
    for cell in cells:
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else str(source)
        if (cell.get("metadata") or {}).get("active") == "ipynb":
            continue  # notebook-only cells: checks, plots, training
        if source.startswith(_setup_first_line()):
            continue
        code = _cell_code(source)
        if code is None:
            continue
        for line in code.splitlines():
            (future if line.startswith("from __future__ import") else body).append(line)
        body.append("")
    return "\n".join([*dict.fromkeys(future), *body]) + "\n"


def find_practicals(folder: Path, practicals: list[str]) -> dict[str, str | None]:
    """``{practical: module source}`` from a submission folder; None where it has none."""
    found: dict[str, str | None] = {}
    notebooks = sorted(folder.rglob("*.ipynb"))
    for practical in practicals:
        for candidate in (folder / f"{practical}.py", folder / "exercises" / f"{practical}.py"):
            if candidate.is_file():
                found[practical] = candidate.read_text(encoding="utf-8", errors="replace")
                break
        else:
            matches = [nb for nb in notebooks if practical in nb.name and "_solved" not in nb.name]
            found[practical] = module_from_notebook(matches[0]) if matches else None
    return found
