"""IMDB reviews: download or read a local copy, parse fast, tokenize, cache.

Sources (``source`` argument, else the ``M2L_NLP_IMDB`` environment variable, else the
official URL): the official ``aclImdb_v1.tar.gz`` (downloaded once into ``data/``, checked
against its sha256), any local ``.tar.gz``/``.tar`` in the aclImdb layout, or an extracted
``aclImdb/`` folder (or the folder that holds it). Only ``{train,test}/{pos,neg}/*.txt`` are
read; ``train/unsup`` is skipped. Archives are read straight from the compressed stream, so
nothing is ever half-extracted. The parsed texts and the prepared arrays are cached under
``data/cache/`` (or ``M2L_NLP_CACHE``), keyed by the data's content and the settings.

Text cleanup: the reviews use HTML line breaks; every ``<br />`` (also ``<br>``, ``<br/>``)
becomes a newline ``"\\n"``, so paragraphs stay visible when printed and the whitespace
pre-tokenizer treats them as spaces. Nothing else is changed.
"""

from __future__ import annotations

import dataclasses
import gzip
import hashlib
import io
import json
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
import pandas as pd
import tokenizers

from m2l_nlp import bigrams, tokenization
from m2l_nlp.fileio import atomic_file, make_ordinary

IMDB_URL = "https://ai.stanford.edu/~amaas/data/sentiment/aclImdb_v1.tar.gz"
IMDB_SHA256 = "c40f74a18d3b61f90feba1e17730e0d38e8b97c05fde7008942e91923d1658fe"
SOURCE_ENV = "M2L_NLP_IMDB"
CACHE_ENV = "M2L_NLP_CACHE"
DATA_DIR = Path(__file__).resolve().parent.parent / "data"
SMALL_DATA = DATA_DIR / "small" / "aclImdb"
SPLITS = ("train", "test")
LABELS = {"pos": 1, "neg": 0}
CACHE_VERSION = 2  # bump when the parsing, cleanup or encoding changes

_BR = re.compile(r"<br\s*/?>", re.IGNORECASE)
_HOW_TO_FIX = (
    f"download {IMDB_URL} by hand (or copy a local aclImdb_v1.tar.gz) and set "
    f"{SOURCE_ENV}=/path/to/aclImdb_v1.tar.gz (an extracted aclImdb/ folder works too)"
)


class DataError(RuntimeError):
    """The IMDB data could not be obtained or read; the message says what to do."""


class DownloadError(DataError):
    """The download failed (no network, HTTP error, connection cut)."""


class ChecksumError(DataError):
    """A downloaded or cached archive does not have the expected sha256."""


class CorruptArchiveError(DataError):
    """The archive is truncated or damaged."""


class DatasetLayoutError(DataError):
    """The folder or archive is not in the aclImdb layout."""


class MissingSourceError(DataError, FileNotFoundError):
    """The local IMDB source named does not exist."""


class NotAnArchiveError(DataError):
    """The file named is neither a .tar nor a .tar.gz archive."""


class UnreadableSourceError(DataError):
    """The local IMDB source exists but cannot be read (permissions, a device error)."""


def _unreadable(path: Path, error: OSError) -> UnreadableSourceError:
    return UnreadableSourceError(
        f"cannot read {path} ({error.strerror or error}): check that you may read it, or give "
        "another copy of IMDB"
    )


# --------------------------------------------------------------------------- locations


