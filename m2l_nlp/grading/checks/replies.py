"""Every reply of a student's code is checked against the shape and dtype of the reference's
reply to the same request, before any check computes with it.

:func:`wire.check_sizes <m2l_nlp.grading.checks.wire.check_sizes>` bounds each reply alone; two
bounded replies can still broadcast to gigabytes (``(20000, 1) - (1, 20000)``). A reply that
:func:`fit` accepts has the reference's structure and every array the reference's exact shape,
so whatever a check computes from it is bounded by what it computes from the reference's.
Where the reference raised, or returned something that is not plain data, the student's value
becomes a :class:`~m2l_nlp.grading.checks.wire.Opaque`: nothing to compute with.

A practical may name the axes of its main replies (``REPLY_AXES`` in its ``common`` module),
for the messages: :func:`declared`.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

import numpy as np

from m2l_nlp.grading.checks import catalog, wire
from m2l_nlp.grading.checks.registry import CheckFailure

REAL = "biuf"  # bool, int, unsigned, float
MAX_ITEMSIZE = 8  # of a real reply: float64 at most (no float128 to compute with)
MAX_COMPLEX_ITEMSIZE = 16
NAMES_SHOWN = 4  # missing or extra dict keys named in a message

# The axes a reply is said to have: one string for an array, a tuple of them (None for an
# item not named) for a tuple or list of arrays.
Axes = str | tuple[str | None, ...] | None


def fit(got: Any, want: Any, what: str, axes: Axes = None, about: str = "") -> Any:
    """``got`` (a student's reply) if it fits ``want`` (the reference's reply to the same
    request), with every place where ``want`` is not plain data made a :class:`wire.Opaque`;
    else raise :class:`CheckFailure` naming the expected and received shape and dtype
    (``axes``: their names, ``"(B, S, D)"``). ``what`` names the reply's source
    (``"split_heads"``); ``about``, the check's description (its first sentence), ends the
    message."""
    try:
        return _fit(got, want, axes, ())
    except _Misfit as misfit:
        message = f"{what} returned {misfit.got}{misfit.where()}; the check expects {misfit.want}"
        said = " ".join(about.split()).split(". ")[0].rstrip(".")  # a docstring's first sentence
        if said:
            message += f". This check: {said}"
        raise CheckFailure(message) from None


class _Misfit(Exception):
    def __init__(self, got: str, want: str, path: tuple[str, ...]):
        super().__init__(got)
        self.got, self.want, self.path = got, want, path

    def where(self) -> str:
        return f" as {''.join(self.path)}" if self.path else ""


def _is_number(value: Any) -> bool:
    return isinstance(value, (bool, int, float, complex))


def _fit(got: Any, want: Any, axes: Axes, path: tuple[str, ...]) -> Any:
    if isinstance(want, wire.Opaque) or want is None:
        # nothing the check can compute with on the reference's side: nor on the student's
        return got if got is None or isinstance(got, wire.Opaque) else _opaque(got)
    if got is None:
        raise _Misfit("None (did you forget a `return`?)", _wanted(want, axes), path)
    if isinstance(want, str):
        if not isinstance(got, str):
            raise _Misfit(describe(got), "a string", path)
        return got
    if isinstance(want, dict):
        return _fit_dict(got, want, path)
    if isinstance(want, (tuple, list)):
        return _fit_sequence(got, want, axes, path)
    if isinstance(want, (np.ndarray, np.generic)) or _is_number(want):
        if isinstance(axes, tuple):  # one array where a build may also return a tuple
            axes = axes[0]
        return _fit_array(got, want, axes, path)
    raise _Misfit(describe(got), describe(want), path)  # pragma: no cover - not plain data


def _wanted(want: Any, axes: Axes) -> str:
    """What the reference gave, in words: an array's shape and dtype (its axes named)."""
    if isinstance(want, (np.ndarray, np.generic)) or _is_number(want):
        return _expected(np.asarray(want), axes[0] if isinstance(axes, tuple) else axes)
    if isinstance(want, (tuple, list)):
        named = f" ({', '.join(a or '...' for a in axes)})" if isinstance(axes, tuple) else ""
        return f"a tuple of {len(want)} items{named}"
    if isinstance(want, dict):
        return f"a dict of {len(want)} keys"
    return describe(want)


