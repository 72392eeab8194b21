"""Practical 3's translator as a run: train, score honestly, save, and translate.

:data:`KIND` is the ``translate`` preset's kind of run (:mod:`m2l_nlp.runs.kinds`; the run
itself, folder and loop, is :func:`m2l_nlp.runs.experiment.train_and_evaluate`): the loop on
source/target pairs (:mod:`m2l_nlp.data.translation`) with the practical's
``sequence_loss``, bits per token on the validation pairs and the chrF of a fixed set of
their sentences after every epoch. The test side is then read once: one greedy and one beam
translation per distinct English sentence, scored by sacreBLEU against all of its Greek
renderings, beside two baselines (retrieval from the training pairs, and the same retrieval
on the summer school's random pair split, which shows what that leak is worth). The run
holds ``checkpoint/``, which :class:`Translator` (``m2l-nlp translate``) reads.
"""

from __future__ import annotations

import re
import time
import unicodedata
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from tokenizers import Tokenizer

from m2l_nlp.config import Preset, TransformerConfig
from m2l_nlp.data import tatoeba
from m2l_nlp.data.tokenization import BOS_ID, EOS_ID, PAD_ID, UNK_TOKEN
from m2l_nlp.data.translation import VAL_SCORED, TranslationData, encode_pairs, encode_sources
from m2l_nlp.model import generation, translators
from m2l_nlp.model.retrieval import RetrievalBaseline
from m2l_nlp.runs.checkpoint import SUBWORDS, TRANSLATOR, CheckpointKind, save_run
from m2l_nlp.runs.kinds import Context, Kind, Setup, test_scores
from m2l_nlp.train import metrics, translation_scores
from m2l_nlp.train.metrics import EvalResult

BEAM_WIDTH, LENGTH_PENALTY = 4, 0.6
SHOWN = ("I love you.", "Where is the station?", "Tom doesn't like cats.")