def default_cache_dir() -> Path:
    """``$M2L_NLP_CACHE`` if set, else ``data/cache/`` in the repository."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else DATA_DIR / "cache"


def compilation_cache_dir() -> Path:
    """Where entry points keep the programs XLA compiles: ``jax/`` in the data cache."""
    return default_cache_dir() / "jax"


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
    dest = dest_dir / name
    if dest.is_file():
        return dest
    digest = hashlib.sha256()
    with atomic_file(dest) as out:  # renamed only once complete and checked
        _fetch(url, out, digest, progress=progress, timeout=timeout)
        got = digest.hexdigest()
        if sha256 is not None and got != sha256.lower():
            raise ChecksumError(
                f"the download of {url} has sha256 {got}, expected {sha256}: it is damaged or "
                f"not the IMDB archive. Run again to retry, or {_HOW_TO_FIX}"
            )
    return dest


def _fetch(url: str, out: io.BufferedWriter, digest, *, progress: bool, timeout: float) -> None:
    from tqdm.auto import tqdm

    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            total = response.headers.get("Content-Length")
            total = int(total) if total else None
            done = 0
            with tqdm(
                total=total, unit="B", unit_scale=True, desc="IMDB", disable=not progress
            ) as bar:
                while chunk := response.read(1 << 20):
                    out.write(chunk)
                    digest.update(chunk)
                    done += len(chunk)
                    bar.update(len(chunk))
    except (urllib.error.URLError, OSError, TimeoutError) as err:
        reason = getattr(err, "reason", err)
        raise DownloadError(f"could not download {url} ({reason}); {_HOW_TO_FIX}") from err
    if total is not None and done != total:
        raise DownloadError(
            f"the download of {url} stopped after {done} of {total} bytes; run again, "
            f"or {_HOW_TO_FIX}"
        )


def resolve_source(source: str | os.PathLike | None = None, *, progress: bool = True) -> Path:
    """Turn ``source`` (None, a URL, an archive or a folder) into a local path.

    None means ``$M2L_NLP_IMDB`` if set, else the official URL (downloaded once into
    ``data/``). A URL (``http(s)://``, ``file://``) is downloaded into ``data/`` (the sha256
    is checked for the official URL only).
    """
    origin = ""
    if source is None:
        source = os.environ.get(SOURCE_ENV) or IMDB_URL
        origin = f" (from {SOURCE_ENV})" if os.environ.get(SOURCE_ENV) else ""
    text = os.fspath(source)
    if re.match(r"^(https?|ftp|file)://", text):
        sha = IMDB_SHA256 if text == IMDB_URL else None
        return download_imdb(text, sha256=sha, progress=progress)
    path = Path(text).expanduser()
    if not path.exists():
        raise MissingSourceError(
            f"IMDB source {path}{origin} does not exist: give an aclImdb_v1.tar.gz, an extracted "
            f"aclImdb/ folder, or leave it unset to download {IMDB_URL}"
        )
    return path


# --------------------------------------------------------------------------- parsing


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


# --------------------------------------------------------------------------- caching


def fingerprint(path: str | os.PathLike) -> str:
    """A sha256 naming the data: of the file's bytes, or of a folder's reviews' names,
    sizes and modification times (cheap: no file is read)."""
    path = Path(path)
    digest = hashlib.sha256()
    if path.is_file():
        with open(path, "rb") as f:
            while chunk := f.read(1 << 22):
                digest.update(chunk)
        return digest.hexdigest()
    root = _find_root(path)
    for split in SPLITS:
        for label in LABELS:
            sub = root / split / label
            if not sub.is_dir():
                continue
            with os.scandir(sub) as entries:
                rows = sorted(
                    f"{split}/{label}/{e.name}:{e.stat().st_size}:{e.stat().st_mtime_ns}"
                    for e in entries
                    if e.name.endswith(".txt")
                )
            digest.update("\n".join(rows).encode())
    return digest.hexdigest()


def _atomic_savez(path: Path, **arrays: np.ndarray) -> None:
    with atomic_file(path) as handle:
        np.savez(handle, **arrays)


def _save_texts(path: Path, parsed: dict[str, tuple[list[str], np.ndarray]]) -> None:
    arrays = {}
    for split, (texts, labels) in parsed.items():
        blob = "".join(texts)
        lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
        arrays[f"{split}_blob"] = np.frombuffer(blob.encode("utf-8"), dtype=np.uint8)
        arrays[f"{split}_ends"] = np.cumsum(lengths)
        arrays[f"{split}_labels"] = labels
    _atomic_savez(path, **arrays)


def _load_texts(path: Path) -> dict[str, tuple[list[str], np.ndarray]]:
    out = {}
    with np.load(path, allow_pickle=False) as z:
        for split in SPLITS:
            blob = z[f"{split}_blob"].tobytes().decode("utf-8")
            ends = z[f"{split}_ends"].tolist()
            starts = [0, *ends[:-1]]
            out[split] = (
                [blob[a:b] for a, b in zip(starts, ends, strict=True)],
                z[f"{split}_labels"],
            )
    return out


# --------------------------------------------------------------------------- loading


def load_imdb(
    source: str | os.PathLike | None = None,
    seed: int | None = 0,
    *,
    cache_dir: str | os.PathLike | None = None,
    use_cache: bool = True,
    progress: bool = True,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Load IMDB as ``(train_df, test_df)`` with columns ``text`` (str) and ``label``
    (int, 1 = positive, 0 = negative), rows shuffled with ``seed`` (None: no shuffle).

    ``source``: None (``$M2L_NLP_IMDB``, else download the official archive), a ``.tar.gz``,
    or an extracted ``aclImdb/`` folder. ``<br />`` line breaks become ``"\\n"``. The parsed
    texts are cached in ``cache_dir`` (default :func:`default_cache_dir`) unless
    ``use_cache`` is False.
    """
    path = resolve_source(source, progress=progress)
    parsed = _parse_cached(path, cache_dir=cache_dir, use_cache=use_cache)
    return tuple(_frame(*parsed[split], seed=seed) for split in SPLITS)  # type: ignore[return-value]


