"""m2l_nlp.impl: where a practical's code is read from, in the course and in a handout."""

from __future__ import annotations

import sys
import types

import pytest

from m2l_nlp import impl


@pytest.fixture
def handout(tmp_path, monkeypatch):
    """A folder laid out as a student's handout (exercises/ alone), as M2L_ROOT."""
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "__init__.py").write_text("")
    (tmp_path / "exercises" / "practical9_tiny.py").write_text("ANSWER = 42\n")
    monkeypatch.setenv("M2L_ROOT", str(tmp_path))
    monkeypatch.setattr(sys, "path", list(sys.path))  # load_practical puts the handout first
    for name in [n for n in sys.modules if n == "exercises" or n.startswith("exercises.")]:
        monkeypatch.delitem(sys.modules, name)  # back after the test: the course's exercises
    yield tmp_path
    sys.modules.pop("exercises.practical9_tiny", None)


def test_the_course_holds_both_implementations_and_grades_the_reference_by_default():
    assert (impl.repo_root() / "solutions").is_dir()
    assert impl.available_impls() == ("solutions", "exercises")
    assert impl.default_impl() == "solutions"
    assert "solutions (the reference, the default)" in impl.impl_help("what to grade")


def test_a_handout_holds_only_the_exercises_and_says_nothing_of_solutions(handout):
    assert impl.repo_root() == handout.resolve()
    assert impl.available_impls() == ("exercises",)
    assert impl.default_impl() == "exercises"
    assert impl.impl_help("what to grade") == (
        "what to grade: exercises (your own modules, the only ones in this copy)"
    )
    assert impl.load_practical("practical9_tiny", "exercises").ANSWER == 42
    with pytest.raises(FileNotFoundError) as missing:
        impl.load_practical("practical8_absent", "exercises")
    assert "holds exercises/" in str(missing.value) and "solutions" not in str(missing.value)


def test_a_missing_exercise_file_in_the_course_points_instructors_to_make_exercises():
    with pytest.raises(FileNotFoundError, match=r"solutions/ and exercises/ \(instructors: `make"):
        impl.load_practical("practical8_absent", "exercises")


def test_an_unknown_implementation_is_refused_with_the_choices():
    assert impl.check_impl("exercises") == "exercises"
    with pytest.raises(ValueError, match="unknown implementation 'mine': choose one of solutions"):
        impl.load_practical("practical2_transformers", "mine")


def test_a_notebooks_names_a_module_or_a_folder_are_read_as_given():
    module = types.ModuleType("mine")
    assert impl.practical_namespace("practical2_transformers", module) is module
    names = impl.practical_namespace("practical2_transformers", {"f": len})
    assert names.f is len
    with pytest.raises(AttributeError, match="`g` is not defined in the notebook: run the cell"):
        _ = names.g
    loaded = impl.practical_namespace("practical1_baselines", "solutions")
    assert loaded.__name__ == "solutions.practical1_baselines"
