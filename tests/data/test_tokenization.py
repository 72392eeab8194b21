"""Tests of m2l_nlp.data.tokenization: the tutorial's Unigram setup, save/load, batch_encode."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from m2l_nlp.data import pipeline as data
from m2l_nlp.data import tokenization
from m2l_nlp.data.tokenization import PAD_ID, batch_encode, load_tokenizer, save_tokenizer


@pytest.fixture(scope="module")
def texts() -> list[str]:
    train, _ = data.load_imdb(data.SMALL_DATA, use_cache=False)
    return list(train["text"])


@pytest.fixture(scope="module")
def tok(texts):
    return tokenization.train_tokenizer(texts, vocab_size=500)


def test_tutorial_setup(tok):
    assert [tok.id_to_token(i) for i in range(5)] == ["[PAD]", "[CLS]", "[SEP]", "[MASK]", "[UNK]"]
    assert tok.token_to_id("[PAD]") == PAD_ID == 0
    assert 5 < tok.get_vocab_size() <= 500
    # lowercase normalizer, whitespace pre-tokenizer (words and punctuation runs apart)
    assert tok.encode("A GREAT Film!").ids == tok.encode("a great film!").ids
    assert tok.encode("film!!").tokens[-1] == "!!" or "!" in tok.encode("film!!").tokens
    assert tok.encode("film  great").ids == tok.encode("film great").ids
    # a character never seen in training is [UNK], not an error
    assert tok.token_to_id("[UNK]") in tok.encode("\u263a").ids
    assert tok.post_processor is None  # no [CLS] added


def test_vocab_size_is_an_upper_bound(texts):
    small = tokenization.train_tokenizer(texts, vocab_size=60)
    assert small.get_vocab_size() <= 60


def test_save_load_round_trip(tok, texts, tmp_path):
    path = save_tokenizer(tok, tmp_path / "sub" / "tokenizer.json")
    assert path.is_file() and [p.name for p in path.parent.iterdir()] == ["tokenizer.json"]
    loaded = load_tokenizer(path)
    assert loaded.to_str() == tok.to_str()
    sample = texts[:50] + ["", "Unseen wordz \u263a", "[PAD] [CLS] literal specials"]
    assert [e.ids for e in loaded.encode_batch(sample)] == [e.ids for e in tok.encode_batch(sample)]
    a, b = batch_encode(tok, sample, 40), batch_encode(loaded, sample, 40)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_array_equal(a[1], b[1])
    save_tokenizer(tok, path)  # overwriting works and leaves no temporary file
    assert [p.name for p in path.parent.iterdir()] == ["tokenizer.json"]


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="train_tokenizer"):
        load_tokenizer(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="not a valid tokenizer"):
        load_tokenizer(bad)


def test_batch_encode_pads_and_truncates(tok, texts):
    sample = [texts[0], "", "film", " ".join(texts[:5])]
    ids, mask = batch_encode(tok, sample, seq_len=30)
    assert ids.shape == mask.shape == (4, 30)
    assert ids.dtype == mask.dtype == np.int32
    for row, text in enumerate(sample):
        full = tok.encode(text).ids
        n = min(len(full), 30)
        assert list(ids[row, :n]) == full[:n]  # first tokens kept, right-truncated
        assert list(mask[row]) == [1] * n + [0] * (30 - n)  # 1 on tokens, 0 on padding
        assert (ids[row, n:] == PAD_ID).all()
    assert mask[1].sum() == 0 and mask[3].sum() == 30  # empty text; truncated text
    # a Series or any sequence works; a sequence longer than every text is all padding at the end
    ids2, _ = batch_encode(tok, np.array(sample, dtype=object), seq_len=30)
    np.testing.assert_array_equal(ids, ids2)


def test_batch_encode_leaves_the_tokenizer_settings_alone(tok, texts):
    tok.enable_truncation(max_length=5)
    try:
        before = tok.to_str()
        ids, mask = batch_encode(tok, texts[:3], seq_len=12)
        assert mask.sum(axis=1).max() > 5  # the tokenizer's own truncation is ignored
        assert tok.to_str() == before
    finally:
        tok.no_truncation()


def test_bad_input(tok):
    with pytest.raises(TypeError, match="single string"):
        batch_encode(tok, "a review", 10)
    with pytest.raises(TypeError, match="must be a str"):
        batch_encode(tok, ["fine", None], 10)
    with pytest.raises(ValueError, match="seq_len"):
        batch_encode(tok, ["fine"], 0)
    with pytest.raises(ValueError, match="vocab_size"):
        tokenization.train_tokenizer(["a b c"], vocab_size=3)
    with pytest.raises(ValueError, match="at least one text"):
        tokenization.train_tokenizer([])


def _reference(tok, texts, seq_len):
    """The plain tokenizer pipeline: encode_batch with truncation, padded by hand."""
    copy = tokenization.Tokenizer.from_str(tok.to_str())
    copy.enable_truncation(max_length=seq_len)
    rows = [e.ids for e in copy.encode_batch(texts)]
    ids = np.full((len(texts), seq_len), PAD_ID, dtype=np.int32)
    mask = np.zeros((len(texts), seq_len), dtype=np.int32)
    for r, row in enumerate(rows):
        ids[r, : len(row)] = row
        mask[r, : len(row)] = 1
    return ids, mask


TRICKY = [
    "",
    "   \n\n  ",
    "Hello, World!!! ...and_then 3.14 ok?! (really) <br> 'quoted' \"double\"",
    "x" * 40 + " " + "y" * 16 + " " + "z" * 17 + " " + "w" * 15,  # around the 16-byte keys
    "tab\tsep\r\nline\x0bvt\x0cff \x1cfs\x1fus\x7fdel end",  # ASCII controls
    "[PAD] literal [CLS], lower [pad] and [MASK]ed",  # special tokens written in a text
    "Caf\u00e9 NA\u00cfVE \u263a \u00bd \u00b2 \u2014 dash \u00a0nbsp \u200bzwsp",  # non-ASCII
    "\u0130stanbul",  # lowercases to two characters
    "\u03a3\u039f\u03a6\u039f\u03a3 \u1e9e STRASSE",  # final sigma: Python and Rust differ
    "e\u0301t\u00e9 combining \ufb01 ligature \U0001f600 emoji",
    "\x00 a NUL",
    "\x00 \x00\x00 x\x00\x00\x00 end",  # NUL runs of different lengths
    "!!!!????....,,,,",
    "word " * 400,  # longer than seq_len
    "__init__ x_y 1_000 a1b2",
]


@pytest.fixture(scope="module")
def rich_tok(texts):
    """A tokenizer that also knows the tricky texts' characters (so they are not all [UNK])."""
    greek = ["\u03c3\u03bf\u03c6\u03bf\u03c2 \u03c3\u03bf\u03c6\u03bf\u03c3 \u03c3"] * 20
    return tokenization.train_tokenizer(texts + TRICKY * 20 + greek, vocab_size=700)


