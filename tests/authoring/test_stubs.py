"""Tests of m2l_nlp.authoring.stubs: the stub generator (solutions/ -> exercises/), its marker
errors, its command line, and that it never overwrites a student's work."""

from __future__ import annotations

import textwrap

import pytest

from m2l_nlp.authoring import stubs
from m2l_nlp.impl import repo_root

ROOT = repo_root()


def test_stub_replaces_regions_at_their_indentation():
    source = textwrap.dedent(
        '''\
        import math


        def area(r: float) -> float:
            """Area of a circle."""
            # BEGIN SOLUTION
            return math.pi * r**2
            # END SOLUTION


        class Model:
            def __init__(self):
                self.size = 3  # kept: fixes the parameter names

            def __call__(self, x):
                # BEGIN SOLUTION
                def helper(y):
                    return y + 1

                return helper(x)
                # END SOLUTION

            def extra(self):
                # BEGIN SOLUTION
                return 1
                # END SOLUTION
        '''
    )
    stub = stubs.make_stub(source, "demo.py")
    assert '    """Area of a circle."""\n    # YOUR CODE HERE\n' in stub
    assert '    raise NotImplementedError("area: not implemented yet")\n' in stub
    assert '        raise NotImplementedError("Model: not implemented yet")\n' in stub
    assert '        raise NotImplementedError("Model.extra: not implemented yet")\n' in stub
    assert "self.size = 3  # kept" in stub
    assert "math.pi" not in stub and "helper" not in stub and "SOLUTION" not in stub
    namespace: dict = {}
    exec(compile(stub, "demo.py", "exec"), namespace)  # the stub imports cleanly
    with pytest.raises(NotImplementedError, match="Model.extra: not implemented yet"):
        namespace["Model"]().extra()


@pytest.mark.parametrize(
    ("body", "line", "words"),
    [
        ("    # BEGIN SOLUTION\n    # BEGIN SOLUTION\n    # END SOLUTION\n", 3, "nested"),
        ("    # BEGIN SOLUTION\n    return 1\n", 2, "never closed"),
        ("    return 1\n    # END SOLUTION\n", 3, "without a matching"),
    ],
)
def test_bad_markers_fail_with_file_and_line(body, line, words):
    source = "def f():\n" + body
    with pytest.raises(stubs.MarkerError, match=rf"^bad\.py:{line}: .*{words}"):
        stubs.make_stub(source, "bad.py")


def test_marker_outside_a_function_is_an_error():
    with pytest.raises(stubs.MarkerError, match=r"bad\.py:1: .*outside any function"):
        stubs.make_stub("# BEGIN SOLUTION\nx = 1\n# END SOLUTION\n", "bad.py")


def test_stub_cli_writes_then_check_detects_drift(tmp_path, capsys):
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    (sol / "__init__.py").write_text("")
    (sol / "p.py").write_text("def f():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n")
    args = ["--solutions", str(sol), "--exercises", str(ex)]
    assert stubs.main([*args, "--check"]) == 1  # nothing written yet
    assert stubs.main(args) == 0
    assert (ex / "__init__.py").read_text() == ""
    assert "NotImplementedError" in (ex / "p.py").read_text()
    assert stubs.main([*args, "--check"]) == 0
    (sol / "p.py").write_text("def f():\n    # BEGIN SOLUTION\n    return 2\n    # END SOLUTION\n")
    assert stubs.main([*args, "--check"]) == 0  # same stub: the solution body is hidden
    (sol / "p.py").write_text("def g():\n    # BEGIN SOLUTION\n    return 2\n    # END SOLUTION\n")
    capsys.readouterr()
    assert stubs.main([*args, "--check"]) == 1
    assert "p.py" in capsys.readouterr().err
    (sol / "p.py").write_text("def g():\n    # BEGIN SOLUTION\n    return 2\n")
    assert stubs.main(args) == 2
    assert "p.py:2" in capsys.readouterr().err


def test_the_generator_never_overwrites_a_students_work(tmp_path, capsys):
    """A stub edited by hand is refused, named; --force saves it as .bak first; a stub that
    is still what the generator wrote is regenerated as usual (the instructor's case)."""
    sol, ex = tmp_path / "solutions", tmp_path / "exercises"
    sol.mkdir()
    for name in ("p", "q"):
        (sol / f"{name}.py").write_text(
            f"def {name}():\n    # BEGIN SOLUTION\n    return 1\n    # END SOLUTION\n"
        )
    args = ["--solutions", str(sol), "--exercises", str(ex)]
    assert stubs.main(args) == 0
    student = (ex / "p.py").read_text().replace("raise NotImplementedError", "return 1  #")
    (ex / "p.py").write_text(student)
    for name in ("p", "q"):  # the instructor changes both solutions
        (sol / f"{name}.py").write_text(
            f"def {name}(x):\n    # BEGIN SOLUTION\n    return x\n    # END SOLUTION\n"
        )
    capsys.readouterr()
    assert stubs.main(args) == 1
    err = capsys.readouterr().err
    assert "p.py" in err and "q.py" not in err and "FORCE=1" in err
    assert (ex / "p.py").read_text() == student  # nothing was written, q.py neither
    assert "def q():" in (ex / "q.py").read_text()
    assert stubs.main([*args, "--force"]) == 0
    assert (ex / "p.py.bak").read_text() == student
    assert "def p(x):" in (ex / "p.py").read_text() and "def q(x):" in (ex / "q.py").read_text()
    assert stubs.main(args) == 0  # regenerated stubs are the generator's again


def test_committed_exercises_match_the_solutions():
    plan = stubs.planned_stubs(ROOT / "solutions", ROOT / "exercises")
    assert stubs.drifted(plan) == [], "run `make exercises` and commit exercises/"
