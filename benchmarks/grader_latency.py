"""How long a student waits for `pytest -m <exercise>`: programs compiled and seconds, cold
and warm, per exercise, then for the whole graded run.

Each exercise is graded in a fresh process (as a student runs it) against the reference
solutions, with ``JAX_LOG_COMPILES=1``: the "Finished XLA compilation" lines are the programs
built (compiled, or loaded from the on-disk cache). *Cold* starts from an empty persistent
compilation cache, *warm* runs again with the cache the cold run filled. Seconds are the
wall time of the whole pytest process (import and collection included).

    python benchmarks/grader_latency.py                  # every exercise, then the whole run
    python benchmarks/grader_latency.py -m classifier    # one exercise
    python benchmarks/grader_latency.py --trusted 3      # the grader for credit, 3 rounds

``--trusted N`` times the grader for credit (``python -m m2l_nlp.grading.trusted``) on the
reference solutions as a submission, student code run as the grader's own user: N rounds,
each once at XLA's default backend optimisation level (3) and once with the flags its
worker processes use (``m2l_nlp.devices.checking_xla_flags``), then medians and their ratio
(``benchmarks/checking_flags.py``, which times the other suites under other flags too).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from m2l_nlp.grading.checks.catalog import load_exercises

ROOT = Path(__file__).resolve().parent.parent
COMPILED = "Finished XLA compilation"


def grade(selection: list[str], cache: Path) -> tuple[int, float, int]:
    """``(programs built, seconds, exit status)`` of one graded pytest run."""
    env = dict(os.environ, JAX_LOG_COMPILES="1", JAX_COMPILATION_CACHE_DIR=str(cache))
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # keep every program on disk
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:logging"]
    command += ["-s", "--impl"]  # -s: the compile log is not captured
    start = time.perf_counter()
    done = subprocess.run(
        [*command, "solutions", *selection], cwd=ROOT, env=env, capture_output=True, text=True
    )
    seconds = time.perf_counter() - start
    return (done.stdout + done.stderr).count(COMPILED), seconds, done.returncode


def trusted(rounds: int) -> int:
    """Seconds of the grader for credit on the reference, at XLA's default level and with
    the checking flags, alternated (``rounds`` each); prints the medians and their ratio."""
    from checking_flags import compare  # this folder's: run as ``python benchmarks/...``

    return compare("trusted", rounds, {"default level (3)": "--xla_backend_optimization_level=3"})


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-m", dest="exercises", action="append", help="one exercise (repeat)")
    parser.add_argument("--trusted", type=int, metavar="N", help="time the grader for credit")
    args = parser.parse_args()
    if args.trusted:
        return trusted(args.trusted)
    names = args.exercises or list(load_exercises())
    runs = [(name, ["-m", name]) for name in names]
    if not args.exercises:
        runs.append(("(all, one run)", []))
    print(
        f"{'exercise':28s} {'cold programs':>13s} {'cold s':>7s} {'warm programs':>13s} "
        f"{'warm s':>7s}"
    )
    for name, selection in runs:
        with tempfile.TemporaryDirectory() as cache:
            cold = grade(selection, Path(cache))
            warm = grade(selection, Path(cache))
        status = "" if cold[2] == warm[2] == 0 else f"  (exit {cold[2]}, {warm[2]})"
        print(f"{name:28s} {cold[0]:13d} {cold[1]:7.1f} {warm[0]:13d} {warm[1]:7.1f}{status}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
