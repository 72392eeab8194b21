"""pytest plugin of the auto-grader (loaded by ``tests/conftest.py``).

- ``--impl exercises|solutions`` (default: ``$M2L_IMPL``, else ``exercises``) picks what is
  graded; ``--results-json PATH`` writes Gradescope's ``results.json``; ``--grade-timeout S``
  stops a graded check that runs longer than ``S`` seconds.
- One marker per exercise (``pytest -m multihead_attention``), registered from the registry.
- A stub that raises ``NotImplementedError`` is reported as *not started* (shown as a skip,
  but the run still exits non-zero); a practical file that cannot be imported is reported
  once, with file and line, and the other practicals are still graded.
- Every run that grades something ends with the score table.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from m2l_nlp.fileio import write_json_atomic
from m2l_nlp.grading.checks.catalog import load_exercises, read_settings
from m2l_nlp.grading.checks.registry import CheckFailure, Exercise
from m2l_nlp.grading.checks.report import results_json, score_table
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    ExerciseResult,
    PracticalError,
    blame_earlier,
    import_error_message,
    outcome,
    reference,
    run_check,
)
from m2l_nlp.grading.checks.settings import SettingsError
from m2l_nlp.impl import IMPL_ENV, IMPLS, available_impls, load_practical, repo_root

GRADER = pytest.StashKey["Grader"]()
SELECTED = pytest.StashKey[int]()  # how many tests (graded or not) this run selected
DEFAULT_TIMEOUT = 120.0


class Grader:
    """Loads the graded implementation once per practical and collects check results."""

    def __init__(self, impl: str):
        self.impl = impl
        self.exercises: dict[str, Exercise] = load_exercises()
        self.settings = read_settings()
        self.modules: dict[str, ModuleType | PracticalError] = {}
        self.results: dict[str, list[CheckResult]] = {}
        self.seconds: dict[str, float] = {}  # the time of its checks, per exercise
        self.stopped: set[str] = set()  # exercises with a check stopped for taking too long
        self.quiet: dict[str, ExerciseResult] = {}  # earlier work graded for a note only

    def path_of(self, practical: str) -> Path:
        return repo_root() / self.impl / f"{practical}.py"

    def student(self, practical: str) -> ModuleType:
        if practical not in self.modules:
            try:
                self.modules[practical] = load_practical(practical, self.impl)
            except Exception as err:  # noqa: BLE001 - any import failure is reported in words
                path = str(self.path_of(practical))
                self.modules[practical] = PracticalError(import_error_message(err, path))
        module = self.modules[practical]
        if isinstance(module, PracticalError):
            raise PracticalError(
                f"{self.impl}/{practical}.py could not be imported, so this exercise was not "
                "graded (the reason is printed once, above the score table)"
            )
        return module

    def run(self, exercise: str, check: str) -> None:
        if exercise in self.stopped:  # one hang per exercise costs its time once, not per check
            raise CheckFailure(
                "not run: an earlier check of this exercise was stopped for taking too long"
            )
        ex = self.exercises[exercise]
        chk = next(c for c in ex.checks if c.name == check)
        student = self.student(ex.practical)
        run_check(ex, chk, student, reference(ex.practical), [vars(student)])

    def record(self, exercise: str, result: CheckResult, seconds: float = 0.0) -> None:
        self.results.setdefault(exercise, []).append(result)
        self.seconds[exercise] = self.seconds.get(exercise, 0.0) + seconds

    def exercise_results(self) -> list[ExerciseResult]:
        results = [
            ExerciseResult(ex, self.results[name], seconds=self.seconds.get(name, 0.0))
            for name, ex in self.exercises.items()
            if name in self.results
        ]
        ours = [r for r in results if not isinstance(self.reference_of(r), ModuleType)]
        order = list(self.exercises)
        blame_earlier(
            sorted([*self.earlier_work(ours), *ours], key=lambda r: order.index(r.exercise.name))
        )
        return results

    def earlier_work(self, results: list[ExerciseResult]) -> list[ExerciseResult]:
        """The verdicts of the earlier exercises that failed ones among ``results`` call, where
        this run did not select them: graded here without a word (not in the score table),
        so that ``pytest -m multihead_attention`` alone, with a wrong scaled_dot_product, is
        told to fix that first. Their own earlier work too, where they fail."""
        owners = {target: ex.name for ex in self.exercises.values() for target in ex.targets}
        todo = [r for r in results if r.status == "failed"]
        while todo:
            for used in todo.pop().exercise.uses:
                owner = owners.get(used)
                if owner is None or owner in self.results or owner in self.quiet:
                    continue
                self.quiet[owner] = self.grade_quietly(owner)
                if self.quiet[owner].status != "passed":
                    todo.append(self.quiet[owner])
        return list(self.quiet.values())

    def grade_quietly(self, exercise: str) -> ExerciseResult:
        """``exercise``'s checks up to the first that does not pass, each stopped after
        DEFAULT_TIMEOUT seconds (no pytest-timeout watches them)."""
        ex = self.exercises[exercise]
        checks = []
        for chk in ex.checks:
            try:
                with _time_limit(DEFAULT_TIMEOUT):
                    self.run(exercise, chk.name)
                err = None
            except Exception as caught:  # noqa: BLE001 - every failure becomes a verdict
                err = caught
            student = self.modules.get(ex.practical)
            files = (
                {os.path.abspath(student.__file__)} if isinstance(student, ModuleType) else set()
            )
            checks.append(CheckResult(exercise, chk.name, *outcome(err, files)))
            if checks[-1].status != "passed":
                break
        return ExerciseResult(ex, checks)

    def reference_of(self, result: ExerciseResult) -> object:
        return reference(result.exercise.practical)

    def import_errors(self) -> list[str]:
        return [str(m) for m in self.modules.values() if isinstance(m, PracticalError)]


@contextlib.contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    """Raise TimeoutError in the block after ``seconds`` (by SIGALRM, where there is one and
    this is the main thread; elsewhere unbounded)."""
    if (
        not hasattr(signal, "setitimer")
        or threading.current_thread() is not threading.main_thread()
    ):
        yield
        return

    def stop(signum: int, frame: Any) -> None:
        raise TimeoutError(f"stopped after {seconds:g} s")

    previous = signal.signal(signal.SIGALRM, stop)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def graded_params() -> list[Any]:
    """``pytest.param(exercise, check)`` for every registered check, marked by exercise."""
    params = []
    for ex in load_exercises().values():
        for chk in ex.checks:
            marks = [getattr(pytest.mark, ex.name), pytest.mark.graded]
            params.append(pytest.param(ex.name, chk.name, id=f"{ex.name}-{chk.name}", marks=marks))
    return params


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("m2l-grading", "m2l-nlp auto-grader")
    held = available_impls()  # a handout holds exercises/ alone: no other choice is offered
    group.addoption(
        "--impl",
        choices=held,
        default=None,
        help=f"what to grade: {' or '.join(held)} (default exercises, your work); env {IMPL_ENV}",
    )
    group.addoption(
        "--results-json",
        default=None,
        metavar="PATH",
        help="also write the scores as Gradescope's results.json to PATH",
    )
    group.addoption(
        "--grade-timeout",
        type=float,
        default=DEFAULT_TIMEOUT,
        metavar="SECONDS",
        help=f"stop a graded check after this many seconds (default {DEFAULT_TIMEOUT:g})",
    )


def pytest_configure(config: pytest.Config) -> None:
    impl = config.getoption("impl") or os.environ.get(IMPL_ENV) or "exercises"
    if impl not in IMPLS:
        raise pytest.UsageError(f"{IMPL_ENV}={impl!r} is not one of {', '.join(IMPLS)}")
    if impl not in available_impls():  # a handout: exercises/ alone
        raise pytest.UsageError(
            f"{IMPL_ENV}={impl}: {repo_root()} has no {impl}/ to grade; unset {IMPL_ENV} to "
            "grade exercises/"
        )
    try:
        grader = Grader(impl)
    except SettingsError as err:
        raise pytest.UsageError(str(err)) from None
    config.stash[GRADER] = grader
    _keep_graded_testpaths(config)
    _refuse_parallel_grading(config)
    config.addinivalue_line("markers", "graded: a graded check of an exercise")
    for ex in grader.exercises.values():
        config.addinivalue_line(
            "markers", f"{ex.name}: {ex.title} ({ex.practical}, {ex.points:g} points)"
        )


def _keep_graded_testpaths(config: pytest.Config) -> None:
    """Plain ``pytest`` at the repository root grades ``tests/graded``, even when pytest took
    its settings from elsewhere (the folder of ``--results-json PATH`` when that file exists
    and another project's settings sit beside it)."""
    root = repo_root()
    ours = config.inipath is not None and config.inipath.resolve() == root / "pyproject.toml"
    invoked = Path(config.invocation_params.dir).resolve()
    default_args = [str(Path(a).resolve()) for a in config.args] == [str(invoked)]
    if not ours and invoked == root and default_args and (root / "tests" / "graded").is_dir():
        config.args = [str(root / "tests" / "graded")]


def parallel_refusal() -> str:
    """What a run of graded checks in pytest-xdist workers is told (a handout has no other
    tests to run in them)."""
    if "solutions" not in available_impls():
        return "graded checks cannot run in parallel workers (-n): run pytest without -n"
    return (
        "graded checks cannot run in parallel workers (-n): run them without -n, e.g. "
        "`pytest tests/graded --impl solutions`, and the other tests with "
        "`pytest tests --ignore=tests/graded -n 2`"
    )


def _refuse_parallel_grading(config: pytest.Config) -> None:
    """A run of pytest-xdist workers (``-n N``) over graded checks alone is refused before
    any worker starts (a second or so, not the workers' start); a run that also holds other
    tests is refused check by check in the workers (``pytest_runtest_setup``)."""
    if hasattr(config, "workerinput") or not getattr(config.option, "numprocesses", None):
        return
    graded = repo_root() / "tests" / "graded"
    invoked = Path(config.invocation_params.dir)
    paths = [(invoked / arg.split("::")[0]).resolve() for arg in config.args]
    if paths and all(path == graded or graded in path.parents for path in paths):
        raise pytest.UsageError(parallel_refusal())


def pytest_report_header(config: pytest.Config) -> list[str]:
    """The folder graded, by its whole path: an install of m2l_nlp shared between two copies
    of the course grades the copy it was installed from, which this line shows."""
    grader = config.stash[GRADER]
    root = repo_root()
    choice = " (--impl exercises|solutions)" if len(available_impls()) > 1 else ""
    lines = [f"m2l-nlp grader: grading {root / grader.impl}/{choice}"]
    here = config.rootpath.resolve()
    if here != root and (here / "exercises").is_dir():
        lines.append(
            f"m2l-nlp grader: not {here / 'exercises'}/: the m2l_nlp imported is that of "
            f"{root}; set M2L_ROOT={here} or install this copy (pip install -e .)"
        )
    return lines


@pytest.fixture
def grader(request: pytest.FixtureRequest) -> Grader:
    """The session's :class:`Grader`."""
    return request.config.stash[GRADER]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    timeout = config.getoption("grade_timeout")
    for item in items:
        if item.get_closest_marker("graded") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(timeout))