@pytest.mark.parametrize("seq_len", [1, 7, 64, 700])
def test_fast_path_equals_the_tokenizer_pipeline(rich_tok, texts, seq_len):
    tok = rich_tok
    rng = np.random.default_rng(0)
    alphabet = list("abcXYZ !?.,'-_019\t\n<>/()\u00e9\u00c9\u2014\u263a")
    noise = ["".join(rng.choice(alphabet, size=rng.integers(0, 200))) for _ in range(200)]
    sample = TRICKY + noise + texts[:100]
    ids, mask = batch_encode(tok, sample, seq_len)
    ref_ids, ref_mask = _reference(tok, sample, seq_len)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(mask, ref_mask)


def test_other_setups_use_the_plain_pipeline(tok, texts):
    from tokenizers import normalizers

    other = tokenization.Tokenizer.from_str(tok.to_str())
    other.normalizer = normalizers.Sequence([normalizers.NFD(), normalizers.StripAccents()])
    sample = TRICKY + texts[:20]
    ids, mask = batch_encode(other, sample, 50)
    ref_ids, ref_mask = _reference(other, sample, 50)
    np.testing.assert_array_equal(ids, ref_ids)
    np.testing.assert_array_equal(mask, ref_mask)


TRAIN_IN_A_FRESH_PROCESS = """
import hashlib
from m2l_nlp.data import pipeline as data
from m2l_nlp.data import tokenization
train, _ = data.load_imdb(data.SMALL_DATA, use_cache=False)
tok = tokenization.train_tokenizer(list(train["text"]), 2000)
print(hashlib.sha256(tok.to_str().encode()).hexdigest())
"""


