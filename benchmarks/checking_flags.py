"""Seconds of the test and grading commands under the XLA flags they compile with
(``m2l_nlp.devices.checking_xla_flags``) and under variants of them, alternated.

Each round runs the suite once as shipped and once per ``--variant NAME=FLAGS`` (``FLAGS``
goes into ``XLA_FLAGS``; a flag named there wins over the checking flags), then prints the
median of each and its ratio to the shipped one. Every run starts from an empty compilation
cache, as on a fresh clone. Suites:

- ``graded``: the graded checks against the solutions (``make test``'s graded line);
- ``library``: the library tests (``make test``'s last line, 2 workers);
- ``slow``: the end-to-end tests (``make test-slow``);
- ``trusted``: the grader for credit (``python -m m2l_nlp.grading.trusted``) on the
  reference solutions as a submission, student code run as the grader's own user;
- ``notebook``: ``check()`` of every exercise on the reference solutions in a plain process,
  as a notebook's check cells run;
- ``handout``: the same in a student's copy (``make handout``, built once per call), where the
  checks compare with the reference's recorded answers and compile the student's side only.

The variant that gives every check XLA's defaults, as a kernel did before its checks took the
checking flags as per-program options (its flags are XLA's defaults, and a flag named in
``XLA_FLAGS`` is no program's option)::

    --variant "XLA defaults=--xla_backend_optimization_level=3
    --xla_cpu_use_fusion_emitters=true --xla_gpu_deterministic_ops=false"

An example:

    python benchmarks/checking_flags.py --suite graded --rounds 3 \\
        --variant "fusion emitters=--xla_cpu_use_fusion_emitters=true"
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = "as shipped"
PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
# The check cells of the notebooks: every exercise's check() in one plain process (no pytest,
# so the checking flags reach only the checks' own programs, as in a kernel), on the
# practicals' files in the folder given as its argument.
CHECK_CELLS = """
import importlib, sys
sys.path.insert(0, sys.argv[1])
from m2l_nlp.grading import check
from m2l_nlp.grading.checks.catalog import load_exercises
ok = True
for name, ex in load_exercises().items():
    practical = importlib.import_module(ex.practical)
    result = check(name, *(getattr(practical, t) for t in ex.targets), verbose=False)
    ok &= result.status == "passed"
sys.exit(0 if ok else 1)
"""
SUITES = {
    "graded": [*PYTEST, "tests/graded", "--impl", "solutions"],
    "library": [*PYTEST, "tests", "--ignore=tests/graded", "--impl", "solutions", "-n", "2"]
    + ["-m", "not slow"],
    "slow": [*PYTEST, "tests", "--ignore=tests/graded", "--impl", "solutions", "-n", "2"]
    + ["-m", "slow"],
    "trusted": [sys.executable, "-m", "m2l_nlp.grading.trusted"],
    "notebook": [sys.executable, "-c", CHECK_CELLS, str(ROOT / "solutions")],
    "handout": [sys.executable, "-c", CHECK_CELLS, "mine"],
}


def run_once(suite: str, flags: str, scratch: Path) -> tuple[float, bool]:
    """``(seconds, passed)`` of one run of ``suite`` with ``XLA_FLAGS=flags``."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "M2L_IMPL")}
    env["XLA_FLAGS"] = flags
    cache = Path(tempfile.mkdtemp(dir=scratch))  # empty: a fresh clone's first run
    command = list(SUITES[suite])
    if suite != "trusted":
        env["JAX_COMPILATION_CACHE_DIR"] = str(cache)
    else:  # the grader keeps no programs
        env.pop("JAX_COMPILATION_CACHE_DIR", None)
        env["M2L_GRADER_USER"] = "root"  # student code as this user (a local trial)
        submission = scratch / "submission"
        if not submission.exists():
            submission.mkdir()
            for path in (ROOT / "solutions").glob("practical*.py"):
                shutil.copy2(path, submission / path.name)
        command += [str(submission), str(scratch / "results.json")]
    cwd = ROOT
    if suite == "handout":  # the student's copy: the reference's recorded answers
        cwd = scratch / "handout"
        if not cwd.exists():
            bundle = [sys.executable, "-m", "m2l_nlp.grading.trusted.bundle", "handout", str(cwd)]
            subprocess.run(bundle, cwd=ROOT, check=True, capture_output=True)
            shutil.copytree(ROOT / "solutions", cwd / "mine")
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    shutil.rmtree(cache, ignore_errors=True)
    passed = done.returncode == 0 and (suite != "trusted" or "170 / 170" in done.stdout)
    return seconds, passed


def compare(suite: str, rounds: int, variants: dict[str, str]) -> int:
    """Time ``suite`` as shipped and under each variant, alternated; print medians, ratios."""
    runs = {SHIPPED: "", **variants}
    seconds: dict[str, list[float]] = {name: [] for name in runs}
    failed = 0
    with tempfile.TemporaryDirectory() as scratch:
        for number in range(rounds):
            for name, flags in runs.items():
                took, passed = run_once(suite, flags, Path(scratch))
                seconds[name].append(took)
                failed += not passed
                print(f"round {number + 1}, {name}: {took:.1f} s" + ("" if passed else " FAILED"))
    shipped = statistics.median(seconds[SHIPPED])
    for name, values in seconds.items():
        median = statistics.median(values)
        print(f"median, {name}: {median:.1f} s ({median / shipped:.2f}x the time as shipped)")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--suite", choices=sorted(SUITES), required=True)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--variant", action="append", default=[], metavar="NAME=FLAGS", help="repeatable"
    )
    args = parser.parse_args(argv)
    variants = {}
    for text in args.variant:
        name, sep, flags = text.partition("=")
        if not sep or not name:
            parser.error(f"--variant takes NAME=FLAGS, not {text!r}")
        variants[name] = flags
    return compare(args.suite, args.rounds, variants)


if __name__ == "__main__":
    sys.exit(main())
