"""IMDB reviews for the classifier: cache the parsed texts, tokenize and encode them.

Where the reviews come from (a download, an archive, a folder), how they are read and
cleaned is :mod:`m2l_nlp.data.imdb_archive`. The parsed texts and the prepared arrays are cached
under ``data/cache/`` (or ``M2L_NLP_CACHE``), keyed by the data's content and the settings.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import tokenizers

from m2l_nlp.config import Preset
from m2l_nlp.data import bigrams, imdb_archive, tokenization
from m2l_nlp.data.masks import padding_mask
from m2l_nlp.data.splits import shuffle_order
from m2l_nlp.fileio import atomic_file, json_text, make_ordinary

if TYPE_CHECKING:
    import pandas as pd

CACHE_ENV = "M2L_NLP_CACHE"
SMALL_DATA = imdb_archive.DATA_DIR / "small" / "aclImdb"
CACHE_VERSION = 2  # bump when imdb_archive.read_reviews parses or cleans texts otherwise
PREPARED_VERSION = 3  # bump when the tokenizer or the encoding changes (3: reproducible ids)

# --------------------------------------------------------------------------- locations


def default_cache_dir() -> Path:
    """``$M2L_NLP_CACHE`` if set, else ``data/cache/`` in the repository."""
    env = os.environ.get(CACHE_ENV)
    return Path(env) if env else imdb_archive.DATA_DIR / "cache"


def compilation_cache_dir() -> Path:
    """Where entry points keep the programs XLA compiles: ``jax/`` in the data cache."""
    return default_cache_dir() / "jax"


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
    root = imdb_archive._find_root(path)
    for split in imdb_archive.SPLITS:
        for label in imdb_archive.LABELS:
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
        for split in imdb_archive.SPLITS:
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
    path = imdb_archive.resolve_source(source, progress=progress)
    parsed = _parse_cached(path, cache_dir=cache_dir, use_cache=use_cache)
    train, test = (_frame(*parsed[split], seed=seed) for split in imdb_archive.SPLITS)
    return train, test


def _parse_cached(
    path: Path, *, cache_dir: str | os.PathLike | None, use_cache: bool, key: str | None = None
) -> dict[str, tuple[list[str], np.ndarray]]:
    if not use_cache:
        return imdb_archive.read_reviews(path)
    key = key or _checked_fingerprint(path)
    cache = Path(cache_dir or default_cache_dir()) / f"imdb-texts-v{CACHE_VERSION}-{key[:20]}.npz"
    if cache.is_file():
        try:
            return _load_texts(cache)
        except Exception:  # a damaged cache file is rebuilt, never trusted
            cache.unlink(missing_ok=True)
    parsed = imdb_archive.read_reviews(path)
    _save_texts(cache, parsed)
    return parsed


def _checked_fingerprint(path: Path) -> str:
    """Fingerprint ``path``; the official download must also match its published sha256."""
    try:
        key = fingerprint(path)
    except OSError as err:
        raise imdb_archive._unreadable(path, err) from err
    if path.is_file() and path.parent == imdb_archive.DATA_DIR and path.name == "aclImdb_v1.tar.gz":
        if key != imdb_archive.IMDB_SHA256:
            raise imdb_archive.ChecksumError(
                f"{path} has sha256 {key}, expected {imdb_archive.IMDB_SHA256}: delete it and "
                f"run again to download it anew, or {imdb_archive._HOW_TO_FIX}"
            )
    return key


def _frame(texts: list[str], labels: np.ndarray, *, seed: int | None) -> pd.DataFrame:
    import pandas as pd  # only here: every process that imports this module is spared it

    df = pd.DataFrame({"text": texts, "label": labels.astype(np.int64)})
    if seed is not None:
        df = df.iloc[shuffle_order(len(df), seed)].reset_index(drop=True)
    return df


# --------------------------------------------------------------------------- pipeline


@dataclasses.dataclass(frozen=True)
class PreparedData:
    """IMDB encoded for the classifier: ids and mask int32 ``(N, seq_len)``, labels int32
    ``(N,)`` (1 = positive), and the tokenizer that made them. With ``bigram_table``, a
    token followed by a frequent partner is stored as the pair's id
    (:mod:`m2l_nlp.data.bigrams`)."""

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
    shuffle_seed: int | None = None  # rows shuffled by shuffle_order(N, seed); None: file order

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
) -> PreparedData:
    """Load IMDB, train the tokenizer on the train split, and encode both splits.

    ``seq_len`` tokens are kept per review. With ``bigram_tokens=K > 0``, the ``K`` most
    frequent pairs of neighbouring tokens in the train split become tokens of their own
    (:mod:`m2l_nlp.data.bigrams`): a token followed by its partner is stored as the pair's id.

    The result is cached in ``cache_dir`` (default :func:`default_cache_dir`) under a key
    made of the data's fingerprint and the settings; a second call with the same data and
    settings reads the cache (``from_cache`` is then True) and trains nothing.
    """
    path = imdb_archive.resolve_source(source, progress=progress)
    data_key = _checked_fingerprint(path)
    settings = {
        "data": data_key,
        "vocab_size": vocab_size,
        "seq_len": seq_len,
        "bigram_tokens": bigram_tokens,
        "seed": seed,
        "version": PREPARED_VERSION,
        "tokenizers": tokenizers.__version__,
    }
    key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:20]
    folder = Path(cache_dir or default_cache_dir()) / f"imdb-prepared-{key}"
    if use_cache and (folder / "arrays.npz").is_file():
        try:
            return dataclasses.replace(_load_prepared(folder), shuffle_seed=seed)
        except Exception:  # damaged: rebuild
            shutil.rmtree(folder, ignore_errors=True)
    elif use_cache and folder.exists() and not (folder / "arrays.npz").is_file():
        # Emptied by hand: caches only ever appear complete (renamed into place), so this is
        # not another process's work in progress. Rebuilt below, and saved again.
        shutil.rmtree(folder, ignore_errors=True)

    parsed = _parse_cached(path, cache_dir=cache_dir, use_cache=use_cache, key=data_key)
    train_df, test_df = (_frame(*parsed[split], seed=seed) for split in imdb_archive.SPLITS)
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
        ids = bigrams.merge_bigram_tokens(ids, mask, table, base)
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
        shuffle_seed=seed,
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
        for split in imdb_archive.SPLITS:
            ids = getattr(data, f"{split}_ids")
            arrays[f"{split}_ids"] = ids.astype(np.uint16) if small else ids
            arrays[f"{split}_lengths"] = getattr(data, f"{split}_mask").sum(axis=1)
            arrays[f"{split}_labels"] = getattr(data, f"{split}_labels").astype(np.int8)
        tokenization.save_tokenizer(data.tokenizer, tmp / "tokenizer.json")
        if data.bigram_table is not None:
            bigrams.save_table(tmp, data.bigram_table)
        (tmp / "settings.json").write_text(json_text(settings, indent=1, sort_keys=True))
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
        for split in imdb_archive.SPLITS:
            ids = z[f"{split}_ids"].astype(np.int32)
            lengths = z[f"{split}_lengths"]
            fields[f"{split}_ids"] = ids
            fields[f"{split}_mask"] = padding_mask(lengths, ids.shape[1])
            fields[f"{split}_labels"] = z[f"{split}_labels"].astype(np.int32)
    fields["bigram_table"] = bigrams.load_table(folder)
    return PreparedData(**fields, tokenizer=tok, from_cache=True, cache_path=folder)


def prepare_for(
    preset: Preset,
    source: str | os.PathLike | None = None,
    *,
    seed: int = 0,
    cache_dir: str | os.PathLike | None = None,
    progress: bool = True,
) -> PreparedData:
    """:func:`prepare_imdb` encoded as ``preset`` (a :class:`m2l_nlp.config.Preset`) says:
    vocabulary, tokens per review, pair tokens. ``source="small"`` is the bundled data."""
    return prepare_imdb(
        SMALL_DATA if source == "small" else source,
        vocab_size=preset.vocab_size,
        seq_len=preset.seq_len,
        seed=seed,
        cache_dir=cache_dir,
        progress=progress,
        bigram_tokens=preset.bigram_tokens,
    )
