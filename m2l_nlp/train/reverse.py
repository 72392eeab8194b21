"""The reverse-sequence task: a sanity check that practical 2's encoder can learn to attend.

The input is a random sequence of digits, the target the same sequence reversed: the output
at position ``i`` is the input at position ``L - 1 - i``. An encoder-only model (embedding,
positional encoding, the practical-2 ``TransformerEncoder``, and a linear layer per token
over the digits) can only solve it by attending from position ``i`` to position
``L - 1 - i``, so once trained its attention maps show an anti-diagonal. Without a working
attention, or without positional encoding, it stays near chance (``1 / num_digits``).

    result = train_reverse(impl="solutions")         # 16 s of CPU time, measured
    result.accuracy                                   # token accuracy on fresh sequences
    maps = result.attention_maps(inputs)              # list of (B, h, L, L)
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp.config import ReverseConfig
from m2l_nlp.impl import load_practical
from m2l_nlp.train import loop as training
from m2l_nlp.train import metrics
from m2l_nlp.transform import ModelFuncs, funcs_from_stateful

PRACTICAL2 = "practical2_transformers"


def reverse_batch(
    rng: np.random.Generator, batch_size: int, seq_len: int, num_digits: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Random digit sequences and their reversals: ``(inputs, targets)``, int32 ``(B, L)``."""
    inputs = rng.integers(0, num_digits, size=(batch_size, seq_len)).astype(np.int32)
    return inputs, inputs[:, ::-1].copy()


def make_forward(
    config: ReverseConfig, impl: str = "solutions", module: Any = None
) -> Callable[..., Any]:
    """Stateful forward ``(inputs (B, L), mask (B, L), is_train=True, return_maps=False)``.

    Returns the logits ``(B, L, num_digits)``, or with ``return_maps`` the attention maps of
    every block (a list of ``(B, h, L, L)``). The encoder and the positional encoding are
    ``<impl>/practical2_transformers.py``'s (a student's, or the reference), or those of
    ``module`` if given: anything with ``TransformerEncoder`` and ``PositionalEncoding``
    attributes (in a notebook: ``sys.modules["__main__"]``).
    """
    p2 = module if module is not None else load_practical(PRACTICAL2, impl)

    def forward(
        inputs: jax.Array, mask: jax.Array, is_train: bool = True, return_maps: bool = False
    ):
        embed = hk.Embed(config.num_digits, config.d_model, name="embed")
        positional = p2.PositionalEncoding(
            config.d_model, config.seq_len, config.p_dropout, name="positional"
        )
        encoder = p2.TransformerEncoder(
            config.num_layers,
            config.num_heads,
            config.d_model,
            config.d_ff,
            config.p_dropout,
            name="encoder",
        )
        head = hk.Linear(config.num_digits, name="head")
        x = positional(embed(inputs), is_train)
        if return_maps:
            return encoder.get_attention_maps(x, mask, is_train=False)
        return head(encoder(x, mask, is_train))

    return forward


@dataclasses.dataclass
class ReverseResult:
    """A trained reverse-sequence model and how well it does on fresh sequences."""

    config: ReverseConfig
    params: hk.Params
    model: ModelFuncs
    losses: list[float]  # mean training loss per epoch
    accuracy: float
    sequence_accuracy: float
    seconds: float

    def predict(self, inputs: np.ndarray) -> np.ndarray:
        """Predicted digits ``(B, L)`` for ``inputs`` ``(B, L)``."""
        inputs = jnp.asarray(inputs)
        logits = self.model.predict_fw(self.params, inputs, jnp.ones_like(inputs))
        return np.asarray(jnp.argmax(logits, axis=-1))

    def attention_maps(self, inputs: np.ndarray) -> list[jax.Array]:
        """Attention weights of every block for ``inputs``: a list of ``(B, h, L, L)``."""
        inputs = jnp.asarray(inputs)
        return self.model.predict_fw(self.params, inputs, jnp.ones_like(inputs), return_maps=True)


def evaluate_reverse(
    predict: Callable[[np.ndarray], np.ndarray],
    config: ReverseConfig,
    num_sequences: int = 1000,
    seed: int = 12345,
) -> tuple[float, float]:
    """``(token accuracy, whole-sequence accuracy)`` on fresh random sequences."""
    inputs, targets = reverse_batch(
        np.random.default_rng(seed), num_sequences, config.seq_len, config.num_digits
    )
    correct = predict(inputs) == targets
    return float(correct.mean()), float(correct.all(axis=1).mean())


def train_reverse(
    config: ReverseConfig | None = None,
    impl: str = "solutions",
    log: Callable[[str], None] | None = None,
    module: Any = None,
) -> ReverseResult:
    """Train the reverse-sequence model with the course's loop (``impl`` and ``module`` as in
    :func:`make_forward`): ``config.steps`` batches of random sequences over
    ``config.epochs`` epochs, a cross-entropy per token (:data:`m2l_nlp.train.metrics.TOKENS`)."""
    config = config or ReverseConfig()
    start = time.perf_counter()
    funcs = funcs_from_stateful(make_forward(config, impl, module))
    rng = np.random.default_rng(config.seed)
    count = max(config.batch_size, config.steps * config.batch_size // config.epochs)
    inputs, targets = reverse_batch(rng, count, config.seq_len, config.num_digits)
    mask = np.ones_like(inputs)
    params = funcs.init_params(jax.random.PRNGKey(config.seed), inputs[:1], mask[:1], True)
    result = training.train(
        funcs,
        params,
        (inputs, mask, targets),
        config.settings(),
        objective=metrics.TOKENS,
        progress=False,
        log=log,
    )
    trained = ReverseResult(config, result.params, funcs, result.history["loss"], 0.0, 0.0, 0.0)
    trained.accuracy, trained.sequence_accuracy = evaluate_reverse(trained.predict, config)
    trained.seconds = time.perf_counter() - start
    return trained


def anti_diagonal_mass(weights: np.ndarray) -> float:
    """Mean attention weight on the anti-diagonal (query ``i`` -> key ``L - 1 - i``) of
    ``(..., L, L)`` maps: 1.0 for a perfect reversal pattern, ``1 / L`` for uniform attention."""
    w = np.asarray(weights)
    length = w.shape[-1]
    return float(w[..., np.arange(length), np.arange(length)[::-1]].mean())
