"""The Tatoeba Greek-English pairs of practical 3's translation task: find, read, split.

Sources (``source`` argument, else the ``M2L_NLP_TATOEBA`` environment variable, else
``../shared/data/tatoeba-el-en.tsv`` beside the repository, else a copy downloaded into
``data/``, else the summer school's ``el-en.tsv``, downloaded there and checked against its
sha256); ``"small"`` is the bundled excerpt of whole components. The file is plain TSV
(UTF-8, a byte-order mark, CRLF, no header, no quoting): Greek id, Greek sentence, English
id, English sentence. :func:`read_pairs` refuses anything else in one line that says what
is wrong. :func:`split_pairs` splits by connected component of the sentence graph, so no
English and no Greek sentence is on two sides; :func:`random_pair_split` is the leaky split
of the summer school's notebook, kept to show what the leak is worth.
"""

from __future__ import annotations

import hashlib
import os
import re
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np

from m2l_nlp.data import imdb_archive
from m2l_nlp.data.imdb_archive import (
    DATA_DIR,
    ChecksumError,
    DataError,
    MissingSourceError,
    _unreadable,
    download,
)

TATOEBA_URL = (
    "https://raw.githubusercontent.com/M2Lschool/tutorials2023/main/3_nlp/notebooks/"
    "3_3_transformers_translation/el-en.tsv"
)
TATOEBA_SHA256 = "7dadac38b090445a11edeea86229f5fe76971035e8dd0d0901e0a14dd02b22ab"
SOURCE_ENV = "M2L_NLP_TATOEBA"
SMALL_PAIRS = DATA_DIR / "small" / "tatoeba-el-en-small.tsv"
# the copy for machines without a network, beside the repository
SHARED_PAIRS = DATA_DIR.parent.parent / "shared" / "data" / "tatoeba-el-en.tsv"
DOWNLOAD_NAME = "el-en.tsv"
SIDES = ("train", "val", "test")
_WHAT = "the Tatoeba el-en.tsv"

_HOW_TO_FIX = (
    f"download {TATOEBA_URL} by hand (or copy a local one) and set {SOURCE_ENV}=/path/to/el-en.tsv"
)


class Pair(NamedTuple):
    """One translation: an English sentence and its Greek rendering."""

    en: str
    el: str


class PairSplit(NamedTuple):
    """The pairs of each side, and ``counts[kind][side]`` for kind in components, pairs,
    english, greek (distinct sentences)."""

    train: list[Pair]
    val: list[Pair]
    test: list[Pair]
    counts: dict[str, dict[str, int]]


class PairsFormatError(DataError):
    """The file is not the Tatoeba el-en.tsv format (encoding, fields, empty or truncated)."""


# --------------------------------------------------------------------------- sources


def resolve_pairs(source: str | os.PathLike | None = None, *, progress: bool = True) -> Path:
    """The local file of pairs that ``source`` names: ``"small"`` (the bundled excerpt), a
    path, or None: ``$M2L_NLP_TATOEBA``, else the shared copy beside the repository, else
    ``data/el-en.tsv`` (downloaded and checked by sha256 when missing)."""
    if source is not None and os.fspath(source) == "small":
        return SMALL_PAIRS
    if source is not None:
        return _readable(Path(source).expanduser(), "")
    if env := os.environ.get(SOURCE_ENV):
        return _readable(Path(env).expanduser(), f" (from {SOURCE_ENV})")
    if SHARED_PAIRS.is_file():
        return _readable(SHARED_PAIRS, "")
    dest = imdb_archive.DATA_DIR / DOWNLOAD_NAME  # looked up now: tests move it
    if dest.is_file():  # complete (renamed after its check), but it may have been damaged since
        got = hashlib.sha256(_read_bytes(dest)).hexdigest()
        if got != TATOEBA_SHA256:
            raise ChecksumError(
                f"{dest} has sha256 {got}, expected {TATOEBA_SHA256}: delete it and run again "
                f"to download it anew, or {_HOW_TO_FIX}"
            )
        return dest
    return download(
        TATOEBA_URL,
        dest,
        sha256=TATOEBA_SHA256,
        what="Tatoeba el-en",
        how_to_fix=_HOW_TO_FIX,
        progress=progress,
    )