def graded_only(session: pytest.Session) -> bool:
    """Whether ``session`` runs graded checks and nothing else (a student's run): then its
    compiled programs are kept on disk for the next run."""
    return bool(session.items) and all(item.get_closest_marker("graded") for item in session.items)


def pytest_collection_finish(session: pytest.Session) -> None:
    session.config.stash[SELECTED] = len(session.items)
    if graded_only(session):
        _keep_compiled_programs()


# Read before any conftest runs: the library's tests turn the on-disk cache off (set to "").
_CACHE_DIR_AT_START = os.environ.get("JAX_COMPILATION_CACHE_DIR")


def _keep_compiled_programs() -> None:
    """A run of graded checks only keeps its compiled programs on disk (the folder that
    ``m2l-nlp train`` uses), every one of them, so that the next run compiles almost none:
    the checks run many small programs, each compiled in well under a second. The user's
    ``JAX_COMPILATION_CACHE_DIR`` wins (empty: no cache)."""
    import jax

    from m2l_nlp.data.pipeline import compilation_cache_dir
    from m2l_nlp.devices import COMPILATION_CACHE_MAX_BYTES

    if _CACHE_DIR_AT_START == "":
        return
    folder = _CACHE_DIR_AT_START or str(compilation_cache_dir())
    jax.config.update("jax_compilation_cache_dir", folder)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    if _CACHE_DIR_AT_START is None:  # our folder: bounded as `m2l-nlp train` bounds it
        with contextlib.suppress(AttributeError, ValueError):  # older JAX: unbounded
            jax.config.update("jax_compilation_cache_max_size", COMPILATION_CACHE_MAX_BYTES)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if hasattr(item.config, "workerinput") and item.get_closest_marker("graded"):
        # Under pytest-xdist the scores would stay in the workers: no score table, and an
        # exercise left undone (reported as a skip) would not fail the run.
        pytest.fail(parallel_refusal(), pytrace=False)


