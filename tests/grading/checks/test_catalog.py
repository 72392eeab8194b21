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