def _readable(path: Path, origin: str) -> Path:
    """``path`` if it is a file that can be opened, else a one-line :class:`DataError`."""
    if not path.exists():
        raise MissingSourceError(
            f"Tatoeba pairs {path}{origin} do not exist: set {SOURCE_ENV}=/path/to/el-en.tsv, "
            'give "small" for the bundled excerpt, or leave both unset to download it'
        )
    if path.is_dir():
        raise MissingSourceError(
            f"Tatoeba pairs {path}{origin} is a folder: give the el-en.tsv file in it "
            f"({SOURCE_ENV}=/path/to/el-en.tsv)"
        )
    try:
        with open(path, "rb") as file:
            file.read(1)
    except OSError as error:
        raise _unreadable(path, error, _WHAT) from error
    return path


def _read_bytes(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError as error:
        raise _unreadable(path, error, _WHAT) from error


# --------------------------------------------------------------------------- reading


def read_pairs(path: str | os.PathLike) -> list[Pair]:
    """The pairs of a Tatoeba ``el-en.tsv``, in file order, each sentence NFC-normalised and
    stripped. Anything but UTF-8 lines of exactly four tab-separated fields (a byte-order
    mark, CRLF or LF, blank lines aside) raises :class:`PairsFormatError`, as do null bytes
    (a damaged file) and Greek in the English column of most pairs (columns swapped, which
    would train a model in the wrong direction without a word)."""
    path = Path(path)
    raw = _read_bytes(path)
    zero = raw.find(b"\x00")  # no text has one; a crashed copy or a bad disk leaves zeros
    if zero >= 0:
        line = raw.count(b"\n", 0, zero) + 1
        raise PairsFormatError(
            f"{path} is damaged: it holds null bytes (the first at byte {zero}, line {line}), "
            f"which no text file has: copy or download {_WHAT} again"
        )
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        if err.end == len(raw) and err.reason == "unexpected end of data":
            raise PairsFormatError(
                f"{path} looks truncated: it ends in the middle of a character (byte "
                f"{err.start}, line {line}): copy or download {_WHAT} again"
            ) from err
        raise PairsFormatError(
            f"{path} is not UTF-8 text (byte {err.start}, line {line}): is it {_WHAT}? "
            f"Give the file itself, or set {SOURCE_ENV}=/path/to/el-en.tsv"
        ) from err
    lines = text.removeprefix("\ufeff").split("\n")  # not splitlines: no other line breaks
    pairs = []
    for number, line in enumerate(lines, start=1):
        line = line.removesuffix("\r")
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            cut = " (the file looks truncated)" if number == len(lines) else ""
            raise PairsFormatError(
                f"{path}: line {number} has {len(fields)} tab-separated fields, expected 4"
                f"{cut}: {line!r:.80} is it {_WHAT}?"
            )
        el, en = (unicodedata.normalize("NFC", f).strip() for f in (fields[1], fields[3]))
        if not el or not en:
            raise PairsFormatError(
                f"{path}: line {number} has an empty sentence: {line!r:.80} is it {_WHAT}?"
            )
        pairs.append(Pair(en=en, el=el))
    if not pairs:
        raise PairsFormatError(f"{path} holds no pairs: is it {_WHAT}? Give another copy")
    swapped = sum(is_greek(pair.en) and not is_greek(pair.el) for pair in pairs)
    if 2 * swapped > len(pairs):  # most of them: a few English sentences may quote Greek
        raise PairsFormatError(
            f"{path}: the English column (the 4th) holds Greek in {swapped} of {len(pairs)} "
            "pairs, and the Greek column (the 2nd) does not: the columns look swapped (the "
            "order is Greek id, Greek sentence, English id, English sentence); swap them back, "
            "e.g. awk -F'\\t' -v OFS='\\t' '{print $3, $4, $1, $2}' in.tsv > out.tsv"
        )
    return pairs


_GREEK = re.compile(r"[\u0370-\u03ff\u1f00-\u1fff]")  # Greek and Coptic, Greek Extended
_LATIN = re.compile(r"[A-Za-z\u00c0-\u024f]")


def is_greek(text: str) -> bool:
    """Whether ``text`` is written mostly in Greek letters (more Greek letters than Latin)."""
    return len(_GREEK.findall(text)) > len(_LATIN.findall(text))


# --------------------------------------------------------------------------- splits


def split_pairs(
    pairs: Sequence[Pair], *, seed: int = 0, val_fraction: float = 0.05, test_fraction: float = 0.1
) -> PairSplit:
    """Split ``pairs`` by connected component of the graph whose nodes are the distinct
    English and Greek sentences and whose edges are the pairs: no sentence is on two sides.

    The components, shuffled by ``seed``, fill the test side until it holds
    ``test_fraction`` of the pairs, then the validation side; the rest is training. Each side
    keeps the order of ``pairs``.
    """
    if not (0 <= val_fraction < 1 and 0 <= test_fraction < 1 and val_fraction + test_fraction < 1):
        raise ValueError(
            f"val_fraction {val_fraction} and test_fraction {test_fraction} must be in [0, 1) "
            "and leave pairs for training"
        )
    component = _components(pairs)  # (N,) component of each pair, numbered by first pair
    n_components = int(component.max()) + 1 if len(pairs) else 0
    sizes = np.bincount(component, minlength=n_components)
    side_of = np.zeros(n_components, dtype=np.int8)  # 0 train, 1 val, 2 test
    order = np.random.default_rng(seed).permutation(n_components)
    cursor = 0
    for side, fraction in ((2, test_fraction), (1, val_fraction)):
        target, held = fraction * len(pairs), 0
        while held < target and cursor < n_components:
            side_of[order[cursor]] = side
            held += sizes[order[cursor]]
            cursor += 1
    pair_side = side_of[component]
    out: dict[str, list[Pair]] = {
        name: [p for p, s in zip(pairs, pair_side.tolist(), strict=True) if s == k]
        for k, name in enumerate(SIDES)
    }
    counts = {
        "components": {name: int((side_of == k).sum()) for k, name in enumerate(SIDES)},
        "pairs": {name: len(out[name]) for name in SIDES},
        "english": {name: len({p.en for p in out[name]}) for name in SIDES},
        "greek": {name: len({p.el for p in out[name]}) for name in SIDES},
    }
    return PairSplit(out["train"], out["val"], out["test"], counts)


def _components(pairs: Sequence[Pair]) -> np.ndarray:
    """``(N,)`` int64: the connected component of each pair (union-find over sentences),
    numbered in the order of their first pair."""
    node: dict[tuple[str, str], int] = {}
    parent: list[int] = []

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]  # path halving keeps the trees flat
            x = parent[x]
        return x

    ends = []
    for pair in pairs:
        ids = []
        for key in (("en", pair.en), ("el", pair.el)):  # the same text in both is two nodes
            if key not in node:
                node[key] = len(parent)
                parent.append(len(parent))
            ids.append(node[key])
        a, b = find(ids[0]), find(ids[1])
        if a != b:
            parent[b] = a
        ends.append(ids[0])
    number: dict[int, int] = {}
    return np.array([number.setdefault(find(i), len(number)) for i in ends], dtype=np.int64)


