"""Print pip constraints that put every runtime dependency of pyproject.toml at its floor.

Each ``name>=X`` of ``[project] dependencies`` becomes ``name==X``; jaxlib follows jax (it is
not declared, but it must match jax's version). The ``[dev]`` tools are not constrained.

    python .ci/floor_constraints.py > floors.txt && pip install -c floors.txt -e '.[dev]'
    python .ci/floor_constraints.py --verify < floors.txt   # exit 1 unless installed so
"""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def floors(pyproject: Path = ROOT / "pyproject.toml") -> dict[str, str]:
    """``{name: floor}`` of every runtime dependency; raises if one has no ``>=`` floor."""
    import tomllib  # Python >= 3.11

    declared = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    out = {}
    for requirement in declared:
        requirement = requirement.split(";")[0]  # a marker (python_version < ...) aside
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9A-Za-z.]*)\s*", requirement)
        if not match:
            raise SystemExit(f"{requirement!r} has no `>=` floor: give every dependency one")
        out[match[1].lower()] = match[2]
    if "jax" in out:
        out["jaxlib"] = out["jax"]
    return out


def _release(version: str) -> list[str]:
    """``"1.24.0"`` and ``"1.24"`` alike: the dotted numbers without trailing zeros."""
    parts = version.split(".")
    while len(parts) > 1 and parts[-1] == "0":
        parts.pop()
    return parts


def verify(constraints: str) -> list[str]:
    """The pinned packages whose installed version differs from the pin (as messages)."""
    wrong = []
    for line in constraints.split():
        name, _, wanted = line.partition("==")
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:  # a dependency of older Pythons only
            continue
        if _release(have) != _release(wanted):
            wrong.append(f"{name} {have} is installed, not the floor {wanted}")
    return wrong


if __name__ == "__main__":
    if sys.argv[1:] == ["--verify"]:
        problems = verify(sys.stdin.read())
        print("\n".join(problems) or "every runtime dependency is at its floor")
        sys.exit(1 if problems else 0)
    sys.stdout.write("".join(f"{name}=={version}\n" for name, version in floors().items()))
