"""What an instructor hands out: the Gradescope autograder zip, and the student handout.

    python -m m2l_nlp.grading.trusted.bundle autograder dist/autograder.zip   # make autograder
    python -m m2l_nlp.grading.trusted.bundle handout dist/handout --repository URL  # make handout

- The **autograder** zip holds ``setup.sh`` and ``run_autograder`` (from
  ``m2l_nlp/grading/trusted/gradescope/``) at its top, with what they install and run: the
  library, ``pyproject.toml`` and ``solutions/`` (readable by root only once installed).
- The **handout** is the students' repository (at ``URL``): without ``solutions/``, the solved
  notebooks and the instructor's tests, CI and benchmarks, with the students' README and
  Makefile (:mod:`.handout_docs`) and notebooks that point at ``URL``; it carries the
  reference's answers to every check instead (``m2l_nlp/grading/checks/expected/``, recorded
  here), so ``pytest`` in it grades the exercises with the same checks and messages. A later
  exercise then calls the student's own earlier ones (no reference stands in for them).
- The hidden checks (``solutions/hidden/``) are checked whenever either is made, and by
  ``make solutions``: a hidden exercise may neither take a public one's name nor target a
  name its practical does not define, and the reference passes each of its checks on
  several fresh grading seeds.

Both are written under a temporary name, then renamed. An existing handout is replaced only
if it holds nothing but what this tool wrote there (its mark lists it), and what its users
made in it (``.git/``, ``.venv/``, ``runs/``...: :data:`KEPT_IN_PLACE`) moves into the new one.
"""

from __future__ import annotations

import argparse
import fnmatch
import os
import re
import secrets
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from m2l_nlp.devices import checking_xla_flags
from m2l_nlp.fileio import atomic_file
from m2l_nlp.impl import repo_root

GRADESCOPE = Path(__file__).with_name("gradescope")
HANDOUT_MARK = ".m2l-handout"  # a folder with this file was written by `make handout`
AUTOGRADER_PARTS = ("pyproject.toml", "README.md", "grading.toml", "m2l_nlp/", "solutions/")
# the instructor's class tools (m2l_nlp/grading/classroom/) are not a student's either
HANDOUT_LEFT_OUT = (
    "solutions/",
    ".ci/",
    "benchmarks/",
    "tests/",
    "docs/",
    "m2l_nlp/grading/classroom/",
)
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
    hidden_points(root, seeds=HIDDEN_SEEDS)
    names = [n for n in tracked_files(root) if _in(n, AUTOGRADER_PARTS)]
    with atomic_file(out) as handle, zipfile.ZipFile(handle, "w", zipfile.ZIP_DEFLATED) as zf:
        for script in ("setup.sh", "run_autograder"):
            info = zipfile.ZipInfo(script, date_time=(2020, 1, 1, 0, 0, 0))
            info.external_attr = 0o755 << 16
            zf.writestr(info, (GRADESCOPE / script).read_bytes(), zipfile.ZIP_DEFLATED)
        for name in names:
            zf.write(root / name, name)
    return out


HIDDEN_SEEDS = 5  # grading seeds each hidden check is tried on against the reference


def hidden_points(root: Path, seeds: int = 0) -> dict[str, float]:
    """Import the hidden checks and read ``grading.toml`` against every exercise, as the
    autograder will (a mistake is said now, not on the first submission); returns the
    points per practical that only the autograder grades. With ``seeds``, every hidden
    check must also pass with the reference as the graded code on that many fresh grading
    seeds (:func:`check_hidden`). The hidden checks are in that catalog only."""
    from m2l_nlp.grading.checks.catalog import load_exercises
    from m2l_nlp.grading.checks.settings import SettingsError

    points: dict[str, float] = {}
    try:
        exercises = load_exercises(root, hidden=True)  # a catalog of its own
        hidden = [ex for ex in exercises.values() if ex.hidden]
        _check_targets(hidden)
        for ex in exercises.values():
            if ex.uncovered():
                raise BundleError(
                    f"the exercise {ex.name!r}: no gate check compares "
                    f"{', '.join(ex.uncovered())} with the reference, so trivial code "
                    "there could earn points (a gate in grading.toml [gates], or "
                    "@ex.check(gate=True, covers=...))"
                )
            if ex.hidden:
                points[ex.practical] = points.get(ex.practical, 0.0) + ex.points
        if seeds:
            check_hidden(hidden, seeds)
    except (SettingsError, BundleError) as err:
        raise BundleError(str(err)) from None
    except Exception as err:  # noqa: BLE001 - the instructor's hidden checks do not import
        message = f"the hidden checks in solutions/hidden/ do not import: {err}"
        raise BundleError(message) from None
    return points


