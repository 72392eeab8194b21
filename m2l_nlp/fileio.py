"""Atomic file writes: a temporary file in the same folder, renamed over the target at the end.

A reader never sees a half-written file, and a failed or interrupted write leaves the old file
as it was.

Every JSON file the project writes goes through :func:`json_text` and is valid JSON: a number
that is not finite (NaN, an infinity: JSON has none) is written as ``null``, "no value" (a
loss that diverged, an epoch without evaluation); readers turn it back into NaN where they
compute with it (:func:`m2l_nlp.runs.folders.progress_from_saved`).
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any


def umask() -> int:
    """The process umask: read from ``/proc`` where there is one, else by setting it and
    putting it back (which other threads could notice for an instant)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask


def make_ordinary(path: str | os.PathLike) -> None:
    """Give a file or folder made by ``tempfile`` (private to its owner) the permissions that
    ``open`` or ``mkdir`` would have given it, before it is renamed to its final name."""
    base = 0o777 if Path(path).is_dir() else 0o666
    os.chmod(path, base & ~umask())


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike, mode: str = "wb", **open_kwargs: Any) -> Iterator[IO]:
    """``with atomic_file(path) as handle:`` write to ``handle``; ``path`` appears, complete,
    when the block ends, and not at all if it raises (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        try:
            handle = os.fdopen(fd, mode, **open_kwargs)
        except BaseException:
            os.close(fd)  # fdopen did not take it over
            raise
        with handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())  # the bytes are on disk before the name points at them
        make_ordinary(tmp)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically; returns the path."""
    with atomic_file(path, "w", encoding="utf-8", newline="") as handle:
        handle.write(text)
    return Path(path)


def finite_or_null(value: Any) -> Any:
    """``value`` with every number that is not finite, at any depth of its dicts, lists and
    tuples, replaced by None (JSON ``null``)."""
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    if isinstance(value, numbers.Real) and not isinstance(value, numbers.Integral):
        return float(value) if math.isfinite(value) else None
    return value


def json_text(value: Any, indent: int | None = 2, **options: Any) -> str:
    """``value`` as valid JSON text, ending with a newline: numbers that are not finite are
    written as ``null`` (:func:`finite_or_null`); ``options`` go to :func:`json.dumps`."""
    return json.dumps(finite_or_null(value), indent=indent, allow_nan=False, **options) + "\n"


def write_json_atomic(path: str | os.PathLike, value: Any) -> Path:
    """Write ``value`` as indented JSON (:func:`json_text`) to ``path`` atomically; returns
    the path."""
    return write_text_atomic(path, json_text(value))