def _parse_cached(
    path: Path, *, cache_dir: str | os.PathLike | None, use_cache: bool, key: str | None = None
) -> dict[str, tuple[list[str], np.ndarray]]:
    if not use_cache:
        return read_reviews(path)
    key = key or _checked_fingerprint(path)
    cache = Path(cache_dir or default_cache_dir()) / f"imdb-texts-v{CACHE_VERSION}-{key[:20]}.npz"
    if cache.is_file():
        try:
            return _load_texts(cache)
        except Exception:  # a damaged cache file is rebuilt, never trusted
            cache.unlink(missing_ok=True)
    parsed = read_reviews(path)
    _save_texts(cache, parsed)
    return parsed


def _checked_fingerprint(path: Path) -> str:
    """Fingerprint ``path``; the official download must also match its published sha256."""
    try:
        key = fingerprint(path)
    except OSError as err:
        raise _unreadable(path, err) from err
    if path.is_file() and path.parent == DATA_DIR and path.name == "aclImdb_v1.tar.gz":
        if key != IMDB_SHA256:
            raise ChecksumError(
                f"{path} has sha256 {key}, expected {IMDB_SHA256}: delete it and run again "
                f"to download it anew, or {_HOW_TO_FIX}"
            )
    return key


def _frame(texts: list[str], labels: np.ndarray, *, seed: int | None) -> pd.DataFrame:
    df = pd.DataFrame({"text": texts, "label": labels.astype(np.int64)})
    if seed is not None:
        order = np.random.default_rng(seed).permutation(len(df))
        df = df.iloc[order].reset_index(drop=True)
    return df


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


# --------------------------------------------------------------------------- pipeline


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """IMDB encoded for the classifier: ids and mask int32 ``(N, seq_len)``, labels int32
    ``(N,)`` (1 = positive), and the tokenizer that made them. With ``bigram_table``, a
    token followed by a frequent partner is stored as the pair's id (:mod:`m2l_nlp.bigrams`)."""

    train_ids: np.ndarray
    train_mask: np.ndarray
    train_labels: np.ndarray
    test_ids: np.ndarray
    test_mask: np.ndarray
    test_labels: np.ndarray
    tokenizer: tokenization.Tokenizer = dataclasses.field(repr=False)
    from_cache: bool = False
    cache_path: Path | None = None
    bigram_table: np.ndarray | None = dataclasses.field(default=None, repr=False)
    bigram_mode: str = "merge"  # how the pair tokens were added (m2l_nlp.bigrams.MODES)

    @property
    def vocab_size(self) -> int:
        """Embedding rows the ids need: the tokenizer's vocabulary (can be below the
        requested size), plus the bigram tokens if any."""
        base = self.tokenizer.get_vocab_size()
        if self.bigram_table is None:
            return base
        return bigrams.vocab_size_with_bigrams(base, self.bigram_table)

    @property
    def seq_len(self) -> int:
        return int(self.train_ids.shape[1])

    def __repr__(self) -> str:
        return (
            f"PreparedData(train={self.train_ids.shape[0]}, test={self.test_ids.shape[0]}, "
            f"seq_len={self.seq_len}, vocab_size={self.vocab_size}, "
            f"from_cache={self.from_cache}, cache_path={self.cache_path})"
        )


