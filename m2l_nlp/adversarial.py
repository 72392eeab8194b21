"""Adversarial training on the token embeddings (the ``train.adversarial`` setting).

Each review's token vectors, the output of practical 2's ``MaskedEmbedding`` (``(B, W, D)``,
before the positions are added), are moved a little in the direction that raises that
review's loss the most, and the loss at the moved point is added to the clean one:

    g_b = d loss_b / d e_b,   r_b = alpha * |e_b| * g_b / |g_b|,
    loss = sum over b of loss_b(e_b) + loss_b(e_b + r_b)

with the norms over review ``b``'s ``(W, D)`` values, so the step is a fixed share of the
review's own vectors (the model cannot make it small by growing its embeddings). Both
passes use the same dropout key. The step costs two gradients instead of one. The students'
modules are untouched: a haiku method interceptor adds ``r`` to the embedding's output.
"""

from __future__ import annotations

from collections.abc import Callable

import haiku as hk
import jax
import jax.numpy as jnp

from m2l_nlp.metrics import Objective

EMBEDDING = "MaskedEmbedding"  # practical 2's module whose output is perturbed


def _embedding_width(params: hk.Params) -> int:
    widths = {
        leaves["embeddings"].shape[-1] for leaves in params.values() if "embeddings" in leaves
    }
    if len(widths) != 1:
        raise ValueError(
            "train.adversarial needs a model with one token embedding table (practical 2's "
            "transformer): set train.adversarial=0 for this model"
        )
    return widths.pop()


def embedding_loss(apply: Callable, objective: Objective) -> Callable:
    """``loss(params, delta, key, ids, mask, labels, weights) -> (loss_sum, (hits, norms))``:
    the weighted row-loss sum of ``apply`` in training mode with ``delta`` (``(B, W, D)``,
    zero at padding) added to the embedding's output; ``norms`` (``(B,)``) are the norms of
    each review's embedding output. Raises ``ValueError`` for a model without one
    ``MaskedEmbedding`` call."""

    def loss(params, delta, key, ids, mask, labels, weights):
        seen = []

        def add_delta(next_f, args, kwargs, context):
            out = next_f(*args, **kwargs)
            if type(context.module).__name__ == EMBEDDING and context.method_name == "__call__":
                seen.append(out)
                return out + delta * mask[..., None].astype(out.dtype)
            return out

        with hk.intercept_methods(add_delta):
            logits = apply(params, key, ids, mask, True)
        if len(seen) != 1:
            raise ValueError(
                f"train.adversarial perturbs the output of practical 2's {EMBEDDING}, which "
                f"this model called {len(seen)} times: set train.adversarial=0 for it"
            )
        norms = jnp.sqrt(jnp.sum(jnp.square(seen[0]), axis=(-2, -1)))
        total, hits = objective.weighted_sums(logits, labels, weights)
        return total, (hits, jax.lax.stop_gradient(norms))

    return loss


def _clean(loss: Callable, params, batch):
    zeros = jnp.zeros((*batch[1].shape, _embedding_width(params)), jnp.float32)
    return jax.value_and_grad(loss, argnums=(0, 1), has_aux=True)(params, zeros, *batch)


def _step(g: jax.Array, norms: jax.Array, alpha: float) -> jax.Array:
    size = jnp.sqrt(jnp.sum(jnp.square(g), axis=(-2, -1)))
    return jax.lax.stop_gradient(g * (alpha * norms / jnp.maximum(size, 1e-12))[:, None, None])


def perturbation(apply: Callable, objective: Objective, alpha: float) -> Callable:
    """``r(params, key, ids, mask, labels, weights) -> (B, W, D)``: each review's step of
    norm ``alpha * |e_b|`` along the gradient of its loss with respect to its embedding."""
    loss = embedding_loss(apply, objective)

    def r(params, *batch):
        (_, (_, norms)), (_, g) = _clean(loss, params, batch)
        return _step(g, norms, alpha)

    return r


def value_and_grad(apply: Callable, objective: Objective, alpha: float) -> Callable:
    """``f(params, key, ids, mask, labels, weights) -> ((loss_sum, hits), grads)``, as
    ``jax.value_and_grad`` of the weighted row-loss sum with ``has_aux`` gives it, with the
    gradient of the loss at the moved embeddings added (the sums are the clean pass's)."""
    loss = embedding_loss(apply, objective)
    moved_grad = jax.grad(loss, has_aux=True)

    def grads(params, *batch):
        (total, (hits, norms)), (grads, g) = _clean(loss, params, batch)
        moved, _ = moved_grad(params, _step(g, norms, alpha), *batch)
        return (total, hits), jax.tree_util.tree_map(jnp.add, grads, moved)

    return grads
