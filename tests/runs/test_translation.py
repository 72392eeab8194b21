"""Tests of practical 3's translator outside the graded checks: packing, decoding (cache,
recomputation, beam search), the run and `m2l-nlp translate`."""

from __future__ import annotations

import json
import types

import jax
import numpy as np
import pytest

from m2l_nlp import cli
from m2l_nlp.config import TransformerConfig
from m2l_nlp.data import tatoeba
from m2l_nlp.data.tokenization import BOS_ID, EOS_ID, train_translation_tokenizer
from m2l_nlp.data.translation import encode_pairs, prepare_translation
from m2l_nlp.model import generation, translators
from m2l_nlp.runs.translation import Translator

CONFIG = TransformerConfig(
    vocab_size=1000, num_layers=1, num_heads=2, d_model=16, d_ff=32, p_dropout=0.0, max_len=12
)


@pytest.fixture(scope="module")
def small():
    """The bundled pairs, split, and a tokenizer trained on their training side."""
    split = tatoeba.split_pairs(tatoeba.read_pairs(tatoeba.SMALL_PAIRS))
    tokenizer = train_translation_tokenizer([t for p in split.train for t in p], CONFIG.vocab_size)
    return split, tokenizer


@pytest.fixture(scope="module")
def model(small):
    funcs, practical = translators.translator(CONFIG, "solutions", start_id=BOS_ID)
    params = translators.init_params(funcs, 0, CONFIG.max_len)
    # numbers of a model that is not at its initialisation: layer norms and biases count
    rng = np.random.default_rng(0)
    params = jax.tree_util.tree_map(
        lambda p: p + 0.2 * rng.standard_normal(p.shape).astype(p.dtype), params
    )
    return funcs, practical, params


def test_a_pair_is_a_source_and_a_target_with_its_end_token(small):
    split, tokenizer = small
    ((source_ids, target_ids), mask, labels, weights), dropped = encode_pairs(
        tokenizer, split.train[:50], CONFIG.max_len
    )
    shape = (50 - dropped, CONFIG.max_len)
    assert source_ids.shape == target_ids.shape == mask.shape == labels.shape == shape
    pair = split.train[0]
    source = tokenizer.encode(pair.en, add_special_tokens=False).ids
    target = tokenizer.encode(pair.el, add_special_tokens=False).ids
    assert source_ids[0, : len(source) + 1].tolist() == [*source, 0]
    assert target_ids[0, : len(target) + 2].tolist() == [*target, EOS_ID, 0]
    assert (labels == target_ids).all()  # the target is scored, where it has tokens
    assert weights[0].tolist() == [1] * (len(target) + 1) + [0] * (CONFIG.max_len - len(target) - 1)
    assert mask[0].sum() == max(len(source), len(target) + 1)  # the longer side: its bucket
    assert tokenizer.decode(target_ids[0, : len(target)].tolist()) == pair.el


def test_the_prepared_pairs_are_the_split_encoded_by_its_training_sides_tokenizer(small):
    split, tokenizer = small
    data = prepare_translation("small", vocab_size=CONFIG.vocab_size, max_len=CONFIG.max_len)
    assert data.pairs == split and data.max_len == CONFIG.max_len
    assert data.tokenizer.get_vocab() == tokenizer.get_vocab()
    kept = len(data.train[2])
    assert kept + data.dropped == len(split.train) and kept > 0  # 12 tokens: the short ones
    assert data.val is not None and len(data.val[2]) <= len(split.val)


def test_a_pair_longer_than_the_window_is_left_out_and_counted(small):
    split, tokenizer = small
    long = tatoeba.Pair(en=" ".join(["word"] * 40), el="λέξη")
    (_, _, labels, _), dropped = encode_pairs(tokenizer, [split.train[0], long], CONFIG.max_len)
    assert (len(labels), dropped) == (1, 1)


def test_the_cached_decoder_and_recomputing_give_the_forwards_logits(small, model):
    funcs, practical, params = model
    split, tokenizer = small
    (source, target), _, _, target_mask = encode_pairs(tokenizer, split.val[:4], CONFIG.max_len)[0]
    source_mask = (source != 0).astype(np.int32)
    want = np.asarray(funcs.predict_fw(params, source, source_mask, target, target_mask))
    rows = source
    inputs = np.concatenate([np.full((len(rows), 1), BOS_ID), target[:, :-1]], axis=1)
    real = np.concatenate([np.ones((len(rows), 1), bool), target[:, :-1] != 0], axis=1)
    memory = translators.encoder(CONFIG, practical)(params, source, (source != 0).astype(np.int32))
    context = (memory, (source != 0).astype(np.int32))
    decode = translators.decoder(CONFIG, practical)
    for step, layer_cache in (
        (generation.cached(decode), practical.LayerCache),
        (generation.recomputing(decode), None),
    ):
        state = generation.start(CONFIG, len(rows), context, layer_cache)
        generation.check_cache(params, step, state, inputs.astype(np.int32), want, real)


