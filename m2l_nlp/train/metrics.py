"""Losses and metrics of the course's tasks, and what a task hands the training loop.

An :class:`Objective` says how the loop scores a batch: a loss and an accuracy per row, or
per token (:attr:`Objective.per_token`), which the loop weighs so that padding counts for
nothing, and whether the task has a 2x2 confusion matrix. :data:`BINARY` is sentiment
classification (one logit per review), :data:`TOKENS` a label per token scored per row (the
reverse-sequence task), :data:`NEXT_CHAR` the next character at every position (practical
3's language model; its loss is in bits), :data:`TARGET_TOKENS` every token of a
translation (practical 3's translator).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax


def binary_row_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Binary cross-entropy per review ``(B,)`` of logits ``(B,)``, labels in {0, 1}."""
    return optax.sigmoid_binary_cross_entropy(logits, labels.astype(logits.dtype))


def binary_row_accuracy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """1.0 where the sign of the logit ``(B,)`` matches the label, else 0.0."""
    return ((logits > 0) == (labels > 0)).astype(jnp.float32)


def token_row_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean cross-entropy over the tokens of each row: logits ``(B, L, C)``, labels ``(B, L)``."""
    return optax.softmax_cross_entropy_with_integer_labels(logits, labels).mean(axis=-1)


def token_row_accuracy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Fraction of the tokens of each row ``(B,)`` whose arg-max is the label."""
    return (jnp.argmax(logits, axis=-1) == labels).mean(axis=-1, dtype=jnp.float32)


def next_char_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Cross-entropy in bits per position ``(B, S)`` of logits ``(B, S, V)`` against the next
    characters ``labels (B, S)``; a label of -1 (nothing to predict) gets 0."""
    nats = optax.softmax_cross_entropy_with_integer_labels(logits, jnp.maximum(labels, 0))
    return jnp.where(labels >= 0, nats / math.log(2), 0.0)


def next_char_accuracy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """1.0 per position ``(B, S)`` whose arg-max is the next character, else 0.0."""
    return (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)


class Objective(NamedTuple):
    """What a task gives the loop: loss and accuracy per row ``(B,)`` (or per token
    ``(B, S)`` with ``per_token``, where a label of -1 counts for nothing), and whether its
    evaluation has a 2x2 confusion matrix (binary labels)."""

    row_loss: Callable[[jax.Array, jax.Array], jax.Array]
    row_accuracy: Callable[[jax.Array, jax.Array], jax.Array]
    binary: bool
    per_token: bool = False
    loss_name: str = "loss"  # in the epochs' log lines

    def weights(self, labels: jax.Array, row_weights: jax.Array) -> jax.Array:
        """The weights of the losses: ``row_weights (B,)`` as they are, or per token
        ``(B, S)``: the row's weight where the label is a character (>= 0), else 0."""
        if not self.per_token:
            return row_weights
        return row_weights[:, None] * (labels >= 0).astype(row_weights.dtype)

    def weighted_sums(
        self, logits: jax.Array, labels: jax.Array, weights: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """``(loss_sum, hits)``: the losses and accuracies summed with ``weights`` (see
        :meth:`weights`; 0 for padding), what a training step adds up over its batch."""
        loss_sum = (self.row_loss(logits, labels) * weights).sum()
        return loss_sum, (self.row_accuracy(logits, labels) * weights).sum()


BINARY = Objective(binary_row_loss, binary_row_accuracy, binary=True)
TOKENS = Objective(token_row_loss, token_row_accuracy, binary=False)
NEXT_CHAR = Objective(
    next_char_loss, next_char_accuracy, binary=False, per_token=True, loss_name="bits/char"
)
# practical 3's translator: every target token scored, in bits, padding (label -1) not
TARGET_TOKENS = NEXT_CHAR._replace(loss_name="bits/token")


def confusion_matrix(labels: np.ndarray, logits: np.ndarray) -> np.ndarray:
    """2x2 counts on the host: rows the true label (0 neg, 1 pos), columns the predicted one."""
    counts = np.zeros((2, 2), np.int64)
    np.add.at(counts, (np.asarray(labels, np.int64), (np.asarray(logits) > 0).astype(np.int64)), 1)
    return counts


class EvalResult(NamedTuple):
    """Accuracy, loss and (binary tasks) the 2x2 confusion matrix ``[true, predicted]``."""

    accuracy: float
    loss: float
    confusion: np.ndarray | None
    count: int


@functools.partial(jax.jit, static_argnums=0)
def _mean_loss_and_accuracy(objective: Objective, logits: jax.Array, labels: jax.Array):
    # one program per objective and split size, where eager operations would compile one each
    if not objective.per_token:
        return objective.row_loss(logits, labels).mean(), objective.row_accuracy(
            logits, labels
        ).mean()
    weights = objective.weights(labels, jnp.ones(labels.shape[:1], jnp.float32))
    total = jnp.maximum(weights.sum(), 1.0)
    loss = (objective.row_loss(logits, labels) * weights).sum() / total
    return loss, (objective.row_accuracy(logits, labels) * weights).sum() / total


def score(objective: Objective, logits: np.ndarray, labels: np.ndarray) -> EvalResult:
    """Mean accuracy and loss of ``logits`` ``(N, ...)`` over a whole split."""
    logits32 = np.asarray(logits, np.float32)
    loss, accuracy = _mean_loss_and_accuracy(objective, logits32, np.asarray(labels))
    confusion = confusion_matrix(labels, logits) if objective.binary else None
    return EvalResult(float(accuracy), float(loss), confusion, int(len(labels)))
