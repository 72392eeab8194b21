"""A toy kind of run, added as the README says: do 0s or 1s win in a string of digits?

Its data are drawn here, its model is a bag of digits, and its checkpoint is read by a
command of its own, ``m2l-nlp majority``. tests/e2e/test_contributor_new_practical.py copies
this file to m2l_nlp/runs/majority.py in a scratch copy of the course.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp.config import MajorityConfig, Preset
from m2l_nlp.data.characters import CharVocab
from m2l_nlp.runs.checkpoint import CHARACTERS, CheckpointKind, load_checkpoint, save_run
from m2l_nlp.runs.kinds import Context, Kind, Setup, test_scores
from m2l_nlp.train import metrics
from m2l_nlp.train.metrics import EvalResult
from m2l_nlp.transform import ModelFuncs, funcs_from_stateful

NAME = "majority"
VOCAB = CharVocab("01")


class Digits(NamedTuple):
    train: tuple[np.ndarray, np.ndarray, np.ndarray]
    val: tuple[np.ndarray, np.ndarray, np.ndarray]
    test: tuple[np.ndarray, np.ndarray, np.ndarray]


def encode(texts: list[str], width: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.zeros((len(texts), width), np.int32)
    for row, text in zip(ids, texts, strict=True):
        row[: len(text)] = VOCAB.encode(text[:width])
    return ids, (ids != 0).astype(np.int32)


def draw(rng: np.random.Generator, n: int, width: int) -> tuple[np.ndarray, ...]:
    """``n`` strings of 0s and 1s of odd lengths up to ``width``; label 1 where 1s win."""
    texts = ["".join(rng.choice(["0", "1"], 2 * rng.integers(1, width // 2) + 1)) for _ in range(n)]
    labels = np.array([text.count("1") > len(text) // 2 for text in texts], np.int32)
    return (*encode(texts, width), labels)


def model(config: MajorityConfig) -> ModelFuncs:
    def forward(ids, mask, is_train=True):
        rows = hk.Embed(config.vocab_size, config.d_model)(ids) * mask[..., None]
        return hk.Linear(1)(rows.sum(axis=1))[..., 0]

    return funcs_from_stateful(forward)


class Majority(Kind):
    name = NAME
    checkpoint = CheckpointKind(
        MajorityConfig,
        CHARACTERS,
        "a majority vote",
        "count digits with",
        "majority",
        "majority",
        "seconds of CPU time",
        "runs/majority/checkpoint",
    )

    def prepare(self, request) -> Digits:
        rng = np.random.default_rng(request.seed)
        width = request.preset.seq_len
        return Digits(*(draw(rng, n, width) for n in (512, 128, 128)))

    def setup(self, preset: Preset, data: Digits, run: Context) -> Setup:
        config = preset.model_config(VOCAB.size)
        funcs = model(config)
        ids = np.ones((1, config.max_len), np.int32)
        params = funcs.init_params(jax.random.PRNGKey(run.seed), ids, ids, True)
        return Setup(
            funcs, params, config, data.train, data.val, metrics.BINARY, fingerprint={}, metrics={}
        )

    def finish(
        self, setup: Setup, params: Any, validation: EvalResult | None, data: Digits, run: Context
    ) -> dict[str, Any]:
        if run.no_test:
            return {}
        test = test_scores(setup, params, data.test, run)
        return {"test": test, "test_accuracy": test.accuracy}

    def save(self, out: Path, result, data: Digits, run: Context) -> None:
        save_run(out, result, run.settings, VOCAB, checkpoint=not run.no_test)

    def summary(self, result) -> list[str]:
        return [f"test accuracy: {result.test.accuracy:.4f}"]


KIND = Majority()


def count(args: argparse.Namespace) -> int:
    checkpoint = load_checkpoint(Path(args.checkpoint), NAME)
    ids, mask = encode(args.digits, checkpoint.config.max_len)
    logits = model(checkpoint.config).predict_fw(checkpoint.params, ids, mask)
    for digits, logit in zip(args.digits, np.asarray(jnp.asarray(logits)), strict=True):
        print(f"{digits}: {'1s' if logit > 0 else '0s'} win")
    return 0


def add_command(sub) -> None:
    command = sub.add_parser(NAME, help="do 0s or 1s win? (a toy kind of run)")
    command.add_argument("digits", nargs="+")
    command.add_argument("--checkpoint", default="runs/majority/checkpoint")
    command.set_defaults(run=count)
