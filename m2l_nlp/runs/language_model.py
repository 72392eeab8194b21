"""Practical 3's character language model as a run: train, score, save, and write text.

:func:`train_language_model` is the ``char-lm`` preset's job inside
:func:`m2l_nlp.runs.experiment.run_training` (which owns the run folder): the loop of every
task with the next-character objective, bits per character on the validation reviews each
epoch and a sample of text after it, then once on held-out test reviews beside the unigram
and bigram baselines. The run holds ``checkpoint/`` (parameters, config, characters), which
:func:`write` (``m2l-nlp generate``) continues text with, through the key/value cache.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp import devices
from m2l_nlp.config import LanguageModelConfig, Preset
from m2l_nlp.data.characters import CharData, CharVocab
from m2l_nlp.model import generation
from m2l_nlp.model.language_models import cached_step, init_params, language_model
from m2l_nlp.runs import folders as runs
from m2l_nlp.runs.checkpoint import LANGUAGE_MODEL, save_checkpoint
from m2l_nlp.train import metrics
from m2l_nlp.train.evaluation import evaluate
from m2l_nlp.train.loop import StateMismatch, train
from m2l_nlp.train.progress import Progress

SAMPLE_PROMPT = "The film"
SAMPLE_CHARS = 100


class LanguageModelRun(NamedTuple):
    """What a language-model run made: its parameters, config, characters and metrics."""

    params: Any
    config: LanguageModelConfig
    vocab: CharVocab
    history: dict[str, list[float]]
    metrics: dict[str, Any]


def train_language_model(
    preset: Preset,
    data: CharData,
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
) -> LanguageModelRun:
    """Train ``preset``'s language model on ``data``; with a ``folder``, keep every epoch
    there (``resume`` continues one) and write the run into it at the end."""
    start = time.perf_counter()
    compiled_before = devices.compile_counter()
    settings = preset.settings(seed=seed)
    config = preset.model_config(data.vocab.size)
    funcs, practical = language_model(config, impl)
    params = init_params(funcs, seed, config.max_len)
    log(
        f"data: {data.reviews['train']} train / {data.reviews['val']} validation / "
        f"{data.reviews['test']} test reviews as {len(data.train.ids)} windows of "
        f"{config.max_len} characters; {data.vocab.size} character ids"
    )
    writer = Writer(funcs, practical, config, data.vocab)
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

    def on_epoch(done: Progress) -> None:
        trained = jax.tree_util.tree_unflatten(structure, done.state[: structure.num_leaves])
        log(f"  sample: {SAMPLE_PROMPT + writer.sample(trained, SAMPLE_PROMPT)!r}")
        if folder is not None:
            folder.keep_epoch(done, settings.epochs, fingerprint)

    mesh = devices.make_mesh()
    try:
        result = train(
            funcs,
            params,
            data.train.split(),
            settings,
            eval_data=None if data.val is None else data.val.split(),
            objective=metrics.NEXT_CHAR,
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
        "reviews": data.reviews,
        "characters": data.vocab.size,
    }
    if result.eval_result is not None:
        run_metrics["val_bits_per_char"] = result.eval_result.loss
        if data.val_baselines is not None:
            run_metrics["val_baselines_bits_per_char"] = data.val_baselines
            log(beside_baselines("validation", result.eval_result.loss, data.val_baselines))
            if no_test:  # else the test line below judges the run
                note = learning_note(result.eval_result.loss, data.val_baselines)
                if note:
                    log(note)
    if not no_test:
        test = evaluate(
            params,
            funcs,
            data.test.split(),
            objective=metrics.NEXT_CHAR,
            settings=settings,
            mesh=mesh,
            progress=progress,
            desc="test",
        )
        run_metrics.update(
            test_bits_per_char=test.loss,
            test_accuracy=test.accuracy,
            baselines_bits_per_char=data.baselines,
        )
        right = f" (next character right {test.accuracy:.1%})"
        log(beside_baselines("test", test.loss, data.baselines, right))
        note = learning_note(test.loss, data.baselines)
        if note:
            log(note)
        for prompt in ("The film", "I watched this movie"):
            log(f"  {prompt + writer.sample(params, prompt)!r}")
    compiled = devices.compile_counter()
    run_metrics["compiled_programs"] = compiled["programs"] - compiled_before["programs"]
    run_metrics["compile_seconds"] = compiled["seconds"] - compiled_before["seconds"]
    run_metrics["seconds"] = time.perf_counter() - start
    run = LanguageModelRun(params, config, data.vocab, result.history, run_metrics)
    if folder is not None:
        folder.commit(
            lambda new: save_run(new, run, no_test),
            dict(preset=name, architecture=preset.architecture, impl=run_metrics["impl"]),
        )
    return run


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


def save_run(out: Path, run: LanguageModelRun, no_test: bool) -> None:
    """``metrics.json``, the training curves and (test runs) ``checkpoint/`` into ``out``."""
    from m2l_nlp import plotting
    from m2l_nlp.fileio import write_json_atomic

    out.mkdir(parents=True, exist_ok=True)
    if not no_test:
        meta = dict(run.metrics, history=run.history)
        save_checkpoint(
            out / "checkpoint", LANGUAGE_MODEL, run.params, run.config, run.vocab, meta=meta
        )
    write_json_atomic(out / "metrics.json", dict(run.metrics, history=run.history))
    curves = plotting.plot_training_curves(
        run.history, title="Training curves (bits per character)"
    )
    plotting.save_figure(curves, out / "training_curves.png")


class Writer:
    """Continues text with a model through the practical's key/value cache, checked once
    against the model's own forward; without it (said in one line) where the cache does
    not give the model's logits, so that an unfinished ``attend_with_cache`` never stops a
    run."""

    def __init__(self, funcs, practical, config: LanguageModelConfig, vocab: CharVocab):
        self.funcs, self.practical, self.config, self.vocab = funcs, practical, config, vocab
        self.step = cached_step(config, practical)
        self.cached: bool | None = None  # None: not checked yet

    def sample(self, params: Any, prompt: str) -> str:
        """A continuation of ``prompt``, as long as the window allows (at most
        ``SAMPLE_CHARS``), to show what the model writes."""
        room = self.config.max_len - len(prompt)
        return self.write(params, prompt, min(SAMPLE_CHARS, room)) if room > 0 else ""

    def _check(self, params: Any, ids: np.ndarray) -> bool:
        caches = self.practical.empty_caches(self.config, 1)
        try:
            generation.check_cache(params, caches, self.step, self.funcs.predict_fw, ids)
        except (ValueError, NotImplementedError) as error:
            print(f"note: {error}; writing without it (slower)", file=sys.stderr)
            return False
        return True

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
            self.cached = self._check(params, ids)
        knobs = dict(
            new_chars=max_chars,
            sample=self.practical.sample_next,
            temperature=temperature,
            top_k=top_k,
        )
        key = jax.random.PRNGKey(seed)
        if self.cached:
            caches = self.practical.empty_caches(self.config, 1)
            new = generation.generate(
                params, caches, jnp.asarray(ids), key, step=self.step, **knobs
            ).ids
        else:
            apply, window = self.funcs.model_fw.apply, self.config.max_len
            new = generation.generate_recomputing(
                params, jnp.asarray(ids), key, apply=apply, window=window, **knobs
            ).ids
        stop_id = None if stop is None else int(self.vocab.encode(stop)[0])
        return self.vocab.decode(generation.stop_at(np.asarray(new[0]), stop_id))
