"""Where IMDB comes from and how it is read: the download, the sources, the tar and folder readers.

Sources (``source`` argument, else the ``M2L_NLP_IMDB`` environment variable, else the
official URL): the official ``aclImdb_v1.tar.gz`` (downloaded once into ``data/``, checked
against its sha256), any local ``.tar.gz``/``.tar`` in the aclImdb layout, or an extracted
``aclImdb/`` folder (or the folder that holds it). Only ``{train,test}/{pos,neg}/*.txt`` are
read; ``train/unsup`` is skipped. Archives are read straight from the compressed stream, so
nothing is ever half-extracted. A source that cannot be had or read raises a
:class:`DataError` whose message says what to do. :func:`read_reviews` returns the texts,
cleaned: the reviews use HTML line breaks, and every ``<br />`` (also ``<br>``, ``<br/>``)
becomes a newline ``"\\n"``, so paragraphs stay visible when printed and the whitespace
pre-tokenizer treats them as spaces. Nothing else is changed. Caching and encoding them is
:mod:`m2l_nlp.data`.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import re
import shutil
import tempfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from m2l_nlp.fileio import atomic_file, make_ordinary

IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
IMDB_SHA256 = "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe"
SOURCE_ENV = "M2L_NLP_IMDB"
DATA_DIR = Path(__file__).resolve().parents[2] / "data"
SPLITS = ("train", "test")
LABELS = {"pos": 1, "neg": 0}
_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)

_HOW_TO_FIX = (
    f"download {IMDB_URL} by hand (or copy a local aclImdb_v1.tar.gz) and set "
    f"{SOURCE_ENV}=/path/to/aclImdb_v1.tar.gz (an extracted aclImdb/ folder works too)"
)


class DataError(RuntimeError):
    """The data (IMDB, Tatoeba) could not be obtained or read; the message says what to do."""


class DownloadError(DataError):
    """The download failed (no network, HTTP error, connection cut)."""


class ChecksumError(DataError):
    """A downloaded or cached file does not have the expected sha256."""


class CorruptArchiveError(DataError):
    """The archive is truncated or damaged."""


class DatasetLayoutError(DataError):
    """The folder or archive is not in the aclImdb layout."""


class MissingSourceError(DataError, FileNotFoundError):
    """The local data source named does not exist."""


class NotAnArchiveError(DataError):
    """The file named is neither a .tar nor a .tar.gz archive."""


class UnreadableSourceError(DataError):
    """The local data source exists but cannot be read (permissions, a device error)."""


def _unreadable(path: Path, error: OSError, what: str = "IMDB") -> UnreadableSourceError:
    return UnreadableSourceError(
        f"cannot read {path} ({error.strerror or error}): check that you may read it, or give "
        f"another copy of {what}"
    )


# --------------------------------------------------------------------------- download


def download_imdb(
    url: str = IMDB_URL,
    dest_dir: str | os.PathLike | None = None,
    *,
    sha256: str | None = IMDB_SHA256,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` into ``dest_dir`` (default ``data/``) and return the file's path.

    The bytes go to a temporary name, are checked against ``sha256`` (skipped if None) and
    only then renamed, so an existing file at the final name is always a complete download.
    """
    dest_dir = Path(dest_dir) if dest_dir is not None else DATA_DIR
    name = Path(urllib.parse.urlparse(url).path).name or "aclImdb_v1.tar.gz"
    return download(
        url,
        dest_dir / name,
        sha256=sha256,
        what="IMDB",
        how_to_fix=_HOW_TO_FIX,
        progress=progress,
        timeout=timeout,
    )


