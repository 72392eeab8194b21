"""The instructor's grading settings: ``grading.toml`` at the top of the repository.

Points, the partial-credit rule, the autograder's time limit and how Gradescope shows the
hidden checks, in one file: ``make autograder`` reads and checks it (an unknown key is
refused in words), and the local front ends (``pytest``, ``check()``) read its points and
partial-credit rule. The file names no hidden check: those live in ``solutions/hidden/``
(:data:`HIDDEN_DIR`), which only the autograder reads. A student handout's copy says how many
points per practical only the autograder grades (``[hidden.points]``, written by
``make handout``).

Without the file every setting has its default (all or nothing, 5 times the reference's
time, hidden checks shown after the due date and counted).
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import sys
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10 (the floors' lane)
    import tomli as tomllib

SETTINGS_FILE = "grading.toml"
HIDDEN_DIR = "solutions/hidden"  # the hidden checks: one module per practical, root's only
VISIBILITIES = ("visible", "hidden", "after_due_date", "after_published")
_TOP = (
    "partial_credit",
    "time_limit_factor",
    "submission_time_limit",
    "memory_budget_mb",
    "points",
    "weights",
    "gates",
    "hidden",
)
_HIDDEN = ("visibility", "in_total", "points")


class SettingsError(ValueError):
    """``grading.toml`` cannot be used; the message says where and what to write."""


@dataclasses.dataclass(frozen=True)
class GradingSettings:
    """The settings of ``grading.toml`` (see the module docstring and the file's comments).

    Attributes:
        partial_credit: an exercise's points spread over its checks by weight (a failed
            gate check earns nothing), instead of all or nothing.
        time_limit_factor: the autograder stops an exercise at this many times the
            reference's time on its machine (at least ten seconds).
        points: ``{exercise: points}`` where not the registry's.
        weights: ``{exercise: {check: weight}}`` under partial credit (1 otherwise).
        gates: ``{exercise: checks}`` that must pass for the exercise to earn anything.
        hidden_visibility: Gradescope's visibility of the hidden checks' results.
        hidden_in_total: whether the hidden checks' points count in the total score.
        hidden_points: ``{practical: points}`` only the autograder grades (a handout's).
        submission_time_limit: the autograder's seconds for one whole submission, loading
            its files included (at most; less where the reference's time allows).
        memory_budget_mb: the memory that one submission's processes hold together.
    """

    partial_credit: bool = False
    time_limit_factor: float = 5.0
    points: dict[str, float] = dataclasses.field(default_factory=dict)
    weights: dict[str, dict[str, float]] = dataclasses.field(default_factory=dict)
    gates: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    hidden_visibility: str = "after_due_date"
    hidden_in_total: bool = True
    hidden_points: dict[str, float] = dataclasses.field(default_factory=dict)
    submission_time_limit: float = 420.0
    memory_budget_mb: float = 1536.0


def _toml(value: Any) -> str:
    """``value`` as it is written in TOML (``true``, ``"text"``, ``[1, 2]``), for messages:
    on one line (a string's line breaks escaped, as TOML's basic strings escape them)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)  # JSON's escapes are TOML's too
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{_key(k)} = {_toml(v)}" for k, v in value.items()) + " }"
    return str(value)  # numbers, inf and nan, dates and times: as TOML writes them


def _key(key: str) -> str:
    """A key as it is written in TOML: bare where it may be (``partial``), else quoted."""
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml(key)


def _advice(text: str, err: Exception) -> str:
    """What to write instead, where a TOML error is a Python (or YAML) spelling of a value:
    ``True``/``False``/``None``, ``yes``/``no``/``on``/``off``; '' for any other error."""
    at = re.search(r"at line (\d+), column (\d+)", str(err))
    lines = text.splitlines()
    if not at or not 0 < int(at[1]) <= len(lines):
        return ""
    number, line = int(at[1]), lines[int(at[1]) - 1]
    start = int(at[2]) - 1
    word = re.match(r"[A-Za-z]+", line[start:])
    if word is None:
        return ""
    word = word[0]
    if word in ("True", "False"):
        fixed = line[:start] + word.lower() + line[start + len(word) :]
        return (
            f": TOML writes true and false in lower case; line {number} should read "
            f"`{fixed.strip()}`"
        )
    if word == "None":
        return f": TOML has no None; leave that key out (line {number}) to get its default"
    if word.lower() in ("yes", "no", "on", "off"):
        value = "true" if word.lower() in ("yes", "on") else "false"
        return f": TOML's booleans are true and false; write {value} for {word} (line {number})"
    return ""


