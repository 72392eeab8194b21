"""Unigram tokenizer of the course: train, save/load, and encode batches to ``(ids, mask)``.

The setup follows the tutorial: a Unigram model, a lowercase normalizer, a whitespace
pre-tokenizer (``\\w+|[^\\w\\s]+``), the special tokens ``[PAD] [CLS] [SEP] [MASK]`` (``[PAD]``
has id 0) and ``[UNK]`` for unknown characters. No post-processor: no ``[CLS]`` is added.

The translation task (practical 3) has its own, shared by English and Greek and reversible:
a Unigram model with an NFC normalizer (no lowercasing) and Metaspace pre-tokenizer and
decoder, so ``decode(encode(s)) == s`` (case, accents, final sigma and spacing kept), and the
special tokens ``[PAD] [BOS] [EOS] [UNK]``.
"""

from __future__ import annotations

import itertools
import json
import os
import unicodedata
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

from m2l_nlp.config import MIN_VOCAB_SIZE
from m2l_nlp.data.masks import padding_mask
from m2l_nlp.fileio import write_text_atomic

PAD_ID = 0
PAD_TOKEN = "[PAD]"
UNK_TOKEN = "[UNK]"
SPECIAL_TOKENS = ("[PAD]", "[CLS]", "[SEP]", "[MASK]", UNK_TOKEN)
# the special tokens and at least one of the text (a setting that config checks)
assert MIN_VOCAB_SIZE == len(SPECIAL_TOKENS) + 1
SCORE_DECIMALS = 6  # trained scores are rounded to this many decimals (reproducible ids)

TRANSLATION_SPECIALS = ("[PAD]", "[BOS]", "[EOS]", UNK_TOKEN)
BOS_ID, EOS_ID = 1, 2
# Characters every translation tokenizer knows, seen in training or not, so that held-out
# text round-trips instead of losing a rare character to [UNK] (Tatoeba's test side has a
# micro sign where a Greek mu belongs): printable ASCII, Latin-1 and Latin Extended-A,
# Greek and polytonic Greek, general punctuation and the euro sign; ~730 of the vocabulary.
_ALPHABET_RANGES = (
    (0x21, 0x7E),
    (0xA1, 0x17F),
    (0x370, 0x3FF),
    (0x1F00, 0x1FFF),
    (0x2010, 0x205E),
    (0x20AC, 0x20AC),
)
TRANSLATION_ALPHABET = tuple(
    char
    for lo, hi in _ALPHABET_RANGES
    for char in map(chr, range(lo, hi + 1))
    # no controls, unassigned or spaces; only what NFC leaves as it is (the normalizer's output)
    if unicodedata.category(char)[0] not in "CZ" and unicodedata.normalize("NFC", char) == char
)


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
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB_SIZE}, not {vocab_size}")
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
    return _train(tok, trainer, texts, SPECIAL_TOKENS)


def train_translation_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, *, show_progress: bool = False
) -> Tokenizer:
    """Train the translation tokenizer on ``texts`` (English and Greek, train side only).

    Ids: ``[PAD]`` 0, ``[BOS]`` 1, ``[EOS]`` 2, ``[UNK]`` 3; every character of
    :data:`TRANSLATION_ALPHABET` has a token, so ``vocab_size`` must leave room for them.
    """
    floor = len(TRANSLATION_SPECIALS) + len(TRANSLATION_ALPHABET) + 1
    if vocab_size < floor:
        raise ValueError(f"vocab_size must be at least {floor} (the alphabet), not {vocab_size}")
    texts = _as_text_list(texts)
    if not texts:
        raise ValueError("train_translation_tokenizer needs at least one text")
    tok = Tokenizer(models.Unigram())
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Metaspace()  # spaces become "▁", kept in the tokens
    tok.decoder = decoders.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=vocab_size,
        special_tokens=list(TRANSLATION_SPECIALS),
        unk_token=UNK_TOKEN,
        initial_alphabet=list(TRANSLATION_ALPHABET),
        show_progress=show_progress,
    )
    tok = _train(tok, trainer, texts, TRANSLATION_SPECIALS)
    assert (tok.token_to_id("[BOS]"), tok.token_to_id("[EOS]")) == (BOS_ID, EOS_ID)
    return tok


def encode_sentences(tokenizer: Tokenizer, texts: Sequence[str]) -> list[list[int]]:
    """The token ids of each text, without special tokens, padding or truncation."""
    tok = Tokenizer.from_str(tokenizer.to_str())  # a private copy: settings stay untouched
    tok.no_padding()
    tok.no_truncation()
    encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets: faster
    return [e.ids for e in encode(_as_text_list(texts), add_special_tokens=False)]


