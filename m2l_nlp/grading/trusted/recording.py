"""Recording the reference's answers to every check of a practical (the trusted grader does it
once per run; ``make handout`` ships the records): :mod:`m2l_nlp.grading.checks.expected`
replays them."""

from __future__ import annotations

import time
from typing import Any

from m2l_nlp.grading.checks.expected import Recorder
from m2l_nlp.grading.checks.registry import Exercise
from m2l_nlp.grading.checks.runner import judge_check


def record(
    exercises: dict[str, Exercise],
    practical: str,
    reference: Any,
    stub_lines: tuple[str, ...] = (),
) -> Recorder:
    """Run every check of ``practical`` among ``exercises`` (a catalog) with ``reference`` as
    the graded code and record the reference's answers (and its seconds per exercise,
    ``recorder.seconds``); raises ``RuntimeError`` if the reference fails a check."""
    recorder = Recorder(reference, stub_lines)
    for ex in exercises.values():
        if ex.practical != practical:
            continue
        start = time.monotonic()
        for chk in ex.checks:
            status, message = judge_check(ex, chk, reference, recorder, [], set())
            if status != "passed":
                raise RuntimeError(f"the reference fails {ex.name}/{chk.name}: {message}")
        recorder.seconds[ex.name] = time.monotonic() - start
    return recorder
