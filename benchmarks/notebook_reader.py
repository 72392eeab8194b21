"""The root grader's own peak memory and time when it reads the worst notebooks it can be given.

    python benchmarks/notebook_reader.py [--cases NAME ...] [--find]

Each notebook is as large as the file cap (``MAX_FILE_BYTES``, 20 MiB) allows: one 10-million
character line followed by many short statements (on that line or on lines of their own),
many tiny statements, deep nesting (of the JSON and of the code), one large string (ASCII, and
wide: one character outside the BMP makes Python store each one in 4 bytes), bytes that are not
UTF-8 (each replaced by 3 bytes), huge outputs, many cells. Each is read in a fresh process of
its own, which reads the file (its baseline), calls ``module_from_notebook_bounded`` (or, with
``--find``, ``find_practicals`` on a submission that holds it) and reports its peak resident
memory (``RUSAGE_SELF``), the reading process's (``RUSAGE_CHILDREN``) and the seconds.
Prints one row per notebook: its size, the outcome, and those figures in MiB.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MIB = 2**20
CAP = 20 * MIB - 4096  # under MAX_FILE_BYTES, with room for the JSON around the cells
LONG = 10_000_000


def _notebook(*sources: str, outputs: list | None = None) -> bytes:
    cells = [
        {"cell_type": "code", "metadata": {}, "source": s, "outputs": outputs or []}
        for s in sources
    ]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4}).encode()


def _statements(prefix: str, separator: str, count: int | None = None) -> str:
    """``prefix`` then ``a<i> = <i>`` statements, ``count`` of them or as many as fit."""
    parts, size, i = [prefix], len(prefix), 0
    while (count is None or i < count) and size < CAP - 64:
        part = f"{separator}a{i} = {i}"
        parts.append(part)
        size += len(part)
        i += 1
    return "".join(parts)


def _long_line() -> str:
    return 'x = "' + "A" * LONG + '"'


CASES = {
    "long line; 20 statements": lambda: _notebook(_statements(_long_line(), "; ", 20)),
    "long line; 1000 statements": lambda: _notebook(_statements(_long_line(), "; ", 1000)),
    "long line; statements to the cap": lambda: _notebook(_statements(_long_line(), "; ")),
    "long line, then 100k lines": lambda: _notebook(_statements(_long_line(), "\n", 100_000)),
    "tiny statements": lambda: _notebook("a;" * (CAP // 2)),
    "deep JSON": lambda: b"[" * CAP,
    "deep code": lambda: _notebook("x = " + "(" * (CAP - 10)),
    "one large string": lambda: _notebook('x = "' + "A" * (CAP - 100) + '"'),
    "one large string, wide": lambda: _notebook('x = "\U0001f600' + "A" * (CAP - 100) + '"'),
    "bytes not UTF-8": lambda: _notebook('x = "' + "@" * (CAP - 100) + '"').replace(b"@", b"\xff"),
    "huge outputs": lambda: _notebook(
        "A = 1", outputs=[{"output_type": "stream", "name": "stdout", "text": "A" * (CAP - 200)}]
    ),
    "many cells": lambda: _notebook(*["A = 1"] * (CAP // 75)),
}


def _measure(path: Path, find: bool) -> dict:
    """Run in the measuring process: read ``path`` as the grader does, return the figures."""
    sys.path.insert(0, str(ROOT))
    from m2l_nlp.grading.trusted import submission

    data = b"" if find else path.read_bytes()  # find_practicals reads the file itself
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    start = time.perf_counter()
    try:
        if find:
            found = submission.find_practicals(path.parent, ["p2"])["p2"]
            text, problem = found.text, found.problem
        else:
            text, problem = submission.module_from_notebook_bounded(data, "p2.ipynb"), ""
    except submission.NotebookError as err:
        text, problem = None, str(err)
    seconds = time.perf_counter() - start
    return {
        "outcome": f"module of {len(text):,} chars" if text is not None else problem[:70],
        "baseline": rss / 1024,
        "peak": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "reader": resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024,
        "seconds": seconds,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--cases", nargs="*", choices=list(CASES), default=list(CASES))
    parser.add_argument("--find", action="store_true", help="through find_practicals")
    parser.add_argument("--build", nargs=2, help=argparse.SUPPRESS)
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.build:
        Path(args.build[1]).write_bytes(CASES[args.build[0]]())
        return
    if args.measure:
        print(json.dumps(_measure(args.measure, args.find)))
        return
    print(
        f"{'notebook':34} {'MiB':>5} {'baseline':>8} {'peak':>6} {'grown':>6} {'reader':>7} "
        f"{'s':>5}  outcome"
    )
    for name in args.cases:
        with tempfile.TemporaryDirectory() as folder:
            path = Path(folder) / "p2.ipynb"
            # Built and measured in fresh processes: a process started by this one begins
            # with this one's peak (Linux keeps it across exec), so this one stays small.
            subprocess.run([sys.executable, __file__, "--build", name, str(path)], check=True)
            size = path.stat().st_size / MIB
            command = [sys.executable, __file__, "--measure", str(path)]
            done = subprocess.run(
                command + ["--find"] * args.find, capture_output=True, text=True, check=True
            )
        row = json.loads(done.stdout)
        print(
            f"{name:34} {size:5.1f} {row['baseline']:8.0f} {row['peak']:6.0f} "
            f"{row['peak'] - row['baseline']:6.0f} {row['reader']:7.0f} {row['seconds']:5.1f}  "
            f"{row['outcome']}"
        )


if __name__ == "__main__":
    main()
