"""Find and import a practical from ``solutions/`` (reference) or ``exercises/`` (student)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

IMPLS = ("solutions", "exercises")
IMPL_ENV = "M2L_IMPL"


def repo_root() -> Path:
    """The folder that holds ``solutions/`` and ``exercises/``.

    ``M2L_ROOT`` wins; otherwise the parent of this package (an editable install or a
    checkout), otherwise the current directory (e.g. a Colab cell run from the clone).
    """
    env = os.environ.get("M2L_ROOT")
    if env:
        return Path(env).resolve()
    here = Path(__file__).resolve().parent.parent
    if (here / "solutions").is_dir():
        return here
    return Path.cwd().resolve()


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
        raise FileNotFoundError(
            f"{path} does not exist: run from the repository root, or set M2L_ROOT to the "
            "folder that holds solutions/ and exercises/ (instructors: `make exercises`)"
        )
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return importlib.import_module(f"{impl}.{practical}")