def prepare_imdb(
    source: str | os.PathLike | None = None,
    vocab_size: int = 20000,
    seq_len: int = 600,
    seed: int | None = 0,
    cache_dir: str | os.PathLike | None = None,
    *,
    use_cache: bool = True,
    progress: bool = True,
    bigram_tokens: int = 0,
    bigram_mode: str = "merge",
) -> PreparedData:
    """Load IMDB, train the tokenizer on the train split, and encode both splits.

    ``seq_len`` tokens are kept per review. With ``bigram_tokens=K > 0``, the ``K`` most
    frequent pairs of neighbouring tokens in the train split become tokens of their own
    (:mod:`m2l_nlp.bigrams`): with ``bigram_mode="merge"`` a token followed by its partner
    is stored as the pair's id; with ``"interleave"`` the pair's id follows the token, and
    ``seq_len`` counts positions (tokens and pairs) rather than tokens.

    The result is cached in ``cache_dir`` (default :func:`default_cache_dir`) under a key
    made of the data's fingerprint and the settings; a second call with the same data and
    settings reads the cache (``from_cache`` is then True) and trains nothing.
    """
    bigrams.check_mode(bigram_mode)
    path = resolve_source(source, progress=progress)
    data_key = _checked_fingerprint(path)
    settings = {
        "data": data_key,
        "vocab_size": vocab_size,
        "seq_len": seq_len,
        "bigram_tokens": bigram_tokens,
        "bigram_mode": bigram_mode,
        "seed": seed,
        "version": CACHE_VERSION,
        "tokenizers": tokenizers.__version__,
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]
    folder = Path(cache_dir or default_cache_dir()) / f"imdb-prepared-{key}"
    if use_cache and (folder / "arrays.npz").is_file():
        try:
            return _load_prepared(folder)
        except Exception:  # damaged: rebuild
            shutil.rmtree(folder, ignore_errors=True)
    elif use_cache and folder.exists() and not (folder / "arrays.npz").is_file():
        # Emptied by hand: caches only ever appear complete (renamed into place), so this is
        # not another process's work in progress. Rebuilt below, and saved again.
        shutil.rmtree(folder, ignore_errors=True)

    parsed = _parse_cached(path, cache_dir=cache_dir, use_cache=use_cache, key=data_key)
    train_df, test_df = (_frame(*parsed[split], seed=seed) for split in SPLITS)
    tok = tokenization.train_tokenizer(
        train_df["text"], vocab_size=vocab_size, show_progress=progress
    )
    # one call for both splits: each distinct word is encoded once
    ids, mask = tokenization.batch_encode(
        tok, [*train_df["text"], *test_df["text"]], seq_len=seq_len
    )
    n = len(train_df)
    table = None
    if bigram_tokens:
        base = tok.get_vocab_size()
        table = bigrams.fit_bigram_table(ids[:n], mask[:n], bigram_tokens, base)
        ids, mask = bigrams.apply_bigram_tokens(ids, mask, table, base, bigram_mode, seq_len)
    train_ids, train_mask, test_ids, test_mask = ids[:n], mask[:n], ids[n:], mask[n:]
    data = PreparedData(
        train_ids=train_ids,
        train_mask=train_mask,
        train_labels=train_df["label"].to_numpy(np.int32),
        test_ids=test_ids,
        test_mask=test_mask,
        test_labels=test_df["label"].to_numpy(np.int32),
        tokenizer=tok,
        bigram_table=table,
        bigram_mode=bigram_mode if table is not None else "merge",
    )
    if use_cache:
        _save_prepared(folder, data, settings)
        data = dataclasses.replace(data, cache_path=folder)
    return data


def _save_prepared(folder: Path, data: PreparedData, settings: dict) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-"))
    make_ordinary(tmp)
    try:
        small = data.vocab_size <= np.iinfo(np.uint16).max
        arrays = {}
        for split in SPLITS:
            ids = getattr(data, f"{split}_ids")
            arrays[f"{split}_ids"] = ids.astype(np.uint16) if small else ids
            arrays[f"{split}_lengths"] = getattr(data, f"{split}_mask").sum(axis=1)
            arrays[f"{split}_labels"] = getattr(data, f"{split}_labels").astype(np.int8)
        tokenization.save_tokenizer(data.tokenizer, tmp / "tokenizer.json")
        if data.bigram_table is not None:
            bigrams.save_table(tmp, data.bigram_table, data.bigram_mode)
        (tmp / "settings.json").write_text(json.dumps(settings, indent=1, sort_keys=True))
        np.savez(tmp / "arrays.npz", **arrays)
        try:
            os.replace(tmp, folder)
        except OSError:  # another process got there first: keep theirs
            pass
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _load_prepared(folder: Path) -> PreparedData:
    tok = tokenization.load_tokenizer(folder / "tokenizer.json")
    fields = {}
    with np.load(folder / "arrays.npz", allow_pickle=False) as z:
        for split in SPLITS:
            ids = z[f"{split}_ids"].astype(np.int32)
            lengths = z[f"{split}_lengths"]
            fields[f"{split}_ids"] = ids
            fields[f"{split}_mask"] = (np.arange(ids.shape[1]) < lengths[:, None]).astype(np.int32)
            fields[f"{split}_labels"] = z[f"{split}_labels"].astype(np.int32)
    fields["bigram_table"], fields["bigram_mode"] = bigrams.load_table(folder)
    return PreparedData(**fields, tokenizer=tok, from_cache=True, cache_path=folder)
