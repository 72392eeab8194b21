"""Fixtures shared by the tests of m2l_nlp.grading.trusted."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable

import pytest

NOBODY = 65534
PYTHON = "/usr/bin/python3"  # one that every user may run (this one may be under /root)


@pytest.fixture
def as_nobody() -> Callable[..., subprocess.CompletedProcess]:
    """``as_nobody(code, *args)``: ``code`` run by the system's Python as the user nobody,
    as a student's process would (its output captured); skips without root or that Python."""
    if os.geteuid() != 0 or not os.access(PYTHON, os.X_OK):
        pytest.skip("needs root and a /usr/bin/python3 for the student's user")

    def run(code: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            [PYTHON, "-I", "-c", code, *args],
            user=NOBODY,
            group=NOBODY,
            extra_groups=[],
            capture_output=True,
            text=True,
            cwd="/",
        )

    run.user, run.python = NOBODY, PYTHON  # for a test that starts its own process as nobody
    return run
