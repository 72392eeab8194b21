"""Generate the student stubs in ``exercises/`` from the reference ``solutions/``.

Every region between a ``# BEGIN SOLUTION`` line and an ``# END SOLUTION`` line becomes::

    # YOUR CODE HERE
    raise NotImplementedError("<exercise>: not implemented yet")

at the indentation of the ``# BEGIN SOLUTION`` line. ``<exercise>`` is the function (or the
class, for ``__call__``; ``Class.method`` for other methods) that holds the region.
Everything else (signatures, docstrings, the ``__init__`` methods that fix parameter names,
hints in comments and markdown cells) is copied unchanged.

Usage::

    python -m m2l_nlp.authoring.stubs            # write exercises/ from solutions/
    python -m m2l_nlp.authoring.stubs --check    # exit 1 if exercises/ is out of date
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from m2l_nlp.fileio import write_json_atomic, write_text_atomic
from m2l_nlp.impl import repo_root

BEGIN = "# BEGIN SOLUTION"
END = "# END SOLUTION"
PLACEHOLDER = "# YOUR CODE HERE"


class MarkerError(ValueError):
    """A solution file whose markers are nested, unclosed or unmatched."""


def _owners(source: str, path: str) -> dict[int, str]:
    """Map each 1-based line number to the name of the innermost def that contains it."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as err:
        raise MarkerError(f"{path}:{err.lineno}: the solution does not parse: {err.msg}") from err
    owners: dict[int, str] = {}

    def visit(node: ast.AST, cls: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if cls is None:
                    name = child.name
                elif child.name == "__call__":
                    name = cls
                else:
                    name = f"{cls}.{child.name}"
                end = child.end_lineno or child.lineno
                for line in range(child.lineno, end + 1):
                    owners.setdefault(line, name)
                # Nested defs (helpers inside a solution) keep the outer name: the
                # setdefault above already claimed their lines.
            else:
                visit(child, cls)

    visit(tree, None)
    return owners


def _check_markers(lines: list[str], path: str) -> None:
    """Markers must alternate BEGIN, END, BEGIN, END, ... (checked before parsing)."""
    open_line: int | None = None
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            if open_line is not None:
                raise MarkerError(
                    f"{path}:{number}: nested '{BEGIN}' (the region opened at line "
                    f"{open_line} is not closed yet): add '{END}' before opening another"
                )
            open_line = number
        elif stripped == END:
            if open_line is None:
                raise MarkerError(f"{path}:{number}: '{END}' without a matching '{BEGIN}'")
            open_line = None
    if open_line is not None:
        raise MarkerError(
            f"{path}:{open_line}: '{BEGIN}' is never closed: add '{END}' after the solution"
        )


def make_stub(source: str, path: str = "<solution>") -> str:
    """Return the stub text for one solution file; raise :class:`MarkerError` on bad markers."""
    lines = source.splitlines(keepends=True)
    _check_markers(lines, path)
    owners = _owners(source, path)
    out: list[str] = []
    inside = False
    for number, line in enumerate(lines, start=1):
        stripped = line.strip()
        if stripped == BEGIN:
            inside = True
            indent = line[: len(line) - len(line.lstrip())]
            owner = owners.get(number)
            if owner is None:
                raise MarkerError(
                    f"{path}:{number}: '{BEGIN}' outside any function: solution regions must "
                    "be inside a function or method body"
                )
            newline = "\n" if line.endswith("\n") else ""
            message = f"{owner}: not implemented yet"
            out.append(f"{indent}{PLACEHOLDER}\n")
            out.append(f'{indent}raise NotImplementedError("{message}"){newline}')
        elif stripped == END:
            inside = False
        elif not inside:
            out.append(line)
    return "".join(out)


def planned_stubs(solutions: Path, exercises: Path) -> dict[Path, str]:
    """What :func:`main` would write: ``{exercises/<file>.py: text}`` for every solution file."""
    if not solutions.is_dir():
        raise FileNotFoundError(
            f"{solutions} is not a folder: run from the repository root or pass --solutions"
        )
    plan = {}
    for source in sorted(solutions.glob("*.py")):
        text = source.read_text(encoding="utf-8")
        plan[exercises / source.name] = make_stub(text, str(source))
    return plan


def drifted(plan: dict[Path, str]) -> list[Path]:
    """The planned files that are missing or differ on disk."""
    stale = []
    for path, text in plan.items():
        if not path.is_file() or path.read_text(encoding="utf-8") != text:
            stale.append(path)
    return stale


RECORD = ".generated.json"  # in exercises/: the sha256 of each stub as last written


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def edited_by_hand(plan: dict[Path, str], exercises: Path) -> list[Path]:
    """The stubs that would change but differ from what the generator last wrote there (a
    student's work): their hash is not the one in ``exercises/.generated.json``."""
    record_path = exercises / RECORD
    record = json.loads(record_path.read_text()) if record_path.is_file() else {}
    return [
        path
        for path in drifted(plan)
        if path.is_file() and _sha256(path.read_text(encoding="utf-8")) != record.get(path.name)
    ]


def write_stubs(plan: dict[Path, str], exercises: Path, force: bool = False) -> list[Path]:
    """Write the stubs that changed; returns them. Refuses (``FileExistsError`` naming them)
    to overwrite stubs edited by hand, unless ``force``: then each is first copied to
    ``<name>.py.bak``."""
    edited = edited_by_hand(plan, exercises)
    if edited and not force:
        names = ", ".join(str(p) for p in edited)
        raise FileExistsError(
            f"{names} changed since they were generated (your work?): nothing was written. "
            "Keep a copy, or run again with FORCE=1 (make) / --force, which saves each as .bak"
        )
    for path in edited:
        shutil.copy2(path, path.with_name(path.name + ".bak"))
    stale = drifted(plan)
    for path in stale:
        write_text_atomic(path, plan[path])
    record = {path.name: _sha256(text) for path, text in sorted(plan.items())}
    write_json_atomic(exercises / RECORD, record)
    return stale


def main(argv: Sequence[str] | None = None) -> int:
    root = repo_root()
    parser = argparse.ArgumentParser(
        prog="python -m m2l_nlp.authoring.stubs",
        description="Write exercises/*.py (student stubs) from solutions/*.py.",
    )
    parser.add_argument("--solutions", type=Path, default=root / "solutions")
    parser.add_argument("--exercises", type=Path, default=root / "exercises")
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 and name the stubs that differ from what would be written",
    )
    parser.add_argument(
        "--force",
        action="store_true",
        help="also overwrite stubs edited by hand (each is saved as .bak first)",
    )
    args = parser.parse_args(argv)
    try:
        plan = planned_stubs(args.solutions, args.exercises)
    except (MarkerError, FileNotFoundError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stale = drifted(plan)
    if args.check:
        if stale:
            names = ", ".join(str(p) for p in stale)
            print(
                f"out of date: {names}\nthe stubs differ from solutions/: run "
                "`make exercises` (python -m m2l_nlp.authoring.stubs) and commit the result",
                file=sys.stderr,
            )
            return 1
        print(f"exercises up to date ({len(plan)} files)")
        return 0
    try:
        written = write_stubs(plan, args.exercises, force=args.force)
    except FileExistsError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {len(written)} of {len(plan)} stub files in {args.exercises}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