def _check_targets(exercises: Sequence[Any]) -> None:
    from m2l_nlp.grading.checks.runner import reference

    for ex in exercises:
        for target in ex.targets:
            if not hasattr(reference(ex.practical), target):
                raise BundleError(
                    f"the hidden exercise {ex.name!r} targets {target!r}, which "
                    f"solutions/{ex.practical}.py does not define"
                )


def check_hidden(exercises: Sequence[Any], seeds: int = HIDDEN_SEEDS) -> None:
    """Raise :class:`BundleError` for a hidden exercise that targets a name its practical
    does not define, or whose check the reference fails on one of ``seeds`` fresh grading
    seeds: found here, never by a student's grading."""
    from m2l_nlp.grading.checks.runner import judge_check, reference
    from m2l_nlp.grading.checks.tools import seeded

    _check_targets(exercises)
    for ex in exercises:
        ref = reference(ex.practical)
        for seed in (secrets.randbits(62) + 1 for _ in range(seeds)):
            for chk in ex.checks:
                with seeded(seed):
                    status, message = judge_check(ex, chk, ref, ref, [], set())
                if status != "passed":
                    first = message.strip().splitlines()[0] if message.strip() else status
                    raise BundleError(
                        f"the reference fails the hidden check {ex.name}/{chk.name} on grading "
                        f"seed {seed}: {first}"
                    )


PLACEHOLDER = "https://github.com/m2l-nlp/m2l-nlp"  # pyproject.toml's until a fork names its own
# In an earlier handout, what its users made there: moved into the new one, never replaced
# (a repository, an environment, caches, training runs), as is everything its .gitignore
# ignores (downloads and caches under data/, results.json...). Bytecode caches are dropped.
KEPT_IN_PLACE = (".git", ".venv", ".pytest_cache", ".ruff_cache", ".ipynb_checkpoints", "runs")


def gitignored(gitignore: str) -> Callable[[str, bool], bool]:
    """``ignored(path, folder)``: whether the ``.gitignore`` text ``gitignore`` ignores
    ``path`` (relative, ``/``-separated; ``folder`` if it is one), for the patterns a course
    uses: ``*``, ``?`` and ``[...]`` within a name, a leading or inner ``/`` to anchor at the
    top, a trailing ``/`` for folders, ``!`` to take back. As in git, what lies in an
    ignored folder is ignored, whatever a later ``!`` says."""
    rules = []
    for line in gitignore.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        keep = line.startswith("!")
        line = line.removeprefix("!")
        anchored = "/" in line.rstrip("/")
        rules.append((keep, line.endswith("/"), anchored, line.strip("/").split("/")))

    def matches(parts: list[str], folder: bool, rule: tuple) -> bool:
        _, folders_only, anchored, pattern = rule
        if folders_only and not folder:
            return False
        if not anchored:
            return fnmatch.fnmatchcase(parts[-1], pattern[0])
        return len(parts) == len(pattern) and all(map(fnmatch.fnmatchcase, parts, pattern))

    def ignored(path: str, folder: bool = False) -> bool:
        parts = path.split("/")
        for depth in range(1, len(parts) + 1):
            inside = depth < len(parts) or folder
            state = False
            for rule in rules:
                if matches(parts[:depth], inside, rule):
                    state = not rule[0]
            if state:
                return True
        return False

    return ignored


def _written_before(out: Path) -> set[str]:
    """The files an earlier ``make handout`` wrote into ``out`` (listed in its mark)."""
    lines = (out / HANDOUT_MARK).read_text(encoding="utf-8").splitlines()
    return {line.removeprefix("- ") for line in lines if line.startswith("- ")}


