"""The graded checks of every practical, one test per check (marker = exercise name).

The checks live in ``m2l_nlp/grading/practicals/practical*/``; this file only runs them. What is
graded is chosen by ``--impl`` (``exercises`` by default).
"""

import pytest

from m2l_nlp.grading.local.pytest_plugin import Grader, graded_params


@pytest.mark.parametrize(("exercise", "check"), graded_params())
def test_graded(grader: Grader, exercise: str, check: str) -> None:
    grader.run(exercise, check)