def test_a_translator_without_a_working_cache_says_so_and_translates_the_same(small, model, capsys):
    funcs, practical, params = model
    _, tokenizer = small
    sentences = ["I love you.", "Where is the station?", "Tom is here."]
    right = Translator(funcs, practical, CONFIG, tokenizer).translate(params, sentences)

    class Unfinished(practical.Transformer):  # the cache's branch not written yet
        def decode(self, *args, caches=None, at=0):
            if caches is not None:
                raise NotImplementedError("attend_with_cache: not started")
            return super().decode(*args)

    broken = types.SimpleNamespace(**{**vars(practical), "Transformer": Unfinished})
    slower = Translator(funcs, broken, CONFIG, tokenizer)
    assert slower.translate(params, sentences) == right
    assert slower.cached is False
    assert "translating without it" in capsys.readouterr().err


def test_translate_refuses_what_is_not_a_translator_in_one_line(tmp_path, capsys):
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "none"), "Hello."]) == 2
    assert "there is no checkpoint at" in capsys.readouterr().err
    (tmp_path / "old").mkdir()  # a checkpoint of before the manifest (test_checkpoint.py)
    (tmp_path / "old" / "characters.json").write_text("{}")
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "old"), "Hello."]) == 2
    assert "has no manifest.json" in capsys.readouterr().err
    assert cli.main(["translate", "--checkpoint", str(tmp_path / "none"), " "]) == 2
    assert "sentence 1 is empty" in capsys.readouterr().err


TINY = [
    "--set",
    "seq_len=12",
    "--set",
    "vocab_size=1000",
    "--set",
    "model.num_layers=1",
    "--set",
    "model.d_model=16",
    "--set",
    "model.d_ff=32",
    "--set",
    "model.num_heads=2",
    "--set",
    "train.widths=[4, 8]",
]


@pytest.mark.slow
def test_train_then_translate_and_resume(tmp_path, capsys, stopped_after_epoch_1, same_parameters):
    """A tiny translator on the bundled pairs: validation chrF each epoch, test BLEU and
    chrF with both baselines and sacreBLEU's signatures, a checkpoint `translate` reads; a
    run stopped after epoch 1 resumes to the same numbers and parameters."""

    out = tmp_path / "tr"
    args = ["train", "--preset", "translate", "--data", "small", "--epochs", "2"]
    args += [*TINY, "--no-progress"]
    assert cli.main([*args, "--out", str(out)]) == 0
    said = capsys.readouterr().out
    for words in (
        "validation chrF",
        "val_bits/token",
        "beam 4",
        "retrieval, random pair split",
        "tok:13a",
    ):
        assert words in said
    metrics = json.loads((out / "metrics.json").read_text())
    assert set(metrics["test_scores"]) == {
        "greedy",
        "beam 4",
        "retrieval",
        "retrieval, random pair split",
    }
    assert metrics["split"]["pairs"]["test"] > 0 and metrics["cached_decoding"]
    checkpoint = str(out / "checkpoint")
    assert cli.main(["translate", "--checkpoint", checkpoint, "I love you.", "--beam", "2"]) == 0
    assert capsys.readouterr().out.strip()
    assert cli.main(["translate", "--checkpoint", checkpoint, "--impl", "exercises", "Hi."]) in (
        0,
        2,
    )

    stopped = [*args, "--out", str(tmp_path / "stopped")]
    assert stopped_after_epoch_1(stopped) == 130
    assert cli.main([*stopped, "--resume"]) == 0
    again = json.loads((tmp_path / "stopped" / "metrics.json").read_text())
    assert again["history"] == metrics["history"] and len(again["history"]["val_chrf"]) == 2
    assert again["test_scores"] == metrics["test_scores"]
    same_parameters(out / "checkpoint", tmp_path / "stopped" / "checkpoint")


def test_training_the_stubs_is_refused_in_one_line_before_a_folder_is_made(tmp_path, capsys):
    out = tmp_path / "mine"
    args = ["train", "--preset", "translate", "--data", "small", "--impl", "exercises"]
    assert cli.main([*args, "--out", str(out)]) == 2
    said = capsys.readouterr().err
    assert "finish the exercises first" in said and "Traceback" not in said
    assert not out.exists()


def test_bucket_widths_are_whole_numbers():
    from m2l_nlp.config import TrainSettings

    assert TrainSettings(widths=[16, 32]).widths == (16, 32)
    with pytest.raises(ValueError, match="widths must be whole numbers"):
        TrainSettings(widths=(16, 0))


# --- `m2l-nlp translate`: its inputs, its notes and its bound on beams ----------------------


@pytest.fixture(scope="module")
def checkpoint(small, model, tmp_path_factory):
    """A translator's checkpoint folder (the tiny model above), as a run writes it."""
    from m2l_nlp.runs.checkpoint import TRANSLATOR, save_checkpoint

    folder = tmp_path_factory.mktemp("translator") / "checkpoint"
    return str(save_checkpoint(folder, TRANSLATOR, model[2], CONFIG, small[1]))


