"""Find and import a practical from ``solutions/`` (reference) or ``exercises/`` (student)."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

IMPLS = ("solutions", "exercises")
IMPL_ENV = "M2L_IMPL"
Impl = str | ModuleType | Mapping[str, Any]  # see practical_namespace


def repo_root() -> Path:
    """The folder that holds ``solutions/`` and ``exercises/``.

    ``M2L_ROOT`` wins; otherwise the parent of this package (an editable install or a
    checkout), otherwise the current directory (e.g. a Colab cell run from the clone).
    """
    env = os.environ.get("M2L_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / "solutions").is_dir() or (here / "exercises").is_dir():  # or a handout
        return here
    return Path.cwd().resolve()


def default_impl() -> str:
    """``solutions`` where the reference is at hand, else ``exercises`` (a student handout)."""
    return "solutions" if (repo_root() / "solutions").is_dir() else "exercises"


def available_impls() -> tuple[str, ...]:
    """The implementations this copy holds: ``exercises`` only in a student handout."""
    return tuple(i for i in IMPLS if i == "exercises" or (repo_root() / i).is_dir())


def impl_help(what: str) -> str:
    """A command's ``--impl`` help: ``what``, then the implementations this copy holds."""
    if "solutions" in available_impls():
        return f"{what}: solutions (the reference, the default) or exercises (your own modules)"
    return f"{what}: exercises (your own modules, the only ones in this copy)"


def check_impl(impl: str) -> str:
    """Return ``impl`` if it names a known implementation, else raise a helpful error."""
    if impl not in IMPLS:
        raise ValueError(f"unknown implementation {impl!r}: choose one of {', '.join(IMPLS)}")
    return impl


def load_practical(practical: str, impl: str) -> ModuleType:
    """Import ``<impl>/<practical>.py`` as the module ``<impl>.<practical>``.

    >>> load_practical("practical2_transformers", "solutions")  # doctest: +SKIP
    """
    check_impl(impl)
    root = repo_root()
    path = root / impl / f"{practical}.py"
    if not path.is_file():
        # a handout has exercises/ alone: say nothing of what it does not hold
        holds = " and ".join(f"{i}/" for i in available_impls())
        instructors = (
            " (instructors: `make exercises`)"
            if impl == "exercises" and (root / "solutions").is_dir()
            else ""
        )
        raise FileNotFoundError(
            f"{path} does not exist: run from the course's folder, or set M2L_ROOT to the "
            f"folder that holds {holds}{instructors}"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(f"{impl}.{practical}")


class NotebookNamespace:
    """The functions and classes of a practical as a notebook defined them (its ``globals()``)."""

    def __init__(self, names: Mapping[str, Any]):
        self._names = names

    def __getattr__(self, name: str) -> Any:
        try:
            return self._names[name]
        except KeyError:
            raise AttributeError(
                f"`{name}` is not defined in the notebook: run the cell that defines it first"
            ) from None


def practical_namespace(practical: str, impl: Impl) -> Any:
    """Where the code of ``practical`` is read from.

    ``impl`` is ``"solutions"`` or ``"exercises"`` (the folder's file is imported), a module,
    or a mapping of names such as a notebook's ``globals()``: then the functions and classes
    the notebook's cells defined are used, the student's own code in Colab.
    """
    if isinstance(impl, str):
        return load_practical(practical, impl)
    if isinstance(impl, Mapping):
        return NotebookNamespace(impl)
    return impl