def download(
    url: str,
    dest: Path,
    *,
    sha256: str | None,
    what: str,
    how_to_fix: str,
    progress: bool = True,
    timeout: float = 60.0,
) -> Path:
    """Download ``url`` to the file ``dest`` unless it exists, and return ``dest``.

    The bytes go to a temporary name, are checked against ``sha256`` (skipped if None) and
    only then renamed, so an existing ``dest`` is always a complete download. ``what`` names
    the data in the progress bar and the errors, ``how_to_fix`` ends their messages.
    """
    if dest.is_file():
        return dest
    digest = hashlib.sha256()
    with atomic_file(dest) as out:  # renamed only once complete and checked
        _fetch(url, out, digest, progress=progress, timeout=timeout, what=what, fix=how_to_fix)
        got = digest.hexdigest()
        if sha256 is not None and got != sha256.lower():
            raise ChecksumError(
                f"the download of {url} has sha256 {got}, expected {sha256}: it is damaged or "
                f"not the {what} file. Run again to retry, or {how_to_fix}"
            )
    return dest


def _fetch(
    url: str,
    out: io.BufferedWriter,
    digest,
    *,
    progress: bool,
    timeout: float,
    what: str = "IMDB",
    fix: str = _HOW_TO_FIX,
) -> None:
    from tqdm.auto import tqdm

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            total = response.headers.get("Content-Length")
            total = int(total) if total else None
            done = 0
            with tqdm(
                total=total, unit="B", unit_scale=True, desc=what, disable=not progress
            ) as bar:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        reason = getattr(err, "reason", err)
        raise DownloadError(f"could not download {url} ({reason}); {fix}") from err
    if total is not None and done != total:
        raise DownloadError(
            f"the download of {url} stopped after {done} of {total} bytes; run again, or {fix}"
        )


def check_source(source: str | os.PathLike | None = None) -> Path | str:
    """The local archive or folder that ``source`` names (None: ``$M2L_NLP_IMDB``, else the
    official URL), or the URL it names, as text (checked as it downloads). Cheap, so a run
    calls it before it creates anything: raises :class:`MissingSourceError` if the path does
    not exist, :class:`NotAnArchiveError` for a file that is neither gzip data nor a tar."""
    origin = f" (from {SOURCE_ENV})" if source is None and os.environ.get(SOURCE_ENV) else ""
    text = os.fspath(source) if source is not None else os.environ.get(SOURCE_ENV) or IMDB_URL
    if re.match(r"^(https?|ftp|file)://", text):
        return text
    path = Path(text).expanduser()
    if not path.exists():
        raise MissingSourceError(
            f"IMDB source {path}{origin} does not exist: give an aclImdb_v1.tar.gz, an extracted "
            f"aclImdb/ folder, or leave it unset to download {IMDB_URL}"
        )
    if path.is_file():
        try:
            with open(path, "rb") as file:
                if file.peek(2)[:2] != b"\x1f\x8b":  # gzip data is checked as it is read
                    _refuse_non_tar(file, False, path)
        except OSError as error:
            raise _unreadable(path, error) from error
    return path


def resolve_source(source: str | os.PathLike | None = None, *, progress: bool = True) -> Path:
    """Turn ``source`` (None, a URL, an archive or a folder) into a local path: a URL
    (``http(s)://``, ``file://``) is downloaded once into ``data/``, with the sha256 checked
    for the official URL; a local path is checked by :func:`check_source`."""
    found = check_source(source)
    if isinstance(found, Path):
        return found
    sha256 = IMDB_SHA256 if found == IMDB_URL else None
    return download_imdb(found, sha256=sha256, progress=progress)


# --------------------------------------------------------------------------- reading


def _review_key(name: str) -> tuple[str, str] | None:
    """``(split, label)`` if ``name`` is ``.../{train,test}/{pos,neg}/*.txt``, else None."""
    parts = name.split("/")
    if len(parts) >= 3 and parts[-1].endswith(".txt"):
        split, label = parts[-3], parts[-2]
        if split in SPLITS and label in LABELS:
            return split, label
    return None


def _octal(field: bytes) -> int:
    if field[:1] and field[0] & 0x80:  # GNU base-256 for huge sizes
        return int.from_bytes(field[1:], "big")
    field = field.replace(b"\0", b" ").strip()
    return int(field, 8) if field else 0