def _translate(capsys, *args: str) -> tuple[int, list[str], str]:
    code = cli.main(["translate", *args])
    said = capsys.readouterr()
    return code, said.out.splitlines(), said.err


@pytest.mark.slow
def test_translate_reads_a_file_alone_and_beside_sentences_and_notes_what_it_cuts(
    checkpoint, tmp_path, capsys
):
    lines = tmp_path / "sentences.txt"
    lines.write_text("I love you.\n\nWhere is the station?\n", encoding="utf-8")
    code, alone, err = _translate(capsys, "--checkpoint", checkpoint, "--file", str(lines))
    assert code == 0 and len(alone) == 2, err  # the blank line is skipped
    assert "note:" not in err
    code, given, _ = _translate(
        capsys, "--checkpoint", checkpoint, "I love you.", "Where is the station?"
    )
    assert alone == given
    long = tmp_path / "long.txt"
    long.write_text(" ".join(["word"] * 5000), encoding="utf-8")
    args = ["--checkpoint", checkpoint, "Hi.", "--file", str(lines), "--file", str(long)]
    code, both, err = _translate(capsys, *args)
    assert code == 0 and both[1:3] == alone and len(both) == 4
    (note,) = [line for line in err.splitlines() if line.startswith("note:")]
    assert note.startswith(f"note: {long}, line 1 ('word word") and "of its 5000 words" in note


@pytest.mark.parametrize("with_sentence", [False, True])
@pytest.mark.parametrize(
    ("content", "said"),
    [
        (None, "cannot read {file} (No such file or directory): check the path"),
        (b"", "{file} is empty: there is nothing to read"),
        (b"\n \n", "{file} is empty"),
        ("café".encode("latin-1"), "{file} is not UTF-8 text"),
    ],
)
def test_a_file_that_cannot_be_read_is_named_in_one_line(
    tmp_path, capsys, content, said, with_sentence
):
    """Before any checkpoint is read (there is none here)."""
    checkpoint = str(tmp_path / "no-checkpoint")
    file = tmp_path / "sentences.txt"
    if content is not None:
        file.write_bytes(content)
    sentence = ["Hi."] if with_sentence else []
    code, out, err = _translate(capsys, "--checkpoint", checkpoint, *sentence, "--file", str(file))
    assert code == 2 and out == [] and len(err.splitlines()) == 1
    assert err.startswith(f"error: {said.format(file=file)}")


def test_what_the_model_does_not_read_as_given_is_noted(small):
    from m2l_nlp.runs.translation import reading_notes

    tokenizer = small[1]
    sentences = ["I love you.", "Σ' αγαπώ.", "Привет!", " ".join(["word"] * 5000)]
    notes = reading_notes(tokenizer, sentences, CONFIG.max_len)
    assert len(notes) == 3, notes  # one line each, none for the English sentence
    assert notes[0].startswith('sentence 2 ("Σ\' αγαπώ.") looks Greek, but this model')
    assert notes[1].startswith("sentence 3 ('Привет!') has characters the model never saw")
    assert "('П', 'р', 'и', 'в', 'е' and 1 more)" in notes[1]
    read = tokenizer.encode(" ".join(["word"] * 20), add_special_tokens=False).offsets
    words = len(" ".join(["word"] * 20)[: read[CONFIG.max_len - 1][1]].split())
    assert f"only its first {CONFIG.max_len} tokens, {words} of its 5000 words" in notes[2]
    named = reading_notes(tokenizer, ["Καλημέρα."], CONFIG.max_len, ["a.txt, line 3"])
    assert named[0].startswith("a.txt, line 3 ('Καλημέρα.') looks Greek")


@pytest.mark.slow
def test_the_beams_are_bounded_by_memory(checkpoint, capsys, monkeypatch):
    """Beam search plans its memory before it runs: more beams than fit are refused in one
    line that gives the most that do, and a batch that does not fit is split."""
    sentences = ["I love you.", "Where is the station?", "Tom is here.", "Hi."]
    code, wide, _ = _translate(capsys, "--checkpoint", checkpoint, "--beam", "64", *sentences)
    assert code == 0
    monkeypatch.setattr(translators, "free_memory", lambda: 5 * 10**6)
    code, out, err = _translate(capsys, "--checkpoint", checkpoint, "--beam", "100000", "Hi.")
    assert code == 2 and out == []
    (line,) = err.splitlines()
    assert line.startswith("error: --beam 100000 needs about ") and "has 5 MB free" in line
    most = int(line.split("use --beam ")[1].split()[0])
    assert 64 < most < 100000
    # 64 beams fit for one sentence, not for four at once: the same text, in smaller batches
    code, narrow, _ = _translate(capsys, "--checkpoint", checkpoint, "--beam", "64", *sentences)
    assert code == 0 and narrow == wide
