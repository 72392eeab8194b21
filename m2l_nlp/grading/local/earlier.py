"""A notebook's access to the student's earlier practical: practical 3's notebook imports
practical 2's modules from ``practical2_transformers``, which :func:`use_practical` provides.

Where it looks, in order: the earlier practical's notebook (as Colab downloads it) in the
current folder, in ``/content`` or in Drive's ``Colab Notebooks`` folder (once Drive is
mounted); the same name as a ``.py`` file in the current folder; then the repository's own
file (``exercises/``, or ``solutions/`` where the reference is at hand). Of a notebook, only
its imports, functions and classes are run, as the autograder reads a submitted notebook.
"""

from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path

from m2l_nlp.impl import default_impl, load_practical

PLACES = (Path("."), Path("/content"), Path("/content/drive/MyDrive/Colab Notebooks"))
KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.ClassDef)


def definitions(notebook: dict) -> str:
    """The imports, functions and classes of a notebook's code cells (its notebook-only cells,
    shell and magic lines left out), as one module's source."""
    parts = []
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") != "code" or cell.get("metadata", {}).get("active") == "ipynb":
            continue
        source = cell.get("source", "")
        source = "".join(source) if isinstance(source, list) else source
        lines = [line for line in source.splitlines() if not line.lstrip().startswith(("!", "%"))]
        try:
            tree = ast.parse("\n".join(lines))
        except SyntaxError:
            continue  # the notebook shows that error where it is
        parts += [ast.unparse(node) for node in tree.body if isinstance(node, KEPT)]
    future = [part for part in parts if part.startswith("from __future__")]  # must come first
    return "\n\n".join([*future, *(part for part in parts if part not in future)]) + "\n"


def use_practical(name: str) -> types.ModuleType:
    """Make ``name`` (e.g. ``"practical2_transformers"``) importable as your work: from your
    notebook or file of it (see the module's docstring), else the repository's. Says where
    it came from in one line."""
    for place in PLACES:
        notebook = place / f"{name}.ipynb"
        if notebook.is_file():
            code = definitions(json.loads(notebook.read_text(encoding="utf-8")))
            return _install(name, code, str(notebook.resolve()))
    script = Path(f"{name}.py")
    if script.is_file():
        return _install(name, script.read_text(encoding="utf-8"), str(script.resolve()))
    module = load_practical(name, default_impl())
    sys.modules[name] = module
    print(f"{name}: {module.__file__} (the repository's; upload your {name}.ipynb to use yours)")
    return module


def _install(name: str, code: str, origin: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = origin
    sys.modules[name] = module
    exec(compile(code, origin, "exec"), module.__dict__)  # noqa: S102 - the student's own code
    print(f"{name}: your {origin}")
    return module