def test_training_gives_the_same_tokenizer_in_every_process():
    """The trainer's scores depend on a per-process hash seed in their last digits; the
    tokenizer it returns must not (same texts: same ids, so the same run for a seed)."""
    digests = {
        subprocess.run(
            [sys.executable, "-c", TRAIN_IN_A_FRESH_PROCESS],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for _ in range(3)
    }
    assert len(digests) == 1


# --------------------------------------------------------------------------- translation


@pytest.fixture(scope="module")
def translation_tok():
    from m2l_nlp.data import tatoeba

    pairs = tatoeba.read_pairs(tatoeba.resolve_pairs("small"))
    return tokenization.train_translation_tokenizer(
        [p.en for p in pairs] + [p.el for p in pairs], vocab_size=1500
    )


def test_translation_tokenizer_specials(translation_tok):
    specials = [translation_tok.id_to_token(i) for i in range(4)]
    assert (
        specials == list(tokenization.TRANSLATION_SPECIALS) == ["[PAD]", "[BOS]", "[EOS]", "[UNK]"]
    )
    assert (tokenization.BOS_ID, tokenization.EOS_ID) == (1, 2)
    assert 4 + len(tokenization.TRANSLATION_ALPHABET) < translation_tok.get_vocab_size() <= 1500


@pytest.mark.parametrize(
    "text",
    [
        "Σ' αγαπώ.",
        "Πώς είσαι;",
        "Ο Τομ είναι εδώ, ΌΧΙ ΕΚΕΊ.",  # case and accents on capitals
        "Τι κάνεις σήμερα; Καλώς ήρθες!",  # final sigma
        "Ἀθῆναι, 5€ «ναι» — µ ß ő",  # polytonic, symbols, characters the excerpt lacks
        'Two  spaces and I\'m "quoted".',
    ],
)
def test_translation_tokenizer_round_trips(translation_tok, text):
    ids = tokenization.encode_sentences(translation_tok, [text])[0]
    assert tokenization.UNK_TOKEN not in [translation_tok.id_to_token(i) for i in ids]
    assert translation_tok.decode(ids) == text


def test_encode_sentences_adds_nothing(translation_tok):
    texts = ["Καλημέρα.", "Good morning."]
    got = tokenization.encode_sentences(translation_tok, texts)
    assert got == [translation_tok.encode(t, add_special_tokens=False).ids for t in texts]
    assert all(i > 3 for row in got for i in row)


def test_translation_vocab_leaves_room_for_the_alphabet():
    with pytest.raises(ValueError, match="at least"):
        tokenization.train_translation_tokenizer(["a b"], vocab_size=100)


def test_the_test_side_round_trips_through_a_tokenizer_of_the_training_side():
    """Trained on the training pairs alone, the tokenizer gives back every English and Greek
    sentence of the test side exactly (accents, final sigma, spacing), with no [UNK]."""
    from m2l_nlp.data import tatoeba

    split = tatoeba.split_pairs(tatoeba.read_pairs(tatoeba.resolve_pairs("small")))
    tok = tokenization.train_translation_tokenizer([t for p in split.train for t in p], 1500)
    texts = [t for p in split.test for t in p]
    unknown = tok.token_to_id(tokenization.UNK_TOKEN)
    for text, ids in zip(texts, tokenization.encode_sentences(tok, texts), strict=True):
        assert unknown not in ids and tok.decode(ids) == text


def test_the_translation_tokenizer_is_the_same_every_time_it_is_trained(translation_tok):
    """The trainer lists its rarest characters in the order of a hash table; the tokenizer
    gives them a fixed order, so a run started again (--resume) reads the same ids."""
    from m2l_nlp.data import tatoeba

    pairs = tatoeba.read_pairs(tatoeba.resolve_pairs("small"))
    texts = [p.en for p in pairs] + [p.el for p in pairs]
    again = [tokenization.train_translation_tokenizer(texts, vocab_size=1500) for _ in range(3)]
    assert {tok.to_str() for tok in again} == {translation_tok.to_str()}