def _train(tok: Tokenizer, trainer, texts: list[str], specials: Sequence[str]) -> Tokenizer:
    tok.train_from_iterator(texts, trainer, length=len(texts))
    assert tok.token_to_id(PAD_TOKEN) == PAD_ID, "the trainer must give [PAD] the id 0"
    # Returned as it will read back from disk (the JSON reader rounds some scores by one
    # ulp), so a fresh and a saved-then-loaded tokenizer are the same.
    spec = _canonical(json.loads(tok.to_str()), specials)
    return Tokenizer.from_str(json.dumps(spec))


def _canonical(spec: dict, specials: Sequence[str]) -> dict:
    """The trained tokenizer's JSON with reproducible ids and scores.

    The trainer adds up its scores in an order that changes from one process to the next
    (with ``TOKENIZERS_PARALLELISM=false`` too; likely a hash table's per-process seed), so
    two trainings on the same texts give the same tokens with scores that differ in the
    14th digit, listed in a slightly different order: other ids, another model
    initialisation, another run with the same seed. Rounding the scores, giving the
    rarest characters their made-up scores in a fixed order (:func:`_rare_characters_in_order`)
    and ordering the tokens by score, then text (the special tokens keep their first places)
    makes the ids a function of the texts alone.
    """
    vocab = spec["model"]["vocab"]  # [[token, log-probability], ...], specials first
    n = len(specials)
    assert [t for t, _ in vocab[:n]] == list(specials), "specials must come first"
    rest = [[t, round(score, SCORE_DECIMALS)] for t, score in vocab[n:]]
    rest = _rare_characters_in_order(rest)
    spec["model"]["vocab"] = vocab[:n] + sorted(rest, key=lambda ts: (-ts[1], ts[0]))
    return spec


def _rare_characters_in_order(vocab: list[list]) -> list[list]:
    """``vocab`` with the scores of its rarest characters given out in the order of the
    characters.

    The Unigram trainer gives each character it must keep but did not make a piece of
    (the initial alphabet's, a rare one of the texts) a made-up score, a step of 1e-4
    apart, in the order of a hash table: another order in every training. Those scores
    lie below every longer piece's; handed out by text among the characters there, they
    (and the ids) are the same in every training. A character alone that is so rare has
    no other segmentation worth a longer piece's score, so no encoding changes."""
    longer = [score for token, score in vocab if len(token) > 1]
    floor = min(longer) if longer else float("inf")
    rare = [i for i, (token, score) in enumerate(vocab) if len(token) == 1 and score < floor]
    scores = sorted((vocab[i][1] for i in rare), reverse=True)
    chars = sorted(vocab[i][0] for i in rare)
    fixed = dict(zip(chars, scores, strict=True))
    return [[token, fixed.get(token, score)] for token, score in vocab]


