"""What the check modules of practical 2 share: the practical's name, the sizes of every
input, padding masks, and the comparison of a student's haiku module with the reference on
perturbed parameters."""

from __future__ import annotations

import numpy as np

from m2l_nlp.data.masks import padding_mask
from m2l_nlp.grading.checks import tools
from m2l_nlp.grading.checks.registry import exercises

PRACTICAL = "practical2_transformers"

# fmt: off
# The practical's exercises, one row each: name, points, targets (what the student writes),
# uses (earlier targets they call, replaced by the reference's while graded), title.
EXERCISES = exercises(PRACTICAL, (
    ("scaled_dot_product", 15, ("scaled_dot_product",), (),
     "softmax(Q K^T / sqrt(d_k)) V with an optional mask"),
    ("masked_embedding", 5, ("MaskedEmbedding",), (),
     "token embedding with zero vectors at padding"),
    ("multihead_attention", 20, ("MultiheadAttention",), ("scaled_dot_product",),
     "h heads of scaled dot-product attention with learned projections"),
    ("positionwise_feed_forward", 10, ("PositionwiseFeedForward",), (),
     "Linear(d_ff), ReLU, dropout while training, Linear(d_model)"),
    ("encoder_block", 15, ("EncoderBlock",), ("MultiheadAttention", "PositionwiseFeedForward"),
     "x = LayerNorm(x + Dropout(SubLayer(x))) for attention, then feed-forward"),
    ("transformer_encoder", 10, ("TransformerEncoder",), ("EncoderBlock",),
     "a stack of encoder blocks, and its attention maps"),
    ("positional_encoding", 15, ("sinusoidal_encoding", "PositionalEncoding"), (),
     "the sinusoidal position table, added to the token vectors"),
    ("classifier", 10, ("masked_pool", "TransformerClassifier"),
     ("MaskedEmbedding", "PositionalEncoding", "TransformerEncoder"),
     "masked pooling and the full classifier (one logit per review)"),
))
# fmt: on

B, S, D, H, FF = 2, 5, 12, 3, 20  # d_head = 4 != H, so a head split in the wrong order shows

# The axes of the main replies, named in the message when a student's reply does not fit the
# reference's (m2l_nlp.grading.checks.replies): a function's entry is its axes; a build's,
# keyed "module.build", the module it runs and its axes (a tuple: one per item of a tuple).
REPLY_AXES = {
    "scaled_dot_product": ("(..., Sq, Dv)", "(..., Sq, Sk)"),
    "sinusoidal_encoding": "(max_len, D)",
    "masked_pool": "(B, D)",
    "attention._emb": ("MaskedEmbedding", "(B, S, D)"),
    "attention._mha": ("MultiheadAttention", ("(B, Sq, D)", "(B, h, Sq, Sk)")),
    "blocks._ffn": ("PositionwiseFeedForward", "(B, S, D)"),
    "blocks._block": ("EncoderBlock", ("(B, S, D)", "(B, h, S, S)")),
    "blocks._encoder": ("TransformerEncoder", "(B, S, D)"),
    "positional._pe": ("PositionalEncoding", "(B, S, D)"),
    "classifier._clf": ("TransformerClassifier", "(B,)"),
}

VOCAB, E = 30, D  # the same sizes everywhere: JAX compiles each operation once


def _mask(rng: np.random.Generator, batch: int, length: int, min_valid: int = 1) -> np.ndarray:
    """A padding mask `(batch, length)` of 1s then 0s, with at least `min_valid` ones."""
    lengths = rng.integers(min_valid, length + 1, size=batch)
    lengths[0] = length  # one full row
    if batch > 1:
        lengths[-1] = max(min_valid, length - 2)  # one padded row
    return padding_mask(lengths, length)


def vectors_and_mask(rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """A block's inputs: token vectors `(B, S, D)` and a padding mask `(B, S)`."""
    return tools.normal(rng, B, S, D), _mask(rng, B, S)


def ids_and_mask(rng, batch=B, length=S):
    ids = rng.integers(1, VOCAB, size=(batch, length)).astype(np.int32)
    mask = _mask(rng, batch, length)
    ids[mask == 0] = 0
    return ids, mask