class Translator:
    """English to Greek with a trained model: the student's ``greedy_decode`` or the course's
    beam search over the practical's cached step, checked once against the model's own
    forward; without the cache (said in one line) where it does not give the same logits."""

    def __init__(self, funcs, practical, config: TransformerConfig, tokenizer: Tokenizer):
        self.funcs, self.practical, self.config = funcs, practical, config
        self.tokenizer = tokenizer
        self.encode = translators.encoder(config, practical)
        decode = translators.decoder(config, practical)
        # one step of each kind: a program compiles once per step it is given
        self.steps = {True: generation.cached(decode), False: generation.recomputing(decode)}
        self.cached: bool | None = None  # chosen on first use
        self._programs: dict[Any, Any] = {}

    def _start(self, params: Any, source: Any, mask: Any, cached: bool) -> generation.Reading:
        """The encoder's output for the sources, once, and an empty target."""
        memory = self.encode(params, source, mask)
        layer_cache = self.practical.LayerCache if cached else None
        return generation.start(self.config, source.shape[0], (memory, mask), layer_cache)

    def _choose(self, params: Any, source: np.ndarray) -> bool:
        """Whether the cached step gives the forward's logits, reading ``source`` itself as
        the target (any target will do)."""
        target, real_tokens = source, (source != PAD_ID).astype(np.int32)
        # the model's own errors, as they are
        want = np.asarray(self.funcs.predict_fw(params, source, real_tokens, target, real_tokens))
        inputs = np.concatenate([np.full((len(source), 1), BOS_ID), target[:, :-1]], axis=1)
        real = np.concatenate([np.ones((len(source), 1), bool), target[:, :-1] != PAD_ID], 1)

        def check() -> None:
            mask = jnp.asarray((source != PAD_ID).astype(np.int32))
            state = self._start(params, jnp.asarray(source), mask, True)
            ids = inputs.astype(np.int32)
            generation.check_cache(params, self.steps[True], state, ids, want, real)

        return generation.use_cache(check, "translating")

    def program(self, beam: int, length_penalty: float) -> Callable:
        """One jitted translation of a batch of sources, greedy (``beam`` 0) or beam search."""
        key = (beam, length_penalty, self.cached)
        if key not in self._programs:
            cached, practical, max_len = self.cached, self.practical, self.config.max_len
            step_at = self.steps[cached]

            def run(params, source, mask):
                state = self._start(params, source, mask, cached)
                start = jnp.full((source.shape[0],), BOS_ID, jnp.int32)

                def step(tokens, at, state):  # the token (B,) of every row at position at
                    logits, state = step_at(params, tokens[:, None], at, state)
                    return logits[:, 0], state

                if beam:
                    return generation.beam_search(
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
                return self.program(probe, length_penalty).lower(params, shape, shape).compile()

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
        if self.cached is None:
            self.cached = self._choose(params, source[:4])
        run = self.program(beam, length_penalty)
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


class Translation(Kind):
    """English to Greek: every token of the translation, given the whole source (the
    ``translate`` preset)."""

    name = TRANSLATOR
    checkpoint = CheckpointKind(
        TransformerConfig,
        SUBWORDS,
        "an English-to-Greek translator",
        "translate sentences with",
        "translate",
        "translate",
        "5 minutes of CPU time",
        "runs/translate/checkpoint",
    )
    curves_title = "Training curves (bits per token)"
    loss_exercise = "sequence_loss"

    def check(self, request) -> None:
        if request.val_size is not None:  # its validation side is a share of the pairs
            raise ValueError(
                "--val-size is for reviews: the translate preset validates on 5 % of the pairs "
                "(split by sentence; m2l_nlp/data/tatoeba.py)"
            )
        if request.impl == "exercises":
            translators.check_builds(request.preset, request.impl)
        tatoeba.resolve_pairs(request.data, progress=request.progress)

    def prepare(self, request) -> TranslationData:
        from m2l_nlp.data.translation import prepare_translation

        return prepare_translation(
            request.data,
            vocab_size=request.preset.vocab_size,
            max_len=request.preset.seq_len,
            seed=request.seed,
            progress=request.progress,
        )

    def setup(self, preset: Preset, data: TranslationData, run: Context) -> Setup:
        seed, impl, log = run.seed, run.impl, run.log
        config = preset.model_config(data.tokenizer.get_vocab_size())
        funcs, practical = translators.translator(config, impl, start_id=BOS_ID)
        params = translators.init_params(funcs, seed, config.max_len)
        (sources, targets), _, _, target_masks = data.train
        source, target = sources[:8], targets[:8]
        first = (source, (source != PAD_ID).astype(np.int32), target, target_masks[:8])
        logits = funcs.predict_fw(params, *first)  # a wrong model would train on
        translators.check_output(logits, *target.shape, config.vocab_size, impl)
        counts = data.pairs.counts
        log(
            "pairs split by connected component (no English and no Greek sentence on two "
            "sides): "
            + "; ".join(
                f"{side} {counts['pairs'][side]} pairs, {counts['english'][side]} English / "
                f"{counts['greek'][side]} Greek sentences, {counts['components'][side]} "
                "components"
                for side in tatoeba.SIDES
            )
        )
        log(
            f"training on {len(data.train[2])} pairs ({data.dropped} longer than "
            f"{config.max_len} tokens left out); {config.vocab_size} tokens shared by both "
            "languages"
        )
        translator = Translator(funcs, practical, config, data.tokenizer)
        val_english, val_greek = tatoeba.references(data.pairs.val)
        val_english, val_greek = val_english[:VAL_SCORED], val_greek[:VAL_SCORED]

        def validate(trained: Any) -> dict[str, float]:
            if data.val is None:
                return {}
            hypotheses = translator.translate(trained, val_english)
            chrf = translation_scores.score(hypotheses, val_greek).chrf
            log(f"  validation chrF {chrf:.1f} ({len(val_english)} sentences, greedy)")
            return {"val_chrf": chrf}

        return Setup(
            funcs,
            params,
            config,
            data.train,
            data.val,
            metrics.sequence_objective(practical.sequence_loss),
            fingerprint={},
            metrics={
                "split": counts,
                "train_pairs_used": len(data.train[2]),
                "train_pairs_left_out": data.dropped,
                "tokens": config.vocab_size,
            },
            settings=dict(crop_len=config.max_len),  # whole pairs, no crops
            after_epoch=validate,
            writer=translator,
        )

    def finish(
        self,
        setup: Setup,
        params: Any,
        validation: EvalResult | None,
        data: TranslationData,
        run: Context,
    ) -> dict[str, Any]:
        no_test, log = run.no_test, run.log
        scores = {} if validation is None else {"val_bits_per_token": validation.loss}
        if no_test:
            return scores
        test = encode_pairs(setup.writer.tokenizer, data.pairs.test, data.max_len)[0]
        bits = test_scores(setup, params, test, run).loss
        return scores | _test(setup.writer, jax.device_get(params), data, bits, log)

    def save(self, out: Path, result, data: TranslationData, run: Context) -> None:
        save_run(out, result, run.settings, data.tokenizer, checkpoint=not run.no_test)

    def summary(self, result) -> list[str]:
        shown = ", ".join(f"{c:.1f}" for c in result.history.get("val_chrf", []))
        return [f"validation chrF per epoch: {shown or '-'}"]


KIND = Translation()


def _test(translator, params, data: TranslationData, test_bits: float, log) -> dict:
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
        "cached_decoding": bool(translator.cached),
        "examples": [dict(en=e, el=g) for e, g in zip(english[:10], greedy[:10], strict=True)],
    }