def _number(value: Any, where: str, low: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise SettingsError(f"{where} must be a number, not {_toml(value)}")
    if value < low:
        raise SettingsError(f"{where} must be {what}, not {_toml(value)}")
    return float(value)


def _table(value: Any, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise SettingsError(f"{where} must be a table ([{where}] or {{ ... }}), not {_toml(value)}")
    return value


def _unknown(keys: Any, known: Any, where: str, what: str = "key") -> None:
    extra = [k for k in keys if k not in known]
    if extra:
        spell = _key if what == "key" else _toml  # a check named in a list is a string
        raise SettingsError(
            f"{where}: unknown {what} {spell(extra[0])}; the {what}s are: "
            f"{', '.join(map(str, known))}"
        )


def parse(text: str, checks: dict[str, list[str]], name: str = SETTINGS_FILE) -> GradingSettings:
    """The settings in ``text``, checked against ``checks`` (``{exercise: check names}``,
    hidden exercises included where they are known). Raises :class:`SettingsError`."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise SettingsError(f"{name} is not valid TOML ({err}){_advice(text, err)}") from None
    _unknown(data, _TOP, name)
    partial = data.get("partial_credit", False)
    if not isinstance(partial, bool):
        raise SettingsError(f"{name}: partial_credit must be true or false, not {_toml(partial)}")
    factor = _number(data.get("time_limit_factor", 5.0), f"{name}: time_limit_factor", 1, ">= 1")
    total = _number(
        data.get("submission_time_limit", 420.0), f"{name}: submission_time_limit", 10, ">= 10"
    )
    memory = _number(data.get("memory_budget_mb", 1536.0), f"{name}: memory_budget_mb", 64, ">= 64")

    def exercise_of(key: str, where: str) -> list[str]:
        if key not in checks:
            raise SettingsError(
                f"{where}: no exercise called {_key(key)}; the exercises are: {', '.join(checks)}"
            )
        return checks[key]

    points = {}
    for key, value in _table(data.get("points", {}), "points").items():
        exercise_of(key, f"{name} [points]")
        points[key] = _number(value, f"{name} [points] {key}", 0, ">= 0")
    weights: dict[str, dict[str, float]] = {}
    for key, table in _table(data.get("weights", {}), "weights").items():
        names = exercise_of(key, f"{name} [weights]")
        _unknown(_table(table, f"weights.{key}"), names, f"{name} [weights] {key}")
        weights[key] = {
            check: _number(w, f"{name} [weights] {key}.{check}", 1e-9, "> 0")
            for check, w in table.items()
        }
    gates: dict[str, tuple[str, ...]] = {}
    for key, value in _table(data.get("gates", {}), "gates").items():
        names = exercise_of(key, f"{name} [gates]")
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise SettingsError(f"{name} [gates] {key} must be a list of check names")
        _unknown(value, names, f"{name} [gates] {key}", "check")
        gates[key] = tuple(value)
    hidden = _table(data.get("hidden", {}), "hidden")
    _unknown(hidden, _HIDDEN, f"{name} [hidden]")
    visibility = hidden.get("visibility", "after_due_date")
    if visibility not in VISIBILITIES:
        raise SettingsError(
            f"{name} [hidden] visibility must be one of {', '.join(VISIBILITIES)}, not "
            f"{_toml(visibility)}"
        )
    in_total = hidden.get("in_total", True)
    if not isinstance(in_total, bool):
        raise SettingsError(
            f"{name} [hidden] in_total must be true or false, not {_toml(in_total)}"
        )
    hidden_points = {
        str(practical): _number(value, f"{name} [hidden.points] {practical}", 0, ">= 0")
        for practical, value in _table(hidden.get("points", {}), "hidden.points").items()
    }
    return GradingSettings(
        partial,
        factor,
        points,
        weights,
        gates,
        visibility,
        in_total,
        hidden_points,
        submission_time_limit=total,
        memory_budget_mb=memory,
    )


def read(root: Path, checks: dict[str, list[str]]) -> GradingSettings:
    """The settings of ``root/grading.toml`` (defaults where there is no such file)."""
    path = root / SETTINGS_FILE
    if not path.is_file():
        return GradingSettings()
    return parse(path.read_text(encoding="utf-8"), checks, str(path))