def _fit_dict(got: Any, want: dict, path: tuple[str, ...]) -> dict:
    if not isinstance(got, dict):
        raise _Misfit(describe(got), f"a dict of {len(want)} keys", path)
    missing = [k for k in want if k not in got]
    extra = [k for k in got if k not in want]
    if missing or extra:
        said = "; ".join(
            [f"missing {_names(missing)}"] * bool(missing)
            + [f"extra {_names(extra)}"] * bool(extra)
        )
        raise _Misfit(
            f"a dict whose keys do not match ({said})", f"the keys {_names(list(want))}", path
        )
    return {k: _fit(got[k], want[k], None, (*path, f"[{k!r}]")) for k in want}


def _fit_sequence(got: Any, want: tuple | list, axes: Axes, path: tuple[str, ...]) -> Any:
    if not isinstance(got, (tuple, list)) or len(got) != len(want):
        raise _Misfit(describe(got), _wanted(want, axes), path)
    named = axes if isinstance(axes, tuple) and len(axes) == len(want) else (None,) * len(want)
    items = [
        _fit(g, w, a, (*path, f"item {i} of {len(want)}" if not path else f"[{i}]"))
        for i, (g, w, a) in enumerate(zip(got, want, named, strict=True))
    ]
    return type(got)(items)  # the student's own kind: a check may say a list is not a tuple


def _fit_array(got: Any, want: Any, axes: str | None, path: tuple[str, ...]) -> Any:
    want_array = np.asarray(want)
    expected = _expected(want_array, axes)
    if isinstance(got, bool | int) and not -(2**63) <= got < 2**64:
        raise _Misfit(f"the integer {str(got)[:20]}..., too large for any array", expected, path)
    if not (isinstance(got, np.ndarray) or _is_number(got)):
        raise _Misfit(describe(got), expected, path)
    got_array = np.asarray(got)
    kinds = REAL + "c" if want_array.dtype.kind == "c" else REAL
    largest = MAX_COMPLEX_ITEMSIZE if want_array.dtype.kind == "c" else MAX_ITEMSIZE
    if got_array.shape != want_array.shape or got_array.dtype.kind not in kinds:
        raise _Misfit(describe(got), expected, path)
    if got_array.dtype.itemsize > largest:
        raise _Misfit(describe(got), expected, path)
    return got


def _expected(want: np.ndarray, axes: str | None) -> str:
    dtype = want.dtype.name
    if want.ndim == 0:
        return f"one number (shape ()) of dtype {dtype}"
    named = [a.strip() for a in (axes or "").strip("() ").split(",") if a.strip()]
    if len(named) == want.ndim or ("..." in named and want.ndim >= len(named) - 1):
        return f"{axes} = {want.shape} {dtype}"
    return f"shape {want.shape} {dtype}"


def _opaque(value: Any) -> wire.Opaque:
    return wire.Opaque(type(value).__name__)


def _names(keys: list[str]) -> str:
    shown = ", ".join(repr(k) for k in keys[:NAMES_SHOWN])
    return shown + (f" and {len(keys) - NAMES_SHOWN} more" if len(keys) > NAMES_SHOWN else "")


def describe(value: Any) -> str:
    """A reply in words, for a message: ``shape (2, 3) float32``, ``a tuple of 2 items``."""
    if value is None:
        return "None"
    if isinstance(value, np.ndarray):
        return f"shape {value.shape} {value.dtype.name}"
    if isinstance(value, bool):
        return f"a bool ({value})"
    if _is_number(value):
        return f"a Python {type(value).__name__}"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} items"
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return f"a dict of {len(value)} keys"
    if isinstance(value, wire.Opaque):
        return repr(value)
    return type(value).__name__  # pragma: no cover - the wire gives nothing else


def raised_instead(got: Any) -> wire.Opaque:
    """What a check sees of a student's value where the reference raised for the same
    request (a check that expects an error then says that none was raised)."""
    return _opaque(got)


def declared(key: str) -> tuple[str | None, Axes]:
    """``(the name to show, axes)`` that a practical declares for a reply (``REPLY_AXES`` in
    its ``common`` module): ``key`` is a function's name, or ``"module.build"`` for a haiku
    build (``"translation._block"``); ``(None, None)`` where none declares it."""
    return _tables().get(key, (None, None))


@functools.cache
def _tables() -> dict[str, tuple[str | None, Axes]]:
    found: dict[str, tuple[str | None, Axes]] = {}
    for package in catalog.practical_packages():
        try:
            table = getattr(importlib.import_module(f"{package}.common"), "REPLY_AXES", {})
        except ImportError:
            continue
        for key, entry in table.items():
            # a function's entry is its axes; a build's, (the module it runs, its axes)
            if "." in key and isinstance(entry, tuple) and len(entry) == 2:
                found[key] = (entry[0], entry[1])
            else:
                found[key] = (None, entry)
    return found
