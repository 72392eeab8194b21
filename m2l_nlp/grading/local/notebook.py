"""``check(exercise, *objects)``: the graded checks on objects defined in a notebook.

>>> from m2l_nlp.grading import check
>>> check("multihead_attention", MultiheadAttention)  # doctest: +SKIP
multihead_attention: passed (5/5 checks passed, 20/20 points)

Pass the function or class the exercise asks for (several for exercises with several parts,
e.g. ``check("positional_encoding", sinusoidal_encoding, PositionalEncoding)``); a part that
is not passed is looked up in the notebook's namespace. Components from earlier exercises
that yours call (e.g. ``MultiheadAttention`` inside ``EncoderBlock``) are replaced by the
reference ones while checking, exactly as ``pytest`` does, so each mistake counts once;
where only recorded answers stand for the reference (a handout), your own are called, and a
failure says which of them fails too, as ``pytest`` does.
"""

from __future__ import annotations

import contextlib
import inspect
from collections import ChainMap
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from m2l_nlp.grading.checks.catalog import get_exercise, load_exercises
from m2l_nlp.grading.checks.runner import (
    CheckResult,
    ExerciseResult,
    StudentNamespace,
    blame_earlier,
    globals_of,
    outcome,
    reference,
    run_check,
    student_files_of,
)


def _collect(
    targets: tuple[str, ...], objects: tuple[Any, ...], named: dict[str, Any], caller: dict
) -> dict[str, Any]:
    found = dict(named)
    for obj in objects:
        name = getattr(obj, "__name__", None)
        if name not in targets:
            raise TypeError(
                f"check() got {obj!r}, which is not one of {', '.join(targets)}: pass the "
                "function or class itself (not an instance, not its output)"
            )
        found[name] = obj
    unknown = sorted(set(found) - set(targets))
    if unknown:
        raise TypeError(f"check() got unexpected names {unknown}; expected {list(targets)}")
    spaces = [g for g in (globals_of(o) for o in found.values()) if g is not None] + [caller]
    for name in targets:
        if name not in found:
            for space in spaces:
                if name in space:
                    found[name] = space[name]
                    break
    missing = [name for name in targets if name not in found]
    if missing:
        parts = ", ".join(targets)
        raise TypeError(
            f"check() could not find {', '.join(missing)}: run the cell that defines it, or "
            f"pass every part: check(<name>, {parts})"
        )
    return found


def check(exercise: str, *objects: Any, verbose: bool = True, **named: Any) -> ExerciseResult:
    """Run the graded checks of ``exercise`` on ``objects``; print and return the verdict.

    Args:
        exercise: the exercise name, e.g. ``"multihead_attention"`` (same as the pytest
            marker).
        objects: the function(s) or class(es) you wrote for it.
        verbose: print the verdict (it is also returned, and displays itself in a notebook).
        named: the same objects by name, e.g. ``masked_pool=my_pool``.

    Returns:
        An :class:`~m2l_nlp.grading.checks.runner.ExerciseResult` (``.status``, ``.points``,
        ``.checks``).
    """
    ex = get_exercise(exercise)
    frame = inspect.currentframe()
    caller = frame.f_back.f_globals if frame is not None and frame.f_back is not None else {}
    found = _collect(ex.targets, objects, named, caller)
    # a check may read more of the student's work than its targets (their language model
    # read with caches): in a notebook, the rest is the notebook's names
    student = StudentNamespace(ChainMap(found, caller), "the objects passed to check()")
    spaces: list[dict[str, Any]] = []
    for obj in found.values():
        g = globals_of(obj)
        if g is not None and all(g is not s for s in spaces):
            spaces.append(g)
    ref = reference(ex.practical)
    files = student_files_of(found)
    results = []
    with _every_program_kept():
        for chk in ex.checks:
            try:
                run_check(ex, chk, student, ref, spaces)
                err = None
            except Exception as caught:  # noqa: BLE001 - every failure becomes a verdict
                err = caught
            status, message = outcome(err, files)
            results.append(CheckResult(ex.name, chk.name, status, message))
    result = ExerciseResult(ex, results)
    if result.status == "failed" and not isinstance(ref, ModuleType):
        _blame_earlier(result, spaces + [caller])
    if verbose:
        print(result)
    return result


def _blame_earlier(result: ExerciseResult, spaces: list[dict[str, Any]]) -> None:
    """Where no reference stands in for the earlier work this exercise calls (a handout's
    recorded answers), check that work too and say, as ``pytest`` does, which of it fails."""
    earlier: list[ExerciseResult] = []
    for name in result.exercise.uses:
        owner = next((e for e in load_exercises().values() if name in e.targets), None)
        space = next((s for s in spaces if name in s), None)
        if owner is None or space is None or any(r.exercise.name == owner.name for r in earlier):
            continue
        parts = {t: space[t] for t in owner.targets if t in space}
        if len(parts) == len(owner.targets):
            earlier.append(check(owner.name, verbose=False, **parts))
    blame_earlier([*earlier, result])


@contextlib.contextmanager
def _every_program_kept() -> Iterator[None]:
    """While checking, every program compiled goes to the on-disk cache that the notebook's
    setup cell names, however quickly it compiled, as a graded pytest run keeps them all:
    the same cell run again, or after a restart, compiles almost nothing that did not change.
    The kernel's own threshold (1 s by default, for training) comes back afterwards."""
    import jax

    name = "jax_persistent_cache_min_compile_time_secs"
    before = jax.config.values[name]
    jax.config.update(name, 0.0)
    try:
        yield
    finally:
        jax.config.update(name, before)
