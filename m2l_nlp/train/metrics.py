"""Losses and metrics of the course's tasks, and what a task hands the training loop.

An :class:`Objective` says how the loop scores a batch: a loss and an accuracy per row, or
per token (:attr:`Objective.per_token`), weighted so that padding counts for nothing, and
whether the task has a 2x2 confusion matrix. :data:`BINARY` is sentiment classification
(one logit per review), :data:`TOKENS` a label per token scored per row (the
reverse-sequence task). Practical 3's tasks are scored per token by the practical's own
losses, in bits: :func:`next_token_objective` (the language model's ``next_token_loss``)
and :func:`sequence_objective` (the translator's ``sequence_loss``).
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


def token_accuracy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """1.0 per position ``(B, S)`` whose arg-max is the label, else 0.0."""
    return (jnp.argmax(logits, axis=-1) == labels).astype(jnp.float32)


def token_cross_entropy(logits: jax.Array, labels: jax.Array, weights: jax.Array) -> jax.Array:
    """Mean cross-entropy (nats) of ``logits (B, S, V)`` against ``labels (B, S)`` over the
    positions weighted 1 by ``weights (B, S)`` (0 when none is)."""
    nats = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    weights = weights.astype(nats.dtype)
    return (nats * weights).sum() / jnp.maximum(weights.sum(), 1.0)


class NextTokens(NamedTuple):
    """A practical's ``next_token_loss(logits, input_ids, mask)`` (each position scored
    against the id after it) as a loss of labels: each position's label is its next token,
    so ids with those labels one column later, and the logits one position longer (the last
    has nothing after it), give that function the labels as its targets."""

    next_token_loss: Callable[[jax.Array, jax.Array, jax.Array], jax.Array]

    def __call__(self, logits: jax.Array, labels: jax.Array, weights: jax.Array) -> jax.Array:
        front = [(0, 0), (1, 0)]
        ids = jnp.pad(labels, front)
        mask = jnp.pad(weights, front)
        return self.next_token_loss(jnp.pad(logits, [(0, 0), (0, 1), (0, 0)]), ids, mask)


class Objective(NamedTuple):
    """What a task gives the loop: how its batch is scored, and whether its evaluation has
    a 2x2 confusion matrix (binary labels).

    A row task's ``loss`` and ``accuracy`` give one value per row ``(B,)``. A ``per_token``
    task's ``loss(logits, labels, weights)`` is the mean loss (nats) over the tokens that
    count (``weights (B, S)``: 1 where there is a label, 0 for padding), a practical's own
    loss function, and its ``accuracy`` one value per token."""

    loss: Callable[..., jax.Array]
    accuracy: Callable[[jax.Array, jax.Array], jax.Array]
    binary: bool
    per_token: bool = False
    loss_name: str = "loss"  # in the epochs' log lines
    scale: float = 1.0  # the unit of the reported loss: 1 / ln 2 gives bits

    def weights(self, row_weights: jax.Array, token_weights: jax.Array | None) -> jax.Array:
        """The weights of the losses: ``row_weights (B,)`` (0 for the rows that fill up a
        batch), times the data's ``token_weights (B, S)`` for a per-token task."""
        if token_weights is None:
            return row_weights
        return row_weights[:, None] * token_weights.astype(row_weights.dtype)

    def weighted_sums(
        self, logits: jax.Array, labels: jax.Array, weights: jax.Array
    ) -> tuple[jax.Array, jax.Array]:
        """``(loss_sum, hits)``: the losses and accuracies summed with ``weights`` (see
        :meth:`weights`), what a training step adds up over its batch."""
        hits = (self.accuracy(logits, labels) * weights).sum()
        if not self.per_token:
            return (self.loss(logits, labels) * weights).sum(), hits
        # the practical's mean over the weights, back to a sum: the loop divides once
        return self.loss(logits, labels, weights) * weights.sum() * self.scale, hits

    def as_scored(self) -> Objective:
        """The objective a run's figures are read with: a per-token task's loss is the
        course's cross-entropy (:func:`token_cross_entropy`), not the practical's, so that a
        loss function that trains is never also the judge of the result."""
        return self._replace(loss=token_cross_entropy) if self.per_token else self


BINARY = Objective(binary_row_loss, binary_row_accuracy, binary=True)
TOKENS = Objective(token_row_loss, token_row_accuracy, binary=False)


def next_token_objective(next_token_loss: Callable) -> Objective:
    """Practical 3's language model, trained on its own ``next_token_loss``; in bits."""
    loss = NextTokens(next_token_loss)
    return Objective(
        loss, token_accuracy, False, per_token=True, loss_name="bits/char", scale=1 / math.log(2)
    )


def sequence_objective(sequence_loss: Callable) -> Objective:
    """Practical 3's translator, trained on its own ``sequence_loss``; in bits."""
    return Objective(
        sequence_loss,
        token_accuracy,
        False,
        per_token=True,
        loss_name="bits/token",
        scale=1 / math.log(2),
    )


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
    return objective.loss(logits, labels).mean(), objective.accuracy(logits, labels).mean()


def score(objective: Objective, logits: np.ndarray, labels: np.ndarray) -> EvalResult:
    """Mean accuracy and loss of a row task's ``logits`` ``(N, ...)`` over a whole split."""
    logits32 = np.asarray(logits, np.float32)
    loss, accuracy = _mean_loss_and_accuracy(objective, logits32, np.asarray(labels))
    confusion = confusion_matrix(labels, logits) if objective.binary else None
    return EvalResult(float(accuracy), float(loss), confusion, int(len(labels)))
