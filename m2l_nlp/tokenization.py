"""Unigram tokenizer of the course: train, save/load, and encode batches to ``(ids, mask)``.

The setup follows the tutorial: a Unigram model, a lowercase normalizer, a whitespace
pre-tokenizer (``\\w+|[^\\w\\s]+``), the special tokens ``[PAD] [CLS] [SEP] [MASK]`` (``[PAD]``
has id 0) and ``[UNK]`` for unknown characters. No post-processor: no ``[CLS]`` is added.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

PAD_ID = 0
PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", UNK_TOKEN)


def new_tokenizer() -> Tokenizer:
    """An untrained tokenizer with the course's normalizer and pre-tokenizer."""
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return tok


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 20000, *, show_progress: bool = False
) -> Tokenizer:
    """Train the Unigram tokenizer on ``texts`` (train split only: no test leakage).

    The vocabulary can come out smaller than ``vocab_size`` on a small corpus; use
    ``tokenizer.get_vocab_size()`` for the model's embedding table.
    """
    if vocab_size < len(SPECIAL_TOKENS) + 1:
        raise ValueError(f"vocab_size must be at least {len(SPECIAL_TOKENS) + 1}, not {vocab_size}")
    texts = _as_text_list(texts)
    if not texts:
        raise ValueError("train_tokenizer needs at least one text")
    tok = new_tokenizer()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        unk_token=UNK_TOKEN,
        show_progress=show_progress,
    )
    tok.train_from_iterator(texts, trainer, length=len(texts))
    assert tok.token_to_id(PAD_TOKEN) == PAD_ID, "the trainer must give [PAD] the id 0"
    # The JSON reader rounds some scores by one ulp: return the tokenizer as it will read
    # back from disk, so a fresh and a saved-then-loaded tokenizer are the same.
    return Tokenizer.from_str(tok.to_str())


def save_tokenizer(tokenizer: Tokenizer, path: str | os.PathLike) -> Path:
    """Write ``tokenizer`` as JSON to ``path`` (a temporary file renamed at the end)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(tokenizer.to_str())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def load_tokenizer(path: str | os.PathLike) -> Tokenizer:
    """Read a tokenizer written by :func:`save_tokenizer`."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(
            f"no tokenizer at {path}: train one with train_tokenizer() and save_tokenizer(), "
            "or run prepare_imdb()"
        )
    try:
        return Tokenizer.from_file(str(path))
    except Exception as err:  # the Rust side raises a bare Exception
        raise ValueError(
            f"{path} is not a valid tokenizer file ({err}); delete it and train it again"
        ) from err


def batch_encode(
    tokenizer: Tokenizer, texts: Sequence[str], seq_len: int = 600
) -> tuple[np.ndarray, np.ndarray]:
    """Encode ``texts`` to ``(ids, mask)``, both int32 of shape ``(N, seq_len)``.

    Each row holds the first ``seq_len`` tokens of one text, then ``PAD_ID`` padding on the
    right; ``mask`` is 1 on tokens and 0 on padding. The tokenizer's own padding and
    truncation settings are ignored (and left untouched).
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be a positive number of tokens, not {seq_len}")
    texts = _as_text_list(texts)
    tok = Tokenizer.from_str(tokenizer.to_str())  # a private copy: settings stay untouched
    tok.no_padding()
    tok.enable_truncation(max_length=seq_len)
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets: faster
    rows = [e.ids for e in encode(texts)]
    return _pad_rows(rows, seq_len)


def _pad_rows(rows: list[list[int]], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad lists of at most ``seq_len`` ids into ``(ids, mask)`` int32 arrays."""
    import itertools

    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(
        itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum())
    )
    mask = (np.arange(seq_len) < lengths[:, None]).astype(np.int32)
    ids = np.full((len(rows), seq_len), PAD_ID, dtype=np.int32)
    ids[mask.astype(bool)] = flat
    return ids, mask


def _as_text_list(texts: Iterable[str]) -> list[str]:
    if isinstance(texts, str):
        raise TypeError("expected a list of texts, got a single string: wrap it in a list")
    out = list(texts)
    for i, text in enumerate(out):
        if not isinstance(text, str):
            raise TypeError(
                f"every text must be a str, but text {i} is a {type(text).__name__}: "
                f"{text!r:.60} (drop or fill missing reviews first)"
            )
    return out