def save_tokenizer(tokenizer: Tokenizer, path: str | os.PathLike) -> Path:
    """Write ``tokenizer`` as JSON to ``path`` (a temporary file renamed at the end)."""
    return write_text_atomic(path, tokenizer.to_str())


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

    With the course's setup, ASCII texts take a fast path that gives the same ids: each
    distinct word is encoded once by the tokenizer and the rows are assembled with NumPy
    (the Unigram model encodes every pre-tokenized word on its own). Other texts and other
    tokenizer setups go through ``encode_batch``.
    """
    if seq_len < 1:
        raise ValueError(f"seq_len must be a positive number of tokens, not {seq_len}")
    texts = _as_text_list(texts)
    tok = Tokenizer.from_str(tokenizer.to_str())  # a private copy: settings stay untouched
    tok.no_padding()
    tok.no_truncation()
    ids = np.full((len(texts), seq_len), PAD_ID, dtype=np.int32)
    lengths = np.zeros(len(texts), dtype=np.int64)
    fast = _WordEncoder.for_tokenizer(tok)
    if fast is not None:
        chosen = [i for i, text in enumerate(texts) if fast.accepts(text)]
        for lo in range(0, len(chosen), _CHUNK):
            rows = np.asarray(chosen[lo : lo + _CHUNK], dtype=np.int64)
            ids[rows], lengths[rows] = fast.encode([texts[i] for i in rows.tolist()], seq_len)
        rest = sorted(set(range(len(texts))) - set(chosen))
    else:
        rest = list(range(len(texts)))
    if rest:
        tok.enable_truncation(max_length=seq_len)
        encode = getattr(tok, "encode_batch_fast", tok.encode_batch)  # no offsets: faster
        for lo in range(0, len(rest), _CHUNK):
            part = rest[lo : lo + _CHUNK]
            rows = [e.ids for e in encode([texts[i] for i in part])]
            ids[part], part_mask = _pad_rows(rows, seq_len)
            lengths[part] = part_mask.sum(axis=1)
    mask = padding_mask(lengths, seq_len)
    return ids, mask


_CHUNK = 2000  # texts per call: bounds the memory of the temporary arrays
_ASCII = frozenset(map(chr, range(128)))


class _WordEncoder:
    """Encode texts word by word, each distinct word once, for the course's setup.

    Lowercase + ``Whitespace`` pre-tokenizer + Unigram means a text's ids are the
    concatenation of the ids of its pre-tokens (maximal runs of word characters or of
    other non-space characters), each encoded on its own. Python lowercases the texts and
    NumPy finds the words; every character's class and lowercase are asked of the
    tokenizer itself (once per character), and texts with a character where Python and
    the tokenizer could disagree are left to ``encode_batch``.
    """

    def __init__(self, tok: Tokenizer) -> None:
        self.tok = tok
        self.lower_class: dict[str, int] = {}  # lowercase char -> 0 space, 1 word, 2 other
        self.safe: dict[str, bool] = {}  # char -> Python and the tokenizer agree on it
        self.classes = np.zeros(128, dtype=np.uint8)
        for code in range(128):
            if not self._check(chr(code)):
                raise ValueError(f"unexpected pre-tokenization of {chr(code)!r}")
            self.classes[code] = self.lower_class[chr(code).lower()]
        self.specials = [t.content for t in tok.get_added_tokens_decoder().values()]
        self.slots: dict[bytes, int] = {}  # word -> index into the tables below
        self.word_start = np.zeros(0, dtype=np.int64)
        self.word_len = np.zeros(0, dtype=np.int64)
        self.pieces = np.zeros(0, dtype=np.int32)

    @classmethod
    def for_tokenizer(cls, tok: Tokenizer) -> _WordEncoder | None:
        import json

        config = json.loads(tok.to_str())
        setup = (
            config.get("normalizer"),
            config.get("pre_tokenizer"),
            config.get("post_processor"),
            config["model"]["type"],
        )
        if setup != ({"type": "Lowercase"}, {"type": "Whitespace"}, None, "Unigram"):
            return None
        return cls(tok)

    def _check(self, char: str) -> bool:
        """Whether Python lowercases and classifies ``char`` as the tokenizer does."""
        ok = self.safe.get(char)
        if ok is None:
            lower = char.lower()
            ok = len(lower) == 1 and char != "\u03a3"  # Python lowercases a final sigma apart
            ok = ok and self.tok.normalizer.normalize_str(char) == lower
            if ok:
                pieces = [p for p, _ in self.tok.pre_tokenizer.pre_tokenize_str(f"a{lower}a")]
                shapes = {1: [f"a{lower}a"], 2: ["a", "a"], 3: ["a", lower, "a"]}
                ok = pieces == shapes.get(len(pieces))
                if ok:
                    self.lower_class[lower] = {1: 1, 2: 0, 3: 2}[len(pieces)]
            self.safe[char] = ok
        return ok

    def accepts(self, text: str) -> bool:
        """No NUL, no special token written in the text, and only checked characters."""
        if "\0" in text:
            return False
        if not text.isascii() and not all(map(self._check, set(text) - _ASCII)):
            return False
        lowered = text.lower()
        return not any(special in text or special in lowered for special in self.specials)

    def _add_words(self, words: list[bytes]) -> None:
        # a word is one pre-token, already lowercase: the model alone gives its ids
        tokenize = self.tok.model.tokenize
        encoded = [[t.id for t in tokenize(w.decode("utf-8"))] for w in words]
        lens = np.fromiter(map(len, encoded), dtype=np.int64, count=len(words))
        flat = np.fromiter(
            itertools.chain.from_iterable(encoded), dtype=np.int32, count=int(lens.sum())
        )
        base = len(self.word_len)
        for k, w in enumerate(words):
            self.slots[w] = base + k
        self.word_start = np.concatenate(
            [self.word_start, len(self.pieces) + np.cumsum(lens) - lens]
        )
        self.word_len = np.concatenate([self.word_len, lens])
        self.pieces = np.concatenate([self.pieces, flat])

    def encode(self, texts: list[str], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
        """``(ids (N, seq_len), lengths (N,))`` for texts accepted by :meth:`accepts`."""
        lowered = "\n".join(texts).lower()  # same length: accepts() checked every char
        joined = lowered.encode("utf-8")
        buf = np.frombuffer(joined, dtype=np.uint8)
        ids = np.full((len(texts), seq_len), PAD_ID, dtype=np.int32)
        lengths = np.zeros(len(texts), dtype=np.int64)
        if len(buf) == 0:
            return ids, lengths
        text_starts = np.cumsum([0] + [len(t) + 1 for t in texts[:-1]])  # in characters
        if lowered.isascii():
            cls = self.classes[buf]
        else:  # classes per character, repeated over its UTF-8 bytes
            chars = np.frombuffer(lowered.encode("utf-32-le"), dtype=np.uint32)
            char_cls = np.zeros(len(chars), dtype=np.uint8)
            ascii_ = chars < 128
            char_cls[ascii_] = self.classes[chars[ascii_]]
            uniq, inverse = np.unique(chars[~ascii_], return_inverse=True)
            table = np.array([self.lower_class[chr(c)] for c in uniq.tolist()], dtype=np.uint8)
            char_cls[~ascii_] = table[inverse]
            nbytes = 1 + (chars >= 0x80) + (chars >= 0x800) + (chars >= 0x10000)
            cls = np.repeat(char_cls, nbytes)
            text_starts = np.concatenate([[0], np.cumsum(nbytes)])[text_starts]
        change = np.ones(len(buf), dtype=bool)
        change[1:] = cls[1:] != cls[:-1]
        bounds = np.append(np.flatnonzero(change), len(buf))
        is_word = cls[bounds[:-1]] != 0
        starts, ends = bounds[:-1][is_word], bounds[1:][is_word]
        text_of = np.searchsorted(text_starts, starts, side="right") - 1
        slot = self._slots(joined, buf, starts, ends)

        n_tok = self.word_len[slot]
        per_text = np.bincount(text_of, weights=n_tok, minlength=len(texts)).astype(np.int64)
        word_pos = np.cumsum(n_tok) - n_tok  # first token of each word, counted in the chunk
        text_base = np.cumsum(per_text) - per_text
        word_pos -= text_base[text_of]  # ... counted in its own text
        keep = word_pos < seq_len
        slot, n_tok, word_pos, text_of = slot[keep], n_tok[keep], word_pos[keep], text_of[keep]
        total = int(n_tok.sum())
        within = np.arange(total) - np.repeat(np.cumsum(n_tok) - n_tok, n_tok)
        pos = np.repeat(word_pos, n_tok) + within
        vals = self.pieces[np.repeat(self.word_start[slot], n_tok) + within]
        ok = pos < seq_len
        ids[np.repeat(text_of, n_tok)[ok], pos[ok]] = vals[ok]
        return ids, np.minimum(per_text, seq_len)

    def _slots(self, joined: bytes, buf: np.ndarray, starts: np.ndarray, ends: np.ndarray):
        """The table index of every word ``joined[starts[k]:ends[k]]``."""
        lens = ends - starts
        short = lens <= 16
        # exact 16-byte keys for short words (no NUL in the text, so zero padding is safe)
        padded = np.concatenate([buf, np.zeros(16, dtype=np.uint8)])
        grams = np.lib.stride_tricks.sliding_window_view(padded, 16)[starts]  # (n, 16) copy
        grams[np.arange(16) >= lens[:, None]] = 0
        halves = grams.view(">u8").astype(np.uint64)  # (n, 2) big-endian: exact
        hi, lo = halves[:, 0], halves[:, 1]
        key = hi * np.uint64(0x9E3779B97F4A7C15) ^ lo
        idx = np.flatnonzero(short)
        _, first, inverse = np.unique(key[idx], return_index=True, return_inverse=True)
        same = np.array_equal(hi[idx][first][inverse], hi[idx]) and np.array_equal(
            lo[idx][first][inverse], lo[idx]
        )
        if not same:  # a hash collision in this chunk: look every word up exactly
            idx, first, inverse = idx[:0], first[:0], inverse[:0]
            short[:] = False
        # one exact lookup per distinct short word, one per occurrence of a long word
        reps = idx[first].tolist()
        longs = np.flatnonzero(~short).tolist()
        starts_l, ends_l = starts.tolist(), ends.tolist()
        words = [joined[starts_l[k] : ends_l[k]] for k in reps + longs]
        new = list(dict.fromkeys(w for w in words if w not in self.slots))
        if new:
            self._add_words(new)
        found = np.fromiter((self.slots[w] for w in words), dtype=np.int64, count=len(words))
        slot = np.empty(len(starts), dtype=np.int64)
        slot[idx] = found[: len(reps)][inverse]
        slot[longs] = found[len(reps) :]
        return slot


def _pad_rows(rows: list[list[int]], seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """Right-pad lists of at most ``seq_len`` ids into ``(ids, mask)`` int32 arrays."""
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter(
        itertools.chain.from_iterable(rows), dtype=np.int32, count=int(lengths.sum())
    )
    mask = padding_mask(lengths, seq_len)
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
