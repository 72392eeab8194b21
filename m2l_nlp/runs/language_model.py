"""Practical 3's character language model as a run: train, score, save, and write text.

:data:`KIND` is the ``char-lm`` preset's kind of run (:mod:`m2l_nlp.runs.kinds`; the run
itself, folder and loop, is :func:`m2l_nlp.runs.experiment.train_and_evaluate`): the
next-character objective, bits per character on the validation reviews each
epoch and a sample of text after it, then once on held-out test reviews beside the unigram
and bigram baselines. The run holds ``checkpoint/`` (parameters, config, characters), which
:func:`write` (``m2l-nlp generate``) continues text with, through the key/value cache.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp.config import Preset, TransformerConfig
from m2l_nlp.data.characters import CharData, CharVocab
from m2l_nlp.model import generation
from m2l_nlp.model.language_models import decoder, init_params, language_model
from m2l_nlp.runs.checkpoint import CHARACTERS, LANGUAGE_MODEL, CheckpointKind, save_run
from m2l_nlp.runs.kinds import Context, Kind, Setup, test_scores
from m2l_nlp.train import metrics
from m2l_nlp.train.metrics import EvalResult

SAMPLE_PROMPT = "The film"
SAMPLE_CHARS = 100


class LanguageModel(Kind):
    """The next character at every position of review text (the ``char-lm`` preset)."""

    name = LANGUAGE_MODEL
    checkpoint = CheckpointKind(
        TransformerConfig,
        CHARACTERS,
        "a character language model",
        "continue text with",
        "generate",
        "char-lm",
        "under a minute of CPU time",
        "runs/char-lm/checkpoint",
    )
    curves_title = "Training curves (bits per character)"
    loss_exercise = "next_token_loss"

    def check(self, request) -> None:
        from m2l_nlp.data.imdb_archive import check_source
        from m2l_nlp.runs.classifier import resolve_val_size

        resolve_val_size(request.preset, request.val_size, request.no_test, n_train=2**62)
        if request.data != "small":
            check_source(request.data)

    def prepare(self, request) -> CharData:
        from m2l_nlp.data.characters import prepare_characters

        preset = request.preset
        return prepare_characters(
            request.data,
            width=preset.seq_len,
            max_chars=preset.vocab_size,
            val_size=preset.val_size if request.val_size is None else request.val_size,
            train_reviews=preset.train_reviews,
            seed=request.seed,
            cache_dir=request.cache_dir,
            progress=request.progress,
        )

    def setup(self, preset: Preset, data: CharData, run: Context) -> Setup:
        seed, impl, log = run.seed, run.impl, run.log
        config = preset.model_config(data.vocab.size)
        funcs, practical = language_model(config, impl)
        params = init_params(funcs, seed, config.max_len)
        log(
            f"data: {data.reviews['train']} train / {data.reviews['val']} validation / "
            f"{data.reviews['test']} test reviews as {len(data.train.ids)} windows of "
            f"{config.max_len} characters; {data.vocab.size} character ids"
        )
        writer = Writer(funcs, practical, config, data.vocab)

        def show_sample(trained: Any) -> dict[str, float]:
            log(f"  sample: {SAMPLE_PROMPT + writer.sample(trained, SAMPLE_PROMPT)!r}")
            return {}

        return Setup(
            funcs,
            params,
            config,
            data.train.split(),
            None if data.val is None else data.val.split(),
            metrics.next_token_objective(practical.next_token_loss),
            fingerprint={},
            metrics=dict(reviews=data.reviews, characters=data.vocab.size),
            after_epoch=show_sample,
            writer=writer,
        )

    def finish(
        self, setup: Setup, params: Any, validation: EvalResult | None, data: CharData, run: Context
    ) -> dict[str, Any]:
        no_test, log = run.no_test, run.log
        scores: dict[str, Any] = {}
        if validation is not None:
            scores["val_bits_per_char"] = validation.loss
            if data.val_baselines is not None:
                scores["val_baselines_bits_per_char"] = data.val_baselines
                log(beside_baselines("validation", validation.loss, data.val_baselines))
                if no_test:  # else the test line below judges the run
                    note = learning_note(validation.loss, data.val_baselines)
                    if note:
                        log(note)
        if no_test:
            return scores
        test = test_scores(setup, params, data.test.split(), run)
        scores.update(
            test_bits_per_char=test.loss,
            test_accuracy=test.accuracy,
            baselines_bits_per_char=data.baselines,
        )
        right = f" (next character right {test.accuracy:.1%})"
        log(beside_baselines("test", test.loss, data.baselines, right))
        note = learning_note(test.loss, data.baselines)
        if note:
            log(note)
        params = jax.device_get(params)
        for prompt in ("The film", "I watched this movie"):
            log(f"  {prompt + setup.writer.sample(params, prompt)!r}")
        return scores

    def save(self, out: Path, result, data: CharData, run: Context) -> None:
        save_run(out, result, run.settings, data.vocab, checkpoint=not run.no_test)

    def summary(self, result) -> list[str]:
        shown = ", ".join(f"{b:.3f}" for b in result.history.get("val_loss", []))
        return [f"validation bits per character per epoch: {shown or '-'}"]


KIND = LanguageModel()


def beside_baselines(split: str, bits: float, baselines: dict[str, float], detail: str = "") -> str:
    """The line that puts a run's bits per character on ``split`` beside the baselines'."""
    return (
        f"{split} bits per character: {bits:.3f}{detail}; baselines on the same text: bigram "
        f"{baselines['bigram']:.3f}, unigram {baselines['unigram']:.3f}"
    )


def learning_note(bits: float, baselines: dict[str, float]) -> str | None:
    """What a run that does not beat the bigram model learned, in a line (None if it does):
    at or above the unigram model's bits it learned nothing, not even letter frequencies."""
    unigram, bigram = baselines["unigram"], baselines["bigram"]
    if bits >= unigram:
        return (
            f"note: this run learned nothing: {bits:.3f} bits per character is no better than "
            f"the unigram model's {unigram:.3f} (how often each character occurs), so its text "
            "is letters in their usual proportions; train longer (--epochs) or on more text"
        )
    if bits >= bigram:
        return (
            f"note: this run has not yet learned which character follows which: the bigram "
            f"model's counts ({bigram:.3f} bits per character) still beat its {bits:.3f}; train "
            "longer (--epochs) or on more text"
        )
    return None


