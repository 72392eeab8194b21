"""A notebook's access to the earlier practical: practical 3's notebook imports practical
2's modules from ``practical2_transformers``, which :func:`use_practical` provides.

Where it looks depends on the notebook, never on the folder it is opened from:

- a solved notebook (``solved=True``) uses the repository's ``solutions/`` file;
- a student's notebook in Colab uses the earlier practical's notebook (as Colab downloads it)
  uploaded to ``/content`` or kept in Drive's ``Colab Notebooks`` folder, else the clone's
  ``exercises/`` file;
- a student's notebook on your own machine uses ``exercises/<practical>.py``, else the
  notebook (or ``.py`` file) of that name in the current folder, beside the notebook.

Of a notebook, only its imports, functions and classes are run, as the autograder reads a
submitted notebook.
"""

from __future__ import annotations

import ast
import json
import sys
import types
from pathlib import Path

from m2l_nlp.impl import load_practical, repo_root

# where Colab keeps an uploaded notebook (the files pane, the kernel's folder) and Drive's
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


def use_practical(name: str, solved: bool = False) -> types.ModuleType:
    """Make ``name`` (e.g. ``"practical2_transformers"``) importable: the reference for a
    solved notebook (``solved``), else your work (see the module's docstring for where it
    is looked for). Says where it came from in one line."""
    if solved and (repo_root() / "solutions" / f"{name}.py").is_file():
        return _use_file(name, "solutions", "the reference, as in every solved notebook")
    in_colab = "google.colab" in sys.modules
    places = PLACES if in_colab else (Path("."),)
    if in_colab:  # the clone's exercises/ holds the stubs: your notebook comes first
        found = _yours(name, places)
        if found is not None:
            return found
    if (repo_root() / "exercises" / f"{name}.py").is_file():
        upload = f"the course's copy: upload your {name}.ipynb to use yours"
        return _use_file(name, "exercises", upload if in_colab else "yours")
    found = _yours(name, places)
    if found is not None:
        return found
    raise FileNotFoundError(
        f"{name} was not found: put your {name}.ipynb (or .py) beside this notebook, or open "
        "it from the course's folder, whose exercises/ holds it"
    )


def _use_file(name: str, impl: str, whose: str) -> types.ModuleType:
    module = load_practical(name, impl)
    sys.modules[name] = module
    print(f"{name}: {module.__file__} ({whose})")
    return module


def _yours(name: str, places: tuple[Path, ...]) -> types.ModuleType | None:
    """Your notebook of ``name`` in one of ``places``, else your ``name.py`` in the current
    folder, installed; None if there is neither."""
    for place in places:
        notebook = place / f"{name}.ipynb"
        if notebook.is_file():
            code = definitions(json.loads(notebook.read_text(encoding="utf-8")))
            return _install(name, code, str(notebook.resolve()))
    script = Path(f"{name}.py")
    if script.is_file():
        return _install(name, script.read_text(encoding="utf-8"), str(script.resolve()))
    return None


def _install(name: str, code: str, origin: str) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__file__ = origin
    sys.modules[name] = module
    exec(compile(code, origin, "exec"), module.__dict__)  # noqa: S102 - the student's own code
    print(f"{name}: your {origin}")
    return module
