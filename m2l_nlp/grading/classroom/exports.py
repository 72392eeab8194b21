"""A Gradescope "Export Submissions" read as data: ``submission_metadata.yml`` (each
submission's folder, its submitters, when it was made and, where Gradescope graded it, its
autograder results), from the zip or from the folder it unpacks to.

The export is bytes the students control (their names, their results' text): only the
metadata is read, as plain data (``yaml.safe_load``), no link is followed and its size is
bounded; nothing is unpacked.
"""

from __future__ import annotations

import datetime
import stat
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

METADATA = "submission_metadata.yml"
MAX_METADATA_BYTES = 256 << 20  # a class of thousands with every result's text


# what reading a zip may raise: damaged, encrypted, an unknown compression, cut short
ZIP_ERRORS = (zipfile.BadZipFile, OSError, RuntimeError, NotImplementedError, EOFError)


class ExportError(ValueError):
    """An export that cannot be read; its message says what to do."""


@dataclass(frozen=True)
class Submitter:
    name: str
    email: str
    sid: str


@dataclass(frozen=True)
class Submission:
    """One submission of the export: ``id`` is its folder's name (``submission_<n>``)."""

    id: str
    submitters: tuple[Submitter, ...]
    created_at: str  # ISO 8601, as the export gives it
    results: dict[str, Any] | None = field(default=None, compare=False)  # results.json's


def read_export(path: Path) -> list[Submission]:
    """The submissions of the export at ``path`` (its zip, or the folder it unpacks to), in
    the order of their ids; raises :class:`ExportError` in words."""
    if not path.exists():
        raise ExportError(f"{path} does not exist: give Gradescope's export (zip or folder)")
    text = _zip_metadata(path) if path.is_file() else _folder_metadata(path)
    return parse_metadata(text, str(path))


def _folder_metadata(folder: Path) -> bytes:
    candidates = [folder / METADATA, *sorted(folder.glob(f"*/{METADATA}"))]
    for candidate in candidates:
        try:
            mode = candidate.lstat().st_mode
        except OSError:
            continue
        if not stat.S_ISREG(mode):  # a link or anything else is not Gradescope's
            raise ExportError(f"{candidate} is not a plain file: download the export again")
        if candidate.stat().st_size > MAX_METADATA_BYTES:
            raise ExportError(f"{candidate} is over {MAX_METADATA_BYTES >> 20} MB")
        return candidate.read_bytes()
    raise ExportError(
        f"{folder} has no {METADATA}: give the folder of Gradescope's Export Submissions "
        "(or its zip)"
    )


def _zip_metadata(path: Path) -> bytes:
    try:
        with zipfile.ZipFile(path) as archive:
            members = [
                info
                for info in archive.infolist()
                if Path(info.filename).name == METADATA and info.filename.count("/") <= 1
            ]
            if not members:
                raise ExportError(f"{path} holds no {METADATA}: is it Gradescope's export?")
            info = min(members, key=lambda i: i.filename.count("/"))
            if stat.S_ISLNK(info.external_attr >> 16):
                raise ExportError(f"{path}: its {METADATA} is a link: download the export again")
            if info.file_size > MAX_METADATA_BYTES:
                raise ExportError(f"{path}: its {METADATA} is over {MAX_METADATA_BYTES >> 20} MB")
            with archive.open(info) as handle:
                data = handle.read(MAX_METADATA_BYTES + 1)
            if len(data) > MAX_METADATA_BYTES:  # the size it declared was not its size
                raise ExportError(f"{path}: its {METADATA} is over {MAX_METADATA_BYTES >> 20} MB")
            return data
    except ZIP_ERRORS as err:
        raise ExportError(f"{path} cannot be read as a zip ({err}): download it again") from err


def parse_metadata(text: bytes | str, where: str = METADATA) -> list[Submission]:
    """The submissions that ``submission_metadata.yml``'s text lists (its keys are Ruby
    symbols, ``:name:``, read as ``":name"``)."""
    import yaml

    class PlainLoader(yaml.SafeLoader):
        """safe_load's types, and no alias: an alias can make a small file a huge tree."""

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                raise yaml.YAMLError("it uses an alias (*name), which Gradescope's never does")
            return super().compose_node(parent, index)

    try:
        data = yaml.load(text, Loader=PlainLoader)  # noqa: S506 - a safe loader, aliases refused
    except (yaml.YAMLError, RecursionError) as err:
        said = "nested too deeply" if isinstance(err, RecursionError) else str(err)
        raise ExportError(
            f"{where}: {METADATA} cannot be read ({said}): download it again"
        ) from err
    if not isinstance(data, dict):
        raise ExportError(f"{where}: {METADATA} holds no submissions")
    submissions = []
    for key, entry in sorted(data.items(), key=lambda item: str(item[0])):
        if not isinstance(entry, dict):
            raise ExportError(f"{where}: the entry of {_text(key)!r} is not a mapping")
        people = entry.get(":submitters")
        submitters = tuple(
            Submitter(_text(p.get(":name")), _text(p.get(":email")), _text(p.get(":sid")))
            for p in (people if isinstance(people, list) else [])
            if isinstance(p, dict)
        )
        results = entry.get(":results")
        submissions.append(
            Submission(
                id=_text(key),
                submitters=submitters,
                created_at=_when(entry.get(":created_at")),
                results=results if isinstance(results, dict) else None,
            )
        )
    ids = [s.id for s in submissions]
    if len(set(ids)) != len(ids):
        twice = next(i for i in ids if ids.count(i) > 1)
        raise ExportError(f"{where}: two entries are the submission {twice!r}: download it again")
    return submissions


def _text(value: Any) -> str:
    """A scalar as text; anything else (a list, a mapping) is not a name: empty."""
    if isinstance(value, str | int | float | datetime.date):
        return str(value)
    return ""


def _when(value: Any) -> str:
    if isinstance(value, datetime.datetime | datetime.date):
        return value.isoformat()
    return _text(value)
