"""Losses and metrics of the course's tasks, and what a task hands the training loop.

An :class:`Objective` says how the loop scores a batch: a loss and an accuracy *per row*
(the loop weighs rows, so padding rows of a partial batch count for nothing), and whether
the task has a 2x2 confusion matrix. :data:`BINARY` is sentiment classification (one logit
per review), :data:`TOKENS` a label per token (the reverse-sequence task).
"""

from __future__ import annotations

import functools
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


class Objective(NamedTuple):
    """What a task gives the loop: per-row loss and accuracy ``(B,)``, and whether its
    evaluation has a 2x2 confusion matrix (binary labels)."""

    row_loss: Callable[[jax.Array, jax.Array], jax.Array]
    row_accuracy: Callable[[jax.Array, jax.Array], jax.Array]
    binary: bool

    def weighted_sums(
        self, logits: jax.Array, labels: jax.Array, weights: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """``(loss_sum, hits)``: the row losses and row accuracies summed with ``weights``
        ``(B,)`` (0 for a padding row), what a training step adds up over its batch."""
        loss_sum = (self.row_loss(logits, labels) * weights).sum()
        return loss_sum, (self.row_accuracy(logits, labels) * weights).sum()


BINARY = Objective(binary_row_loss, binary_row_accuracy, binary=True)
TOKENS = Objective(token_row_loss, token_row_accuracy, binary=False)


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
    return objective.row_loss(logits, labels).mean(), objective.row_accuracy(logits, labels).mean()


def score(objective: Objective, logits: np.ndarray, labels: np.ndarray) -> EvalResult:
    """Mean accuracy and loss of ``logits`` ``(N, ...)`` over a whole split."""
    logits32 = np.asarray(logits, np.float32)
    loss, accuracy = _mean_loss_and_accuracy(objective, logits32, np.asarray(labels))
    confusion = confusion_matrix(labels, logits) if objective.binary else None
    return EvalResult(float(accuracy), float(loss), confusion, int(len(labels)))