def _made_there(out: Path) -> tuple[list[str], list[str]]:
    """What the users of the earlier handout ``out`` made in it, outside :data:`KEPT_IN_PLACE`
    and bytecode caches: ``(kept, foreign)``. ``kept``: the files and whole folders its
    ``.gitignore`` ignores (moved into the new handout); ``foreign``: the other files that
    its mark does not list (a reason to refuse)."""
    written = _written_before(out) | {HANDOUT_MARK}
    rules = out / ".gitignore"
    ignored = gitignored(rules.read_text(encoding="utf-8") if rules.is_file() else "")
    kept, foreign = [], []
    for top, folders, files in os.walk(out):
        here = Path(top).relative_to(out)
        for name in list(folders):
            rel = (here / name).as_posix()
            if (here == Path(".") and name in KEPT_IN_PLACE) or name == "__pycache__":
                folders.remove(name)
            elif ignored(rel, folder=True) and not any(w.startswith(f"{rel}/") for w in written):
                folders.remove(name)  # moved whole
                kept.append(rel)
            elif (out / rel).is_symlink():  # a link to a folder: moved, never followed
                files.append(name)
        for name in files:
            rel = (here / name).as_posix()
            if rel in written:
                continue
            (kept if ignored(rel) else foreign).append(rel)
    return sorted(kept), sorted(foreign)


def _check_replaceable(out: Path) -> None:
    """An ``out`` that exists must hold only what an earlier handout wrote, what its users
    made there that its ``.gitignore`` ignores, and :data:`KEPT_IN_PLACE`."""
    if not out.exists():
        return
    if not (out / HANDOUT_MARK).is_file():
        raise BundleError(
            f"{out} exists and was not written by `make handout`: choose another folder "
            "or move it away"
        )
    _, foreign = _made_there(out)
    if foreign:
        shown = ", ".join(foreign[:5]) + (
            f" and {len(foreign) - 5} more" if len(foreign) > 5 else ""
        )
        raise BundleError(
            f"{out} holds files `make handout` did not write ({shown}): move them away, "
            "or commit them to the course repository"
        )


def _keep_dates_of_unchanged(tmp: Path, out: Path) -> None:
    """A file of the new handout ``tmp`` that the earlier one ``out`` held with the same bytes
    keeps its date: ``make`` then installs the environment again only when pyproject.toml
    changed."""
    for path in tmp.rglob("*"):
        old = out / path.relative_to(tmp)
        if path.is_file() and not path.is_symlink() and old.is_file() and not old.is_symlink():
            if old.read_bytes() == path.read_bytes():
                stat = old.stat()
                os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))


