"""The reverse-sequence task: a sanity check that practical 2's encoder can learn to attend.

The input is a random sequence of digits, the target the same sequence reversed: the output
at position ``i`` is the input at position ``L - 1 - i``. An encoder-only model (embedding,
positional encoding, the practical-2 ``TransformerEncoder``, and a linear layer per token
over the digits) can only solve it by attending from position ``i`` to position
``L - 1 - i``, so once trained its attention maps show an anti-diagonal. Without a working
attention, or without positional encoding, it stays near chance (``1 / num_digits``).

    result = train_reverse(impl="solutions")         # ~10 s on a laptop CPU
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

from m2l_nlp.impl import load_practical

PRACTICAL2 = "practical2_transformers"


@dataclasses.dataclass(frozen=True)
class ReverseConfig:
    """Sizes and training settings of the reverse-sequence model."""

    num_digits: int = 10
    seq_len: int = 16
    num_layers: int = 1
    num_heads: int = 1
    d_model: int = 32
    d_ff: int = 64
    p_dropout: float = 0.0
    batch_size: int = 128
    steps: int = 400
    learning_rate: float = 5e-3
    seed: int = 0

    def __post_init__(self) -> None:
        if self.num_digits < 2 or self.seq_len < 2:
            raise ValueError("num_digits and seq_len must be at least 2")
        if self.steps < 1 or self.batch_size < 1:
            raise ValueError("steps and batch_size must be positive")


def reverse_batch(
    rng: np.random.Generator, batch_size: int, seq_len: int, num_digits: int = 10
) -> tuple[np.ndarray, np.ndarray]:
    """Random digit sequences and their reversals: ``(inputs, targets)``, int32 ``(B, L)``."""
    inputs = rng.integers(0, num_digits, size=(batch_size, seq_len)).astype(np.int32)
    return inputs, inputs[:, ::-1].copy()


def make_forward(
    config: ReverseConfig, impl: str = "solutions", module: Any = None
) -> Callable[..., Any]:
    """Stateful forward ``(inputs (B, L), is_train, return_maps=False)``.

    Returns the logits ``(B, L, num_digits)``, or with ``return_maps`` the attention maps of
    every block (a list of ``(B, h, L, L)``). The encoder and the positional encoding are
    ``<impl>/practical2_transformers.py``'s (a student's, or the reference), or those of
    ``module`` if given: anything with ``TransformerEncoder`` and ``PositionalEncoding``
    attributes (in a notebook: ``sys.modules["__main__"]``).
    """
    p2 = module if module is not None else load_practical(PRACTICAL2, impl)

    def forward(inputs: jax.Array, is_train: bool = True, return_maps: bool = False):
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
        mask = jnp.ones(inputs.shape, jnp.int32)
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
    model: hk.Transformed
    losses: list[float]
    accuracy: float
    sequence_accuracy: float
    seconds: float

    def predict(self, inputs: np.ndarray) -> np.ndarray:
        """Predicted digits ``(B, L)`` for ``inputs`` ``(B, L)``."""
        logits = self.model.apply(self.params, None, jnp.asarray(inputs), False)
        return np.asarray(jnp.argmax(logits, axis=-1))

    def attention_maps(self, inputs: np.ndarray) -> list[jax.Array]:
        """Attention weights of every block for ``inputs``: a list of ``(B, h, L, L)``."""
        return self.model.apply(self.params, None, jnp.asarray(inputs), False, True)


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
    """Train the reverse-sequence model with Adam on fresh random batches every step
    (``impl`` and ``module`` as in :func:`make_forward`)."""
    import optax

    config = config or ReverseConfig()
    start = time.perf_counter()
    model = hk.transform(make_forward(config, impl, module))
    rng = np.random.default_rng(config.seed)
    inputs, _ = reverse_batch(rng, config.batch_size, config.seq_len, config.num_digits)
    params = model.init(jax.random.PRNGKey(config.seed), jnp.asarray(inputs), True)
    schedule = optax.warmup_cosine_decay_schedule(
        0.0, config.learning_rate, min(50, config.steps // 5 + 1), config.steps
    )
    optimizer = optax.adam(schedule)
    opt_state = optimizer.init(params)

    @jax.jit
    def step(params, opt_state, key, inputs, targets):
        def loss_fn(p):
            logits = model.apply(p, key, inputs, True)
            return optax.softmax_cross_entropy_with_integer_labels(logits, targets).mean()

        loss, grads = jax.value_and_grad(loss_fn)(params)
        updates, opt_state = optimizer.update(grads, opt_state, params)
        return optax.apply_updates(params, updates), opt_state, loss

    key = jax.random.PRNGKey(config.seed + 1)
    losses = []
    for i in range(config.steps):
        inputs, targets = reverse_batch(rng, config.batch_size, config.seq_len, config.num_digits)
        key, sub = jax.random.split(key)
        params, opt_state, loss = step(params, opt_state, sub, inputs, targets)
        losses.append(loss)
        if log and (i + 1) % 100 == 0:
            log(f"step {i + 1}: loss {float(loss):.4f}")
    losses = [float(x) for x in jax.device_get(losses)]
    predict = jax.jit(lambda p, x: jnp.argmax(model.apply(p, None, x, False), axis=-1))
    accuracy, seq_accuracy = evaluate_reverse(
        lambda x: np.asarray(predict(params, jnp.asarray(x))), config
    )
    return ReverseResult(
        config=config,
        params=params,
        model=model,
        losses=losses,
        accuracy=accuracy,
        sequence_accuracy=seq_accuracy,
        seconds=time.perf_counter() - start,
    )


def anti_diagonal_mass(weights: np.ndarray) -> float:
    """Mean attention weight on the anti-diagonal (query ``i`` -> key ``L - 1 - i``) of
    ``(..., L, L)`` maps: 1.0 for a perfect reversal pattern, ``1 / L`` for uniform attention."""
    w = np.asarray(weights)
    length = w.shape[-1]
    return float(w[..., np.arange(length), np.arange(length)[::-1]].mean())
