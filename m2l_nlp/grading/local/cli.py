"""Command-line entry of the grader: ``python -m m2l_nlp.grading`` and ``m2l-nlp grade``."""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Sequence

from m2l_nlp.impl import available_impls, repo_root


def run_pytest(args: Sequence[str] = ()) -> int:
    """Grade with pytest from the repository root; returns pytest's exit code.

    ``args`` are pytest's (e.g. ``["--impl", "solutions", "-m", "classifier",
    "--results-json", "results.json"]``); with no path among them, ``tests/graded`` is
    graded, as plain ``pytest`` at the root does.
    """
    import pytest

    root = repo_root()
    if not (root / "tests" / "graded").is_dir():
        print(
            f"error: {root / 'tests' / 'graded'} not found: run from the repository root or "
            "set M2L_ROOT to the clone",
            file=sys.stderr,
        )
        return 4
    # This process imported m2l_nlp before pytest could mark it (the plugin's package) for
    # assertion rewriting; pytest would warn about that on every run. The graded checks
    # raise CheckFailure with messages of their own, so nothing is lost.
    quiet = ["-W", "ignore::pytest.PytestAssertRewriteWarning"]
    with contextlib.chdir(root) if hasattr(contextlib, "chdir") else _chdir(root):
        return int(pytest.main([*quiet, *args]))


@contextlib.contextmanager
def _chdir(path: os.PathLike[str] | str):  # contextlib.chdir is Python >= 3.11
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


IMPL_HELP = (
    "  --impl {exercises,solutions}  what to grade (default: exercises, your work; env M2L_IMPL)\n"
)
HELP = """\
usage: m2l-nlp grade [OPTIONS] [PYTEST OPTIONS]

Grade the exercises with pytest and print the score table.

grader options:
{impl}  -m EXERCISE                   one exercise only, e.g. -m multihead_attention
                                (the names are in the score table)
  --results-json PATH           also write the scores as Gradescope's results.json
  --grade-timeout SECONDS       stop a graded check after this long (default 120)
  -x                            stop at the first failed check

Every other option goes to pytest (`pytest --help` lists them); `m2l-nlp grade` is the same
as running `pytest` at the repository root.
"""


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if "-h" in args or "--help" in args:
        # a handout grades exercises/ alone: --impl has no other choice to offer there
        impl = IMPL_HELP if len(available_impls()) > 1 else ""
        print(HELP.replace("{impl}", impl), end="")
        return 0
    return run_pytest(args)
