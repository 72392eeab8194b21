"""Tests of m2l_nlp.grading.checks.catalog: the catalog of exercises refuses duplicate names."""

from __future__ import annotations

import pytest

from m2l_nlp.grading.checks.registry import exercise


def test_the_catalog_rejects_duplicate_names():
    from m2l_nlp.grading.checks import catalog

    ex = exercise("demo_registry_dup", "practical_demo_a", 1, targets=("f",))
    ex.check(lambda ctx: None)
    with pytest.raises(ValueError, match="already has a check"):
        ex.check(lambda ctx: None)
    found = {}
    catalog._add(found, [ex, ex])  # the same exercise twice (imported by a second module)
    with pytest.raises(ValueError, match="unique"):
        catalog._add(found, [exercise("demo_registry_dup", "practical_demo_b", 1, ("f",))])
    hidden = exercise("demo_registry_dup", "practical_demo_a", 1, ("f",), hidden=True)
    with pytest.raises(ValueError, match="give the hidden one a name of its own"):
        catalog._add(found, [hidden])


def test_an_exercise_is_found_by_name_and_an_unknown_name_lists_the_known_ones():
    from m2l_nlp.grading.checks import catalog

    assert catalog.get_exercise("scaled_dot_product").practical == "practical2_transformers"
    with pytest.raises(KeyError, match="no exercise called 'scaled_dot_prodcut'.*multihead"):
        catalog.get_exercise("scaled_dot_prodcut")


def test_the_hidden_exercises_are_those_of_solutions_hidden():
    from m2l_nlp.grading.checks import catalog

    hidden = catalog.load_hidden()
    every = catalog.load_exercises(hidden=True)
    assert hidden == [name for name, ex in every.items() if ex.hidden]
    assert not set(hidden) & set(catalog.load_exercises())  # the students' catalog lacks them