def _is_timeout(excinfo: pytest.ExceptionInfo[BaseException]) -> bool:
    return excinfo.typename == "Failed" and str(excinfo.value).startswith("Timeout")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator:
    report = yield
    if call.when != "call" or not item.get_closest_marker("graded"):
        return report
    grader = item.config.stash[GRADER]
    exercise, check = item.callspec.params["exercise"], item.callspec.params["check"]
    excinfo = call.excinfo
    if excinfo is not None and _is_timeout(excinfo):
        grader.stopped.add(exercise)
        timeout = item.config.getoption("grade_timeout")
        status, message = (
            "failed",
            f"stopped after {timeout:g} s: this check should take a second or two. Look for an "
            "endless loop, or a Python loop over every array element.",
        )
    else:
        student = grader.modules.get(grader.exercises[exercise].practical)
        files = {os.path.abspath(student.__file__)} if isinstance(student, ModuleType) else set()
        status, message = outcome(None if excinfo is None else excinfo.value, files)
    grader.record(exercise, CheckResult(exercise, check, status, message), call.duration)
    if status in ("not started", "error"):
        # Shown as a skip with its reason (the score table and the exit status still say
        # that the exercise is not done): no traceback per stub, and an import error is
        # printed once, in the "could not import" section.
        _, lineno, _ = item.location
        report.outcome = "skipped"
        report.longrepr = (str(item.path), (lineno or 0) + 1, message)
    elif status != "passed":
        doc = next(c.doc for c in grader.exercises[exercise].checks if c.name == check)
        report.longrepr = f"{exercise} / {check}: {doc}\n{message}"
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    grader = session.config.stash.get(GRADER, None)
    if grader is None or not grader.results:
        return
    results = grader.exercise_results()
    if any(r.status != "passed" for r in results) and session.exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    path = session.config.getoption("results_json")
    if path:
        write_results_json(Path(path), results, grader.import_errors())


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    grader = config.stash.get(GRADER, None)
    if grader is None:
        return
    if not grader.results:
        if config.stash.get(SELECTED, None) == 0:  # e.g. run from exercises/, or -m typo
            if Path.cwd().resolve() != config.rootpath:
                advice = (
                    f"run pytest from the repository root ({config.rootpath}), where it "
                    "finds tests/graded"
                )
            else:
                advice = "nothing matched your selection (-m, -k or the paths given)"
            terminalreporter.write_line(
                f"no graded check ran: {advice}. Grade one exercise with `pytest -m NAME`, "
                f"NAME one of: {', '.join(grader.exercises)}"
            )
        return
    errors = grader.import_errors()
    if errors:
        terminalreporter.section("could not import", sep="=", red=True, bold=True)
        for text in errors:
            terminalreporter.write_line(text)
    results = grader.exercise_results()
    terminalreporter.section(f"score ({grader.impl}/)", sep="=", bold=True)
    for line in score_table(results, len(grader.exercises)).splitlines():
        terminalreporter.write_line(line)
    graded = {r.exercise.practical for r in results}
    for practical, points in grader.settings.hidden_points.items():
        if practical in graded and points:
            terminalreporter.write_line(
                f"{practical}: {points:g} more points are graded by the autograder only, with "
                "checks this copy does not hold"
            )


def write_results_json(path: Path, results: list[ExerciseResult], errors: list[str]) -> None:
    """Write :func:`results_json` to ``path`` atomically (temporary file, then rename)."""
    write_json_atomic(path.resolve(), results_json(results, errors))