def random_pair_split(
    pairs: Sequence[Pair], *, seed: int = 0, test_fraction: float = 0.1
) -> tuple[list[Pair], list[Pair]]:
    """``(train, test)``: ``test_fraction`` of the pairs drawn at random, as the summer
    school's notebook did. Leaky: a sentence with several translations lands on both sides;
    only for showing how much that inflates a score."""
    if not 0 <= test_fraction < 1:
        raise ValueError(f"test_fraction must be in [0, 1), not {test_fraction}")
    in_test = np.zeros(len(pairs), dtype=bool)
    n_test = round(test_fraction * len(pairs))
    in_test[np.random.default_rng(seed).permutation(len(pairs))[:n_test]] = True
    flags = in_test.tolist()
    train = [p for p, t in zip(pairs, flags, strict=True) if not t]
    return train, [p for p, t in zip(pairs, flags, strict=True) if t]


def references(pairs: Sequence[Pair]) -> tuple[list[str], list[list[str]]]:
    """The distinct English sentences of ``pairs`` in first-seen order and, for each, its
    distinct Greek renderings in first-seen order (the references to score against)."""
    grouped: dict[str, dict[str, None]] = {}
    for pair in pairs:
        grouped.setdefault(pair.en, {})[pair.el] = None  # a dict keeps order and drops repeats
    return list(grouped), [list(greek) for greek in grouped.values()]