def _replace_folder(tmp: Path, out: Path) -> None:
    """Move ``tmp`` to ``out``, in place of an earlier handout: what its users made there
    (:data:`KEPT_IN_PLACE`, what its ``.gitignore`` ignores) moves into the new one."""
    _check_replaceable(out)
    if out.exists():
        kept, _ = _made_there(out)
        _keep_dates_of_unchanged(tmp, out)
        for name in [*KEPT_IN_PLACE, *kept]:
            if (out / name).exists() or (out / name).is_symlink():
                if not (tmp / name).exists():  # the new handout's own file wins
                    (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                    (out / name).rename(tmp / name)
        old = out.with_name(f".{out.name}.old")
        shutil.rmtree(old, ignore_errors=True)
        out.rename(old)
        tmp.rename(out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        tmp.rename(out)


def _check_repository(repository: str | None) -> str:
    if not repository or repository.rstrip("/") == PLACEHOLDER:
        raise BundleError(
            "name the handout's own repository: make handout "
            "REPOSITORY=https://github.com/you/your-course (its Colab links and notebooks "
            "point there)"
        )
    if not repository.startswith("https://github.com/"):
        raise BundleError(f"REPOSITORY must be a https://github.com/... address, not {repository}")
    return repository.rstrip("/")


def _student_files(root: Path, tmp: Path, repository: str) -> list[str]:
    """Write the handout's README, Makefile, grading.toml, pyproject.toml and notebooks, made
    for its own repository (see :mod:`.handout_docs`); returns their names."""
    from m2l_nlp.authoring import notebooks as make
    from m2l_nlp.grading.trusted.handout_docs import handout_cut, handout_readme

    made = {
        "README.md": handout_readme(
            (root / "README.md").read_text(encoding="utf-8"),
            "\n".join(make.readme_links(root, repository, solved=False).splitlines()[1:-1]),
            make.README_BEGIN,
            make.README_END,
        ),
        "Makefile": handout_cut((root / "Makefile").read_text(encoding="utf-8"), "Makefile"),
        "grading.toml": handout_cut(
            (root / "grading.toml").read_text(encoding="utf-8"), "grading.toml"
        ),
    }
    pyproject = handout_cut((root / "pyproject.toml").read_text(encoding="utf-8"), "pyproject.toml")
    made["pyproject.toml"], count = re.subn(
        r'^Repository = "[^"]*"', f'Repository = "{repository}"', pyproject, flags=re.M
    )
    if count != 1:
        raise BundleError("pyproject.toml should set [project.urls] Repository once")
    for path, text in make.planned(root, url=repository).items():
        name = path.relative_to(root).as_posix()
        if name.startswith("notebooks/") and make.SOLVED_SUFFIX not in name:
            made[name] = text
    for name, text in made.items():
        (tmp / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp / name).write_text(text, encoding="utf-8")
    return list(made)


def handout(out: Path, root: Path | None = None, repository: str | None = None) -> Path:
    """Write the student handout to the folder ``out`` (see the module docstring), a
    repository of its own at ``repository``."""
    from m2l_nlp.grading.checks import expected
    from m2l_nlp.grading.checks.catalog import load_exercises
    from m2l_nlp.grading.checks.runner import reference, stub_lines_of
    from m2l_nlp.grading.trusted.handout_docs import MarkerError
    from m2l_nlp.grading.trusted.recording import record

    root = root or repo_root()
    if not (root / "solutions").is_dir():
        raise BundleError(f"{root} has no solutions/: build the handout from the full repo")
    repository = _check_repository(repository)
    out = out.resolve()
    _check_replaceable(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=out.parent))
    try:
        try:
            made = set(_student_files(root, tmp, repository))
        except MarkerError as err:  # an instructor's marker without its pair: one line
            raise BundleError(str(err)) from None
        for name in tracked_files(root):
            solved = name.startswith("notebooks/") and "_solved" in name
            left_out = _in(name, HANDOUT_LEFT_OUT) and not _in(name, HANDOUT_KEPT_TESTS)
            if solved or left_out or name in made:
                continue
            (tmp / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(root / name, tmp / name)
        exercises = load_exercises(root)
        practicals = dict.fromkeys(ex.practical for ex in exercises.values())
        for practical in practicals:
            ref = reference(practical)
            recorder = record(exercises, practical, ref, stub_lines_of(ref))
            expected.save(recorder, practical, tmp / "m2l_nlp" / "grading" / "checks" / "expected")
        hidden = hidden_points(root)
        if hidden:  # the local score table says which points only the autograder grades
            lines = [f"{p} = {v:g}" for p, v in hidden.items()]
            with open(tmp / "grading.toml", "a", encoding="utf-8") as handle:
                handle.write(
                    "\n# Points graded by the autograder only (written when this copy was made).\n"
                    "[hidden.points]\n" + "\n".join(lines) + "\n"
                )
        written = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
        (tmp / HANDOUT_MARK).write_text(
            "Written by the course's handout builder (m2l_nlp/grading/trusted/bundle.py), which "
            "replaces these files and keeps what you made here:\n"
            + "".join(f"- {name}\n" for name in written)
        )
        tmp.chmod(0o755)
        _replace_folder(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m m2l_nlp.grading.trusted.bundle")
    parser.add_argument("what", choices=("autograder", "handout", "check-hidden"))
    parser.add_argument(
        "out", type=Path, nargs="?", help="the zip (autograder) or folder (handout)"
    )
    parser.add_argument(
        "--repository", help="the handout's own repository (https://github.com/...)"
    )
    args = parser.parse_args(argv)
    # The handout's answers are recorded as the graded tests compute them (read when JAX
    # starts its backend, which nothing has done yet in this process).
    os.environ["XLA_FLAGS"] = checking_xla_flags(os.environ.get("XLA_FLAGS", ""))
    if args.what == "check-hidden":  # make solutions: the hidden checks against the reference
        try:
            points = hidden_points(repo_root(), seeds=HIDDEN_SEEDS)
        except BundleError as err:
            print(f"error: {err}", file=sys.stderr)
            return 1
        total = sum(points.values())
        print(f"hidden checks: {total:g} points, passed by the reference on {HIDDEN_SEEDS} seeds")
        return 0
    if args.out is None:
        parser.error(f"{args.what}: give the output path")
    try:
        if args.what == "autograder":
            path = autograder(args.out)
        else:
            path = handout(args.out, repository=args.repository)
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
