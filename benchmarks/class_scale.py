"""The class report and the similarity search on a large synthetic class.

    python benchmarks/class_scale.py [--students 300] [--seed 0]

Each synthetic student's files are the reference solutions of practicals 1 and 2 with a
random handful of the slips of tests/mutants/ made (none to four) and the variants of
practical 2 taken at random, so that no two are alike by construction yet most share much:
similarity's worst case, many pairs above the threshold. Their gradebook rows are generated,
not graded (grading is linear in submissions and measured apart): each exercise's score falls
with the slips made in it. Prints the seconds the report and the similarity search took, and
the pairs found.
"""

from __future__ import annotations

import argparse
import importlib.util
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from m2l_nlp.grading.classroom.exports import Submission, Submitter  # noqa: E402
from m2l_nlp.grading.classroom.gradebook import Gradebook  # noqa: E402
from m2l_nlp.grading.classroom.similarity import similar_pairs  # noqa: E402
from m2l_nlp.grading.classroom.summary import write_report  # noqa: E402

PRACTICALS = ("practical1_baselines", "practical2_transformers")


def _table(practical: str, name: str) -> dict:
    path = ROOT / "tests" / "mutants" / f"{practical}.py"
    spec = importlib.util.spec_from_file_location(f"mutants_{practical}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name, {})


def student(rng: random.Random) -> tuple[str, dict[str, float]]:
    """One synthetic student's code (practicals 1 and 2) and each exercise's score."""
    texts, scores = [], {}
    for practical in PRACTICALS:
        text = (ROOT / "solutions" / f"{practical}.py").read_text(encoding="utf-8")
        mutants = _table(practical, "MUTANTS")
        slips = [(ex, edits) for ex, cases in mutants.items() for _, edits, *_ in cases]
        variants = [edits for cases in _table(practical, "VARIANTS").values() for _, edits in cases]
        chosen = rng.sample(slips, rng.randint(0, 4)) + rng.sample(variants, len(variants) // 2)
        for exercise in mutants:
            scores[exercise] = 10.0
        for item in chosen:
            exercise, edits = item if isinstance(item, tuple) else (None, item)
            if all(text.count(old) == 1 for old, _ in edits):
                for old, new in edits:
                    text = text.replace(old, new)
                if exercise is not None:
                    scores[exercise] = rng.choice((0.0, 2.5, 5.0))
        texts.append(text)
    return "\n".join(texts), scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--students", type=int, default=300)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    made = [student(rng) for _ in range(args.students)]
    with tempfile.TemporaryDirectory() as folder:
        book = Gradebook(Path(folder) / "gradebook.sqlite")
        run = book.start_run("import")
        for i, (_, scores) in enumerate(made):
            tests = [
                {"name": e, "score": s, "max_score": 10.0, "tags": ["p", e], "status": "x"}
                for e, s in scores.items()
            ]
            checks = [
                {"exercise": e, "check": "c", "status": "passed" if s == 10 else "failed"}
                for e, s in scores.items()
            ]
            results = {
                "score": sum(scores.values()),
                "tests": tests,
                "extra_data": {"checks": checks},
            }
            who = Submitter(f"Student {i}", f"s{i}@example.org", str(i))
            book.record(run, Submission(f"submission_{i}", (who,), ""), results)
        start = time.perf_counter()
        write_report(book.latest(), book.latest_checks(), Path(folder) / "report")
        report = time.perf_counter() - start
        book.close()
    stubs = [(ROOT / "exercises" / f"{p}.py").read_text(encoding="utf-8") for p in PRACTICALS]
    codes = {f"submission_{i}": code for i, (code, _) in enumerate(made)}
    start = time.perf_counter()
    pairs = similar_pairs(codes, stubs)
    similar = time.perf_counter() - start
    n = len(codes)
    print(
        f"{n} students: report {report:.1f} s; similarity {similar:.1f} s over "
        f"{n * (n - 1) // 2} pairs, {len(pairs)} at 50 % or more"
    )


if __name__ == "__main__":
    main()