class Writer:
    """Continues text with a model through the practical's key/value cache, checked once
    against the model's own forward; without it (said in one line) where the cache does
    not give the model's logits, so that an unfinished ``attend_with_cache`` never stops a
    run."""

    def __init__(self, funcs, practical, config: TransformerConfig, vocab: CharVocab):
        self.funcs, self.practical, self.config, self.vocab = funcs, practical, config, vocab
        self.decode = decoder(config, practical)
        self.cached: bool | None = None  # None: not checked yet
        # one step of each kind: generate compiles once per step it is given
        self.steps = {
            True: generation.cached(self.decode),
            False: generation.recomputing(self.decode),
        }

    def sample(self, params: Any, prompt: str) -> str:
        """A continuation of ``prompt``, as long as the window allows (at most
        ``SAMPLE_CHARS``), to show what the model writes."""
        room = self.config.max_len - len(prompt)
        return self.write(params, prompt, min(SAMPLE_CHARS, room)) if room > 0 else ""

    def _start(self, cached: bool) -> generation.Reading:
        layer_cache = self.practical.LayerCache if cached else None
        return generation.start(self.config, 1, (), layer_cache)

    def _check(self, params: Any, ids: np.ndarray) -> None:
        want = np.asarray(self.funcs.predict_fw(params, ids, np.ones_like(ids)))
        generation.check_cache(params, self.steps[True], self._start(True), ids, want)

    def write(
        self,
        params: Any,
        prompt: str,
        max_chars: int,
        *,
        temperature: float = 0.8,
        top_k: int | None = None,
        seed: int = 0,
        stop: str | None = None,
    ) -> str:
        """Up to ``max_chars`` characters after ``prompt`` (until ``stop``, if given)."""
        ids = self.vocab.encode(prompt)[None]
        generation.check_window(ids.shape[1], max_chars, self.config.max_len)
        if self.cached is None:
            self.cached = generation.use_cache(lambda: self._check(params, ids), "writing")
        knobs = dict(
            new_chars=max_chars,
            sample=self.practical.sample_next,
            temperature=temperature,
            top_k=top_k,
        )
        state, prompt, key = self._start(self.cached), jnp.asarray(ids), jax.random.PRNGKey(seed)
        step = self.steps[self.cached]
        new = generation.generate(params, state, prompt, key, step=step, **knobs).ids
        stop_id = None if stop is None else int(self.vocab.encode(stop)[0])
        return self.vocab.decode(generation.stop_at(np.asarray(new[0]), stop_id))