def _header_checksum_ok(header: bytes) -> bool:
    """Whether a 512-byte tar header block carries its own checksum (any tar format)."""
    try:
        stored = _octal(header[148:156])
    except ValueError:  # not octal digits: not a tar header
        return False
    return stored == sum(header) - sum(header[148:156]) + 256


def _iter_tar(stream: io.BufferedIOBase) -> Iterator[tuple[tuple[str, str], str, bytes]]:
    """Yield ``((split, label), name, data)`` for the labeled reviews of a tar stream.

    Other members are skipped without being kept. A small parser
    (ustar, GNU long names, pax paths) is several times faster than ``tarfile`` here.
    """
    read = stream.read
    long_name: str | None = None
    while True:
        header = read(512)
        if len(header) < 512:
            raise EOFError("the archive ends in the middle of a header")
        if header.count(0) == 512:
            return
        if not _header_checksum_ok(header):
            raise ValueError("a tar header has a wrong checksum")
        size = _octal(header[124:136])
        kind = header[156:157]
        name = header[:100].split(b"\0", 1)[0].decode("utf-8", "replace")
        if header[257:262] == b"ustar" and header[345:346] != b"\0":
            prefix = header[345:500].split(b"\0", 1)[0].decode("utf-8", "replace")
            name = f"{prefix}/{name}"
        if long_name is not None:
            name, long_name = long_name, None
        padded = (size + 511) & ~511
        if kind in (b"L", b"x"):
            meta = read(padded)[:size]
            if kind == b"L":
                long_name = meta.split(b"\0", 1)[0].decode("utf-8", "replace")
            else:
                m = re.search(rb"\d+ path=([^\n]*)\n", meta)
                long_name = m.group(1).decode("utf-8", "replace") if m else None
            continue
        key = _review_key(name) if kind in (b"0", b"\0", b"7") else None
        if key is not None:
            data = read(padded)
            if len(data) < padded:
                raise EOFError(f"the archive ends inside {name}")
            yield key, name, data[:size]
        else:
            _skip(stream, padded)


def _skip(stream: io.BufferedIOBase, n: int) -> None:
    while n > 0:
        chunk = stream.read(min(n, 1 << 22))
        if not chunk:
            raise EOFError("the archive ends in the middle of a member")
        n -= len(chunk)


def _refuse_non_tar(stream: io.BufferedReader, is_gzip: bool, path: Path) -> None:
    """Raise :class:`NotAnArchiveError` unless ``stream`` starts with a tar header block
    (ustar magic, or a v7 header's checksum); a short gzip stream is left to the parser."""
    head = stream.peek(512)[:512]
    if (is_gzip and len(head) < 512) or head[257:262] == b"ustar" or _header_checksum_ok(head):
        return
    inside = ""
    if is_gzip:  # a damaged archive fails its gzip check on the way to the end
        while stream.read(1 << 22):
            pass
        inside = ", nor is the gzip data in it a tar"
    raise NotAnArchiveError(
        f"{path} is not a .tar or .tar.gz archive{inside}: give aclImdb_v1.tar.gz or the "
        "aclImdb/ folder extracted from it"
    )


def _read_archive(path: Path) -> dict[tuple[str, str], list[tuple[str, bytes]]]:
    found: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
    try:
        with open(path, "rb") as raw:
            is_gzip = raw.read(2) == b"\x1f\x8b"
            raw.seek(0)
            inner = gzip.GzipFile(fileobj=raw, mode="rb") if is_gzip else raw
            stream = io.BufferedReader(inner, 1 << 22)  # small reads stay in C
            _refuse_non_tar(stream, is_gzip, path)
            for key, name, data in _iter_tar(stream):
                found.setdefault(key, []).append((name, data))
            while stream.read(1 << 22):  # read to the end: checks the gzip CRC and length
                pass
    except (EOFError, zlib.error, gzip.BadGzipFile, ValueError) as err:
        raise CorruptArchiveError(
            f"{path} is truncated or corrupt ({err}): delete it and download it again, or "
            f"point {SOURCE_ENV} at a good copy"
        ) from err
    except OSError as err:
        raise _unreadable(path, err) from err
    return found


