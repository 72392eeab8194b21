"""The trusted grader's own peak memory when a student's process sends the largest replies.

    python benchmarks/grader_memory.py [--mib N]

For each kind of reply (one big array, many tiny values of each plain type, deep nesting),
a worker whose student code writes that reply straight to the grader's pipe (bypassing the
worker's own checks, as hostile code can) answers one request of a grader process of its
own; that process prints its peak resident memory before and after the request. The reply
is as large as ``wire.MAX_BYTES`` allows (``--mib`` replaces the limit, to see what a larger
one would cost). Prints one row per kind: the outcome and the peak in MiB.
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

KINDS = ("array", "ints", "floats", "strings", "lists", "dicts", "tiny_arrays", "nesting")

STUDENT = """
import base64, json, os, sys, time

def send(kind, size):
    unit = {
        "ints": "0,", "floats": "1e300,", "strings": '"x",', "lists": '{"l":[]},',
        "dicts": '{"d":{}},', "tiny_arrays": '{"a":["<f4",[0],""]},',
    }
    if kind == "array":
        raw = b"\\0" * ((size - 100) * 3 // 4 // 8 * 8)
        array = ["<f8", [len(raw) // 8], base64.b64encode(raw).decode()]
        body = json.dumps({"d": {"ok": {"a": array}}})
    elif kind == "nesting":
        depth = (size - 20) // 13
        body = '{"d":{"ok":' + '{"l":[' * depth + ']}' * depth + '}}'
    else:
        items = unit[kind] * ((size - 40) // len(unit[kind]))
        body = '{"d":{"ok":{"l":[' + items.rstrip(",") + ']}}}'
    data = body.encode()
    os.write(int(sys.argv[2]), len(data).to_bytes(8, "big") + data)
    time.sleep(1e9)
"""


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def one(kind: str, mib: float | None) -> dict:
    """In this process: the grader's side of one request answered with ``kind``."""
    from m2l_nlp.grading.checks import wire
    from m2l_nlp.grading.trusted.remote import RemoteNamespace, Worker, WorkerGone

    if mib:
        wire.MAX_BYTES = int(mib * 2**20)
    folder = Path(tempfile.mkdtemp())
    (folder / "practical_m.py").write_text(STUDENT)
    worker = Worker(folder, None)
    worker.limit, worker.deadline = 120.0, time.monotonic() + 120
    worker.request({"op": "load", "path": str(folder / "practical_m.py"), "name": "practical_m"})
    before = peak_mib()
    start = time.monotonic()
    try:
        value = RemoteNamespace(worker).send(kind, wire.MAX_BYTES)
        outcome = f"decoded ({type(value).__name__})"
    except WorkerGone as gone:
        outcome = f"{type(gone).__name__}: {gone}"
    except Exception as err:  # noqa: BLE001 - a student error rebuilt from the reply
        outcome = f"{type(err).__name__}"
    seconds = time.monotonic() - start
    worker.kill()
    return {"before": before, "peak": peak_mib(), "seconds": seconds, "outcome": outcome[:60]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=float, help="the reply limit in MiB (default: wire's)")
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(args.one, args.mib)))
        return
    from m2l_nlp.grading.checks import wire

    limit = args.mib or wire.MAX_BYTES / 2**20
    print(f"reply limit {limit:g} MiB; the grader's peak resident memory (MiB)")
    print(f"{'reply':12s} {'before':>7s} {'peak':>7s} {'seconds':>8s}  outcome")
    for kind in KINDS:
        command = [sys.executable, __file__, "--one", kind]
        if args.mib:
            command += ["--mib", str(args.mib)]
        out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
        row = json.loads(out.strip().splitlines()[-1])
        print(
            f"{kind:12s} {row['before']:7.0f} {row['peak']:7.0f} {row['seconds']:8.2f}  "
            f"{row['outcome']}"
        )


if __name__ == "__main__":
    main()
