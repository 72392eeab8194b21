"""Does each module's test file notice when the module breaks?

For every module of m2l_nlp/ and each of its public functions (top-level ``def``s and the
public methods of its top-level classes), a scratch copy of the course gets that function's
body replaced by ``raise RuntimeError``, and the module's mirrored test file
(``tests/<package>/test_<module>.py``, its quick tests) runs there. A run that passes is a
function whose breakage no test notices. Prints one row per module and writes the table
as Markdown with ``--out``.

    python benchmarks/breakage.py                                # every module (hours)
    python benchmarks/breakage.py m2l_nlp/runs/folders.py -j 2   # some modules
    python benchmarks/breakage.py m2l_nlp/grading/practicals/practical3/*.py \
        --select "causal_mask or greedy_decode"                  # only the tests pytest -k selects
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BROKEN = "raise RuntimeError('broken on purpose by benchmarks/breakage.py')"


# Where the mirror's name is taken: the graded checks of a practical are tested per practical
# (its mutants must fail them, its reference pass them), and so are the stacks' checks shared
# by practicals 2 and 3; the graders' command line (a second tests/test_cli.py would clash with
# the course's) by the plugin's runs; the translation pairs (tests/data/test_translation.py
# would clash with the translation runs' file) beside the runs, which share their small split;
# the Colab setup cell's source by the notebooks' tests, which run it; an epoch's records by the
# loop's tests.
ELSEWHERE = {
    "m2l_nlp/authoring/setup_cell.py": "tests/authoring/test_notebooks.py",  # the cell's source
    "m2l_nlp/train/progress.py": "tests/train/test_loop.py",  # the loop's records of an epoch
    "m2l_nlp/data/translation.py": "tests/runs/test_translation.py",
    "m2l_nlp/grading/local/cli.py": "tests/grading/local/test_pytest_plugin.py",
    "m2l_nlp/grading/practicals/stacks.py": "tests/grading/practicals/test_mutants.py",
    "m2l_nlp/grading/practicals/practical1": "tests/grading/practicals/test_practical1.py",
    "m2l_nlp/grading/practicals/practical2": (
        "tests/grading/practicals/test_practical2.py",
        "tests/grading/practicals/test_mutants.py",
    ),
    "m2l_nlp/grading/practicals/practical3": "tests/grading/practicals/test_mutants.py",
}


def test_files_of(module: Path) -> list[Path]:
    """``m2l_nlp/a/b.py`` -> ``[tests/a/test_b.py]`` (relative to the course; :data:`ELSEWHERE`
    names the exceptions, a practical's checks in two files: its own and the mutants')."""
    for where in (str(module), str(module.parent)):
        if where in ELSEWHERE:
            names = ELSEWHERE[where]
            return [Path(name) for name in ((names,) if isinstance(names, str) else names)]
    relative = module.relative_to("m2l_nlp")
    return [Path("tests", *relative.parts[:-1], f"test_{relative.stem}.py")]


def public_functions(source: str) -> list[tuple[str, int, int]]:
    """``(qualified name, first body line, last line)`` of each public function: top-level
    ``def``s and the public methods of top-level classes (1-based lines)."""
    found = []

    def add(node: ast.AST, name: str) -> None:
        one_line = isinstance(node, ast.AST) and node.body[0].lineno == node.lineno
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not one_line:
            found.append((name, node.body[0].lineno, node.end_lineno))

    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            if not node.name.startswith("_"):
                add(node, node.name)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            for inner in node.body:
                if isinstance(inner, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    if not inner.name.startswith("_") or inner.name == "__call__":
                        add(inner, f"{node.name}.{inner.name}")
    return found


def broken(source: str, first: int, last: int) -> str:
    """``source`` with the body from line ``first`` to ``last`` replaced by a raise (a
    docstring, if the body starts with one, stays: it is what ``first`` points at)."""
    lines = source.splitlines(keepends=True)
    body_indent = lines[first - 1][: len(lines[first - 1]) - len(lines[first - 1].lstrip())]
    return "".join([*lines[: first - 1], f"{body_indent}{BROKEN}\n", *lines[last:]])


def _course_copy(into: Path) -> Path:
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    return into


def _passes(copy: Path, tests: list[Path], timeout: float, select: str = "") -> bool:
    """Whether the quick tests of ``tests`` (those ``pytest -k select`` selects, if given)
    pass in ``copy`` (its m2l_nlp imported first)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "M2L_ROOT": str(copy)}
    command = [sys.executable, "-m", "pytest", *map(str, tests), "-x", "-q", "-m", "not slow"]
    command += ["-k", select] if select else []
    command += ["-p", "no:cacheprovider", "-p", "no:xdist", "--impl", "solutions"]
    try:
        done = subprocess.run(
            command, cwd=copy, env=env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return False  # a test that hangs on a broken function noticed something
    return done.returncode == 0


def check_module(module: Path, timeout: float, select: str = "") -> tuple[int, list[str], str]:
    """``(functions, names no test notices, note)`` for ``module`` (relative path)."""
    tests = test_files_of(module)
    source = (ROOT / module).read_text()
    functions = public_functions(source)
    if missing := [str(t) for t in tests if not (ROOT / t).is_file()]:
        return len(functions), [name for name, _, _ in functions], f"no {', '.join(missing)}"
    # a process a test left behind may still write there: a failed clean-up must not cost the row
    with tempfile.TemporaryDirectory(prefix="breakage-", ignore_cleanup_errors=True) as scratch:
        copy = _course_copy(Path(scratch))
        if not _passes(copy, tests, timeout, select):
            return len(functions), [], f"{' '.join(map(str, tests))} fails unbroken"
        unnoticed = []
        for name, first, last in functions:
            (copy / module).write_text(broken(source, first, last))
            if _passes(copy, tests, timeout, select):
                unnoticed.append(name)
        (copy / module).write_text(source)
    return len(functions), unnoticed, ""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("modules", nargs="*", help="m2l_nlp/... files (default: every module)")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="modules checked at once")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per test run")
    parser.add_argument("--out", type=Path, help="write the table as Markdown here")
    parser.add_argument(
        "--select", default="", help="run only the tests `pytest -k SELECT` selects (a practical's)"
    )
    args = parser.parse_args(argv)
    modules = [Path(m) for m in args.modules] or sorted(
        p.relative_to(ROOT)
        for p in (ROOT / "m2l_nlp").rglob("*.py")
        if p.name not in ("__init__.py", "__main__.py")
    )
    rows = ["| module | public functions | no test notices | note |", "|---|---|---|---|"]
    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        futures = {m: pool.submit(check_module, m, args.timeout, args.select) for m in modules}
        for module, future in futures.items():
            try:
                count, unnoticed, note = future.result()
            except Exception as error:  # noqa: BLE001 - one module's failure is its row's note
                count, unnoticed, note = 0, [], f"not measured: {type(error).__name__}: {error}"
            names = ", ".join(f"`{n}`" for n in unnoticed) or "-"
            rows.append(f"| `{module}` | {count} | {len(unnoticed)}: {names} | {note} |")
            print(rows[-1], flush=True)
    print(f"{len(modules)} modules in {time.monotonic() - start:.0f} s")
    if args.out:
        args.out.write_text("\n".join(rows) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
