"""Practical 3's translator as a run: train, score honestly, save, and translate.

:func:`train_translation` is the ``translate`` preset's job inside
:func:`m2l_nlp.runs.experiment.run_training` (which owns the run folder): the loop of every
task on packed source/target rows (:mod:`m2l_nlp.data.translation`), with the chrF of a fixed
set of validation sentences after every epoch. The test side is then read once: one greedy
and one beam translation per distinct English sentence, scored by sacreBLEU against all of
its Greek renderings, beside two baselines (retrieval from the training pairs, and the same
retrieval on the summer school's random pair split, which shows what that leak is worth).
The run holds ``checkpoint/``, which :class:`Translator` (``m2l-nlp translate``) reads.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import time
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from tokenizers import Tokenizer

from m2l_nlp import devices
from m2l_nlp.config import Preset, TranslationConfig
from m2l_nlp.data import tatoeba
from m2l_nlp.data.tokenization import BOS_ID, EOS_ID, PAD_ID, UNK_TOKEN
from m2l_nlp.data.translation import VAL_SCORED, TranslationData, encode_sources, pack
from m2l_nlp.model import translators
from m2l_nlp.model.retrieval import RetrievalBaseline
from m2l_nlp.runs import folders as runs
from m2l_nlp.runs.checkpoint import TRANSLATOR, save_checkpoint
from m2l_nlp.train import metrics, translation_scores
from m2l_nlp.train.loop import StateMismatch, train
from m2l_nlp.train.progress import Progress

BEAM_WIDTH, LENGTH_PENALTY = 4, 0.6
SHOWN = ("I love you.", "Where is the station?", "Tom doesn't like cats.")


class TranslationRun(NamedTuple):
    """What a translation run made: its parameters, config, tokenizer and metrics."""

    params: Any
    config: TranslationConfig
    tokenizer: Tokenizer
    history: dict[str, list[float]]
    metrics: dict[str, Any]


class Translator:
    """English to Greek with a trained model: the student's ``greedy_decode`` or the course's
    beam search over the practical's cached step, checked once against the model's own
    forward; without the cache (said in one line) where it does not give the same logits."""

    def __init__(self, funcs, practical, config: TranslationConfig, tokenizer: Tokenizer):
        self.funcs, self.practical, self.config = funcs, practical, config
        self.tokenizer = tokenizer
        self.decoder: translators.Decoder | None = None  # chosen on first use
        self._programs: dict[Any, Any] = {}

    def _choose(self, params: Any, source: np.ndarray) -> translators.Decoder:
        cached = translators.cached_decoder(self.config, self.practical)
        rows = np.stack([source, source], axis=2).reshape(len(source), -1)  # any target will do
        self.funcs.predict_fw(
            params, rows, np.ones_like(rows)
        )  # the model's own errors, as they are
        try:
            translators.check_decoder(params, cached, self.funcs, rows, BOS_ID)
        except (ValueError, NotImplementedError) as error:
            print(f"note: {error}; translating without it (slower)", file=sys.stderr)
            return translators.recomputing_decoder(self.config, self.practical)
        return cached

    def _program(self, beam: int, length_penalty: float) -> Callable:
        """One jitted translation of a batch of sources, greedy (``beam`` 0) or beam search."""
        key = (beam, length_penalty)
        if key not in self._programs:
            decoder, practical, max_len = self.decoder, self.practical, self.config.max_len

            def run(params, source, mask):
                state = decoder.start(params, source, mask)
                start = jnp.full((source.shape[0],), BOS_ID, jnp.int32)

                def step(tokens, at, state):
                    return decoder.step(params, tokens, at, state)

                if beam:
                    return translators.beam_search(
                        step, state, start, max_len, EOS_ID, beam, length_penalty
                    )
                return practical.greedy_decode(step, state, start, max_len, EOS_ID)

            self._programs[key] = jax.jit(run)
        return self._programs[key]

    def _fitted(
        self, params: Any, size: int, beam: int, length_penalty: float
    ) -> tuple[Callable, int]:
        """Beam search compiled for batches that fit in memory: ``size`` sentences, fewer
        if the compiler's plan for them exceeds most of the free memory, and
        :class:`~m2l_nlp.model.translators.BeamTooWide` if one sentence's beams do not fit
        (or do not fit the search's 32-bit ranking of beams times tokens)."""
        key = ("fitted", beam, length_penalty, size)
        if key not in self._programs:
            rankable = (2**31 - 1) // self.config.vocab_size
            probe = min(beam, rankable)  # its plan tells the memory of one beam

            def compiled(rows: int) -> Callable:
                shape = jax.ShapeDtypeStruct((rows, self.config.max_len), jnp.int32)
                return self._program(probe, length_penalty).lower(params, shape, shape).compile()

            program = compiled(size)
            need, free = translators.program_bytes(program), translators.free_memory()
            rows = size
            if need is not None and free is not None:  # else nothing to go by: as asked
                rows = translators.fit_beams(need * beam // probe, size, beam, free)
            if probe < beam:
                raise translators.BeamTooWide(
                    f"--beam {beam} is more than beam search can rank with "
                    f"{self.config.vocab_size} tokens: use --beam {rankable} or fewer"
                )
            self._programs[key] = (program if rows == size else compiled(rows), rows)
        return self._programs[key]

    def translate(
        self,
        params: Any,
        sentences: Sequence[str],
        *,
        beam: int = 0,
        length_penalty: float = LENGTH_PENALTY,
        batch: int = 256,
    ) -> list[str]:
        """The Greek of each English sentence (NFC-normalised first): greedy, or beam search
        with ``beam`` beams. Sources longer than the model's window are cut to it."""
        texts = [unicodedata.normalize("NFC", s) for s in sentences]
        source, mask, _ = encode_sources(self.tokenizer, texts, self.config.max_len)
        if self.decoder is None:
            self.decoder = self._choose(params, source[:4])
        run = self._program(beam, length_penalty)
        size = min(batch, max(8, 1 << (len(texts) - 1).bit_length()))  # few batch shapes
        if beam:
            run, size = self._fitted(params, size, beam, length_penalty)
        out = []
        for first in range(0, len(texts), size):  # full batches: one program for all
            rows = slice(first, first + size)
            pad = size - len(source[rows])
            ids = run(
                params,
                jnp.asarray(np.pad(source[rows], ((0, pad), (0, 0)))),
                jnp.asarray(np.pad(mask[rows], ((0, pad), (0, 0)))),
            )
            out.extend(np.asarray(ids)[: size - pad])
        return [self.tokenizer.decode(_until_end(row)) for row in out]


def reading_notes(
    tokenizer: Tokenizer,
    sentences: Sequence[str],
    max_len: int,
    names: Sequence[str] | None = None,
) -> list[str]:
    """One line for each sentence that the model does not read as given: longer than its
    ``max_len`` tokens (how much of it is read), with characters the tokenizer never saw,
    or in Greek (the model translates English to Greek). ``names`` says where each sentence
    came from (default: sentence 1, 2, ...)."""
    counter = Tokenizer.from_str(tokenizer.to_str())  # a copy whose settings we may change
    counter.no_padding()
    counter.no_truncation()
    unknown = counter.token_to_id(UNK_TOKEN)
    notes = []
    names = names or [f"sentence {number}" for number in range(1, len(sentences) + 1)]
    for name, sentence in zip(names, sentences, strict=True):
        text = unicodedata.normalize("NFC", sentence)
        # enough characters for max_len tokens and one more (a token holds one at least):
        # a 10 MB sentence is not tokenised whole to learn that it is long
        encoding = counter.encode(text[: 64 * (max_len + 1)], add_special_tokens=False)
        what = f"{name} ({_excerpt(text)!r})"
        if len(encoding.ids) > max_len:
            read = text[: encoding.offsets[max_len - 1][1]]
            words = sum(1 for _ in re.finditer(r"\S+", text))  # no list of a 10 MB text's words
            notes.append(
                f"{what} is longer than the model reads: only its first {max_len} tokens, "
                f"{len(read.split())} of its {words} words (up to {read[-20:]!r}), are "
                "translated"
            )
        spans = zip(encoding.ids, encoding.offsets, strict=True)
        # the tokenizer reads a run of such characters as one unknown token: list each
        unseen = "".join(text[a:b] for i, (a, b) in spans if i == unknown)
        unseen = "".join(dict.fromkeys(c for c in unseen if not c.isspace()))
        if unseen:
            more = f" and {len(unseen) - 5} more" if len(unseen) > 5 else ""
            shown = ", ".join(repr(c) for c in unseen[:5]) + more
            notes.append(
                f"{what} has characters the model never saw in training ({shown}): it reads "
                "them as unknown"
            )
        if tatoeba.is_greek(text):
            notes.append(
                f"{what} looks Greek, but this model translates English into Greek: give it English"
            )
    return notes


def _excerpt(text: str, width: int = 30) -> str:
    """The start of ``text``, at most ``width`` characters, on one line."""
    start = " ".join(text[: width + 1].split())
    return start if len(start) <= width else start[: width - 3] + "..."


def _until_end(ids: np.ndarray) -> list[int]:
    """The ids before the first end token (padding dropped)."""
    ids = [int(i) for i in ids]
    ids = ids[: ids.index(EOS_ID)] if EOS_ID in ids else ids
    return [i for i in ids if i != PAD_ID]


def train_translation(
    preset: Preset,
    data: TranslationData,
    folder: runs.RunFolder | None,
    *,
    name: str,
    changed: Sequence[str],
    impl: Any,
    seed: int,
    no_test: bool,
    resume: bool,
    progress: bool,
    log: Callable[[str], None],
) -> TranslationRun:
    """Train ``preset``'s translator on ``data``; with a ``folder``, keep every epoch there
    (``resume`` continues one) and write the run into it at the end."""
    start = time.perf_counter()
    compiled_before = devices.compile_counter()
    config = preset.model_config(data.tokenizer.get_vocab_size())
    settings = preset.settings(seed=seed, crop_len=2 * config.max_len)  # whole rows, no crops
    funcs, practical = translators.translator(config, impl)
    params = translators.init_params(funcs, seed, config.max_len)
    first = data.train[0][:8]
    logits = funcs.predict_fw(params, first, np.ones_like(first))  # a wrong model trains on
    translators.check_output(logits, *first.shape, config.vocab_size, impl)
    counts = data.pairs.counts
    log(
        "pairs split by connected component (no English and no Greek sentence on two sides): "
        + "; ".join(
            f"{side} {counts['pairs'][side]} pairs, {counts['english'][side]} English / "
            f"{counts['greek'][side]} Greek sentences, {counts['components'][side]} components"
            for side in tatoeba.SIDES
        )
    )
    log(
        f"training on {len(data.train[0])} pairs ({data.dropped} longer than {config.max_len} "
        f"tokens left out); {config.vocab_size} tokens shared by both languages"
    )
    translator = Translator(funcs, practical, config, data.tokenizer)
    val_english, val_greek = tatoeba.references(data.pairs.val)
    val_english, val_greek = val_english[:VAL_SCORED], val_greek[:VAL_SCORED]
    fingerprint = runs.fingerprint(
        preset=dataclasses.asdict(preset),
        name=name,
        seed=seed,
        no_test=no_test,
        impl=impl if isinstance(impl, str) else "",
    )
    begin = None
    if folder is not None and resume:
        begin = folder.resume_from(fingerprint)
        log(f"resuming after epoch {begin.epoch} of {settings.epochs}")
    structure = jax.tree_util.tree_structure(params)
    # read here, not by the loop: its evaluation keeps every logit, (N, 2L, V), on the host
    validation: dict[str, list[float]] = {"val_loss": [], "val_chrf": []}

    def on_epoch(done: Progress) -> None:
        if data.val is not None:
            trained = jax.tree_util.tree_unflatten(structure, done.state[: structure.num_leaves])
            validation["val_loss"].append(bits_per_token(funcs, trained, data.val))
            hypotheses = translator.translate(trained, val_english)
            validation["val_chrf"].append(translation_scores.score(hypotheses, val_greek).chrf)
            log(
                f"  validation: {validation['val_loss'][-1]:.3f} bits per token; chrF "
                f"{validation['val_chrf'][-1]:.1f} ({len(val_english)} sentences, greedy)"
            )
        if folder is not None:
            folder.keep_epoch(done, settings.epochs, fingerprint)

    mesh = devices.make_mesh()
    try:
        result = train(
            funcs,
            params,
            data.train,
            settings,
            objective=metrics.TARGET_TOKENS,
            mesh=mesh,
            progress=progress,
            log=log,
            start=begin,
            on_epoch=on_epoch,
        )
    except StateMismatch as error:
        raise runs.RunFolderError(f"--resume: {error}") from None
    params = jax.device_get(result.params)
    run_metrics: dict[str, Any] = {
        "preset": name,
        "changed": list(changed),
        "architecture": preset.architecture,
        "impl": impl if isinstance(impl, str) else "notebook",
        "devices": devices.describe_devices(),
        "split": counts,
        "train_pairs_used": len(data.train[0]),
        "train_pairs_left_out": data.dropped,
        "tokens": config.vocab_size,
        "val_chrf": validation["val_chrf"],
    }
    if not no_test:
        run_metrics.update(_test(translator, params, data, log))
    compiled = devices.compile_counter()
    run_metrics["compiled_programs"] = compiled["programs"] - compiled_before["programs"]
    run_metrics["compile_seconds"] = compiled["seconds"] - compiled_before["seconds"]
    run_metrics["seconds"] = time.perf_counter() - start
    history = dict(result.history, **validation) if data.val is not None else result.history
    run = TranslationRun(params, config, data.tokenizer, history, run_metrics)
    if folder is not None:
        folder.commit(
            lambda new: save_run(new, run, no_test),
            dict(preset=name, architecture=preset.architecture, impl=run_metrics["impl"]),
        )
    return run


_token_bits = jax.jit(metrics.next_char_loss)


def bits_per_token(
    funcs: Any, params: Any, rows: tuple[np.ndarray, np.ndarray, np.ndarray], batch: int = 256
) -> float:
    """The mean loss in bits over the real target tokens of packed ``rows`` (ids, mask,
    labels), a batch of logits at a time."""
    ids, mask, labels = rows
    total, count = 0.0, 0
    for first in range(0, len(ids), batch):
        pad = batch - len(ids[first : first + batch])  # full batches: one program
        cut = [np.pad(a[first : first + batch], ((0, pad), (0, 0))) for a in (ids, mask)]
        logits = funcs.predict_fw(params, *cut)
        part = labels[first : first + batch]
        bits = np.asarray(_token_bits(logits[: len(part)], part))
        total, count = total + float(bits.sum()), count + int((part >= 0).sum())
    return total / max(count, 1)


def _test(translator, params, data: TranslationData, log) -> dict:
    """The test side, read once: greedy and beam translations of every distinct English
    sentence and both baselines, scored against all of each sentence's references."""
    english, greek = tatoeba.references(data.pairs.test)
    scores = {}
    started = time.perf_counter()
    greedy = translator.translate(params, english)
    scores["greedy"] = translation_scores.score(greedy, greek)
    seconds = {"greedy": time.perf_counter() - started}
    started = time.perf_counter()
    beam = translator.translate(params, english, beam=BEAM_WIDTH)
    scores[f"beam {BEAM_WIDTH}"] = translation_scores.score(beam, greek)
    seconds["beam"] = time.perf_counter() - started
    retrieval = RetrievalBaseline(data.pairs.train).translate(english)
    scores["retrieval"] = translation_scores.score(retrieval, greek)
    leaky_train, leaky_test = tatoeba.random_pair_split(
        data.pairs.train + data.pairs.val + data.pairs.test, seed=0
    )
    leaky_english, leaky_greek = tatoeba.references(leaky_test)
    leaky = RetrievalBaseline(leaky_train).translate(leaky_english)
    scores["retrieval, random pair split"] = translation_scores.score(leaky, leaky_greek)
    test_rows = pack(translator.tokenizer, data.pairs.test, data.max_len)[0]
    test_bits = bits_per_token(translator.funcs, params, test_rows)
    log(
        f"test: {len(english)} distinct English sentences, {len(data.pairs.test)} references "
        f"(one hypothesis each, scored against all its Greek renderings); "
        f"{test_bits:.3f} bits per target token"
    )
    for what, got in scores.items():
        log(f"  {what:<30} BLEU {got.bleu:5.1f}   chrF {got.chrf:5.1f}")
    log(f"  (the random pair split has {len(leaky_english)} test sentences; the leak's figure)")
    log(f"sacreBLEU signatures: BLEU {scores['greedy'].bleu_signature}")
    log(f"                      chrF {scores['greedy'].chrf_signature}")
    shown = list(SHOWN) + english[:3]
    for source, target in zip(shown, translator.translate(params, shown), strict=True):
        log(f"  {source}  ->  {target}")
    return {
        "test_sentences": len(english),
        "test_bits_per_token": test_bits,
        "test_scores": {k: {"bleu": v.bleu, "chrf": v.chrf} for k, v in scores.items()},
        "bleu_signature": scores["greedy"].bleu_signature,
        "chrf_signature": scores["greedy"].chrf_signature,
        "decoding_seconds": seconds,
        "cached_decoding": bool(translator.decoder and translator.decoder.cached),
        "examples": [dict(en=e, el=g) for e, g in zip(english[:10], greedy[:10], strict=True)],
    }


def save_run(out: Path, run: TranslationRun, no_test: bool) -> None:
    """``metrics.json``, the training curves and (test runs) ``checkpoint/`` into ``out``."""
    from m2l_nlp import plotting
    from m2l_nlp.fileio import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    if not no_test:
        meta = dict(run.metrics, history=run.history)
        save_checkpoint(
            out / "checkpoint", TRANSLATOR, run.params, run.config, run.tokenizer, meta=meta
        )
    write_json_atomic(out / "metrics.json", dict(run.metrics, history=run.history))
    curves = plotting.plot_training_curves(run.history, title="Training curves (bits per token)")
    plotting.save_figure(curves, out / "training_curves.png")
