"""What an instructor hands out: the Gradescope autograder zip, and the student handout.

    python -m m2l_nlp.grading.trusted.bundle autograder dist/autograder.zip   # make autograder
    python -m m2l_nlp.grading.trusted.bundle handout dist/handout             # make handout

- The **autograder** zip holds ``setup.sh`` and ``run_autograder`` (from
  ``m2l_nlp/grading/trusted/gradescope/``) at its top, with what they install and run: the
  library, ``pyproject.toml`` and ``solutions/`` (readable by root only once installed).
- The **handout** is the repository without ``solutions/``, the solved notebooks and the
  instructor's tests, CI and benchmarks; it carries the reference's answers to every check
  instead (``m2l_nlp/grading/checks/expected/``, recorded here), so ``pytest`` in it grades the
  exercises with the same checks and messages. A later exercise then calls the student's
  own earlier ones (there is no reference to stand in for them).

Both are written under a temporary name, then renamed; an existing output is replaced only
if this tool wrote it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path

from m2l_nlp.devices import checking_xla_flags
from m2l_nlp.fileio import atomic_file
from m2l_nlp.impl import repo_root

GRADESCOPE = Path(__file__).with_name("gradescope")
HANDOUT_MARK = ".m2l-handout"  # a folder with this file was written by `make handout`
AUTOGRADER_PARTS = ("pyproject.toml", "README.md", "grading.toml", "m2l_nlp/", "solutions/")
HANDOUT_LEFT_OUT = ("solutions/", ".ci/", "benchmarks/", "tests/", "docs/")
HANDOUT_KEPT_TESTS = ("tests/conftest.py", "tests/graded/")


class BundleError(Exception):
    """The bundle cannot be written; the message says why."""


def tracked_files(root: Path) -> list[str]:
    """The repository's files (``git ls-files`` in a checkout, else every file but caches)."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
            cwd=root,
            capture_output=True,
            check=True,
        ).stdout
        names = [n for n in out.decode().split("\0") if n and (root / n).is_file()]
        if names:
            return sorted(names)
    except (OSError, subprocess.CalledProcessError):
        pass
    skip = {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", "runs", "dist"}
    return sorted(
        str(p.relative_to(root))
        for p in root.rglob("*")
        if p.is_file() and not skip & set(p.relative_to(root).parts)
    )


def _in(name: str, prefixes: Sequence[str]) -> bool:
    return any(name == p or (p.endswith("/") and name.startswith(p)) for p in prefixes)


def autograder(out: Path, root: Path | None = None) -> Path:
    """Write the Gradescope autograder zip to ``out``."""
    root = root or repo_root()
    if not (root / "solutions").is_dir():
        raise BundleError(f"{root} has no solutions/: build the autograder from the full repo")
    hidden_points(root)
    names = [n for n in tracked_files(root) if _in(n, AUTOGRADER_PARTS)]
    with atomic_file(out) as handle, zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as zf:
        for script in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(script, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16
            zf.writestr(info, (GRADESCOPE / script).read_bytes(), zipfile.ZIP_DEFLATED)
        for name in names:
            zf.write(root / name, name)
    return out


def hidden_points(root: Path) -> dict[str, float]:
    """Import the hidden checks and read ``grading.toml`` against every exercise, as the
    autograder will (a mistake is said now, not on the first submission); returns the
    points per practical that only the autograder grades. The hidden checks are forgotten
    afterwards: nothing recorded later in this process holds them."""
    from m2l_nlp.grading.checks.catalog import hidden_checks, load_exercises, read_settings
    from m2l_nlp.grading.checks.settings import SettingsError

    points: dict[str, float] = {}
    try:
        with hidden_checks(root) as hidden:
            read_settings(root)
            for ex in load_exercises().values():
                if ex.name in hidden:
                    points[ex.practical] = points.get(ex.practical, 0.0) + ex.points
    except SettingsError as err:
        raise BundleError(str(err)) from None
    except Exception as err:  # noqa: BLE001 - the instructor's hidden checks do not import
        message = f"the hidden checks in solutions/hidden/ do not import: {err!r}"
        raise BundleError(message) from None
    return points


def _check_replaceable(out: Path) -> None:
    """An ``out`` that exists must be an earlier handout (nothing else is replaced)."""
    if out.exists() and not (out / HANDOUT_MARK).is_file():
        raise BundleError(
            f"{out} exists and was not written by `make handout`: choose another folder "
            "or move it away"
        )


def _replace_folder(tmp: Path, out: Path) -> None:
    """Move ``tmp`` to ``out``, in place of an earlier handout."""
    _check_replaceable(out)
    if out.exists():
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


def handout(out: Path, root: Path | None = None) -> Path:
    """Write the student handout to the folder ``out`` (see the module docstring)."""
    from m2l_nlp.grading.checks import expected
    from m2l_nlp.grading.checks.catalog import load_exercises
    from m2l_nlp.grading.checks.runner import reference, stub_lines_of
    from m2l_nlp.grading.trusted.recording import record

    root = root or repo_root()
    if not (root / "solutions").is_dir():
        raise BundleError(f"{root} has no solutions/: build the handout from the full repo")
    out = out.resolve()
    _check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        for name in tracked_files(root):
            solved = name.startswith("notebooks/") and "_solved" in name
            if solved or (_in(name, HANDOUT_LEFT_OUT) and not _in(name, HANDOUT_KEPT_TESTS)):
                continue
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, tmp / name)
        practicals = dict.fromkeys(ex.practical for ex in load_exercises().values())
        for practical in practicals:
            ref = reference(practical)
            recorder = record(practical, ref, stub_lines_of(ref))
            expected.save(recorder, practical, tmp / "m2l_nlp" / "grading" / "checks" / "expected")
        hidden = hidden_points(root)
        if hidden:  # the local score table says which points only the autograder grades
            lines = [f"{p} = {v:g}" for p, v in hidden.items()]
            with open(tmp / "grading.toml", "a", encoding="utf-8") as handle:
                handle.write(
                    "\n# Written by `make handout`: points graded by the autograder only.\n"
                    "[hidden.points]\n" + "\n".join(lines) + "\n"
                )
        (tmp / HANDOUT_MARK).write_text("written by `make handout`; safe to replace\n")
        tmp.chmod(0o755)
        _replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m m2l_nlp.grading.trusted.bundle")
    parser.add_argument("what", choices=("autograder", "handout"))
    parser.add_argument("out", type=Path, help="the zip (autograder) or folder (handout)")
    args = parser.parse_args(argv)
    # The handout's answers are recorded as the graded tests compute them (read when JAX
    # starts its backend, which nothing has done yet in this process).
    os.environ["XLA_FLAGS"] = checking_xla_flags(os.environ.get("XLA_FLAGS", ""))
    try:
        path = autograder(args.out) if args.what == "autograder" else handout(args.out)
    except (BundleError, OSError, RuntimeError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    if args.what == "handout":
        points = sum(hidden_points(repo_root()).values())
        print(
            "left out: solutions/ and the solved notebooks; the hidden checks of "
            f"solutions/hidden/ ({points:g} points) are graded by the autograder only"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