def _find_root(folder: Path) -> Path:
    """The folder that holds ``train/`` and ``test/`` (``folder`` or ``folder/aclImdb``)."""
    if not (folder / "train").is_dir() and (folder / "aclImdb").is_dir():
        return folder / "aclImdb"
    return folder


def _read_folder(folder: Path) -> dict[tuple[str, str], list[tuple[str, bytes]]]:
    root = _find_root(folder)
    found: dict[tuple[str, str], list[tuple[str, bytes]]] = {}
    for split in SPLITS:
        for label in LABELS:
            sub = root / split / label
            if not sub.is_dir():
                continue
            items = []
            with os.scandir(sub) as entries:
                for entry in entries:
                    if entry.name.endswith(".txt") and entry.is_file():
                        with open(entry.path, "rb") as f:
                            items.append((entry.name, f.read()))
            found[(split, label)] = items
    return found


def _check_layout(found: dict, path: Path) -> None:
    missing = [f"{s}/{lab}" for s in SPLITS for lab in LABELS if not found.get((s, lab))]
    if missing:
        raise DatasetLayoutError(
            f"{path} is not in the aclImdb layout: no reviews in {', '.join(missing)}. Expected "
            "aclImdb/{train,test}/{pos,neg}/*.txt (pos/ and neg/ folders of .txt reviews); "
            f"give the aclImdb/ folder or the .tar.gz (with --data or {SOURCE_ENV}), or give "
            "neither to download IMDB"
        )


def clean_text(text: str) -> str:
    """Turn the HTML line breaks ``<br />`` of a review into newlines."""
    text = text.replace("<br />", "\n")  # the usual spelling, fast
    return _BR.sub("\n", text) if "<" in text else text


def read_reviews(path: str | os.PathLike) -> dict[str, tuple[list[str], np.ndarray]]:
    """Parse an archive or folder into ``{split: (texts, labels int8)}``, in a fixed order.

    The order (by label, then file name) does not depend on the source kind, so a folder and
    the archive it came from give the same result.
    """
    path = Path(path)
    found = _read_folder(path) if path.is_dir() else _read_archive(path)
    _check_layout(found, path)
    out = {}
    for split in SPLITS:
        texts: list[str] = []
        labels: list[int] = []
        for label, value in sorted(LABELS.items()):
            items = sorted(found[(split, label)], key=lambda item: _sort_key(item[0]))
            texts.extend(clean_text(data.decode("utf-8", "replace")) for _, data in items)
            labels.extend([value] * len(items))
        out[split] = (texts, np.asarray(labels, dtype=np.int8))
    return out


def _sort_key(name: str) -> tuple[int, str]:
    base = name.rsplit("/", 1)[-1]
    head = base.split("_", 1)[0]
    return (int(head) if head.isdigit() else -1, base)


def extract_imdb(archive: str | os.PathLike, dest: str | os.PathLike) -> Path:
    """Extract the labeled reviews of ``archive`` to ``dest/aclImdb`` and return that folder.

    Only ``{train,test}/{pos,neg}/*.txt`` are written (never ``train/unsup``), into a
    temporary folder renamed at the end: an ``aclImdb/`` folder that exists is complete.
    """
    archive, dest = Path(archive), Path(dest)
    final = dest / "aclImdb"
    if final.exists():
        raise FileExistsError(f"{final} already exists: delete it first or choose another dest")
    dest.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=dest, prefix=".aclImdb-"))
    make_ordinary(tmp)
    try:
        found = _read_archive(archive)
        _check_layout(found, archive)
        for (split, label), items in found.items():
            sub = tmp / split / label
            sub.mkdir(parents=True)
            for name, data in items:
                (sub / name.rsplit("/", 1)[-1]).write_bytes(data)
        os.replace(tmp, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final
