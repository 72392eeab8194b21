# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Practical 1: baselines for sentiment classification
#
# Before building a transformer (practical 2) it pays to know how well simple models do on
# the same task. A model that ignores word order entirely, a *bag of words* fed to a small
# MLP, is a surprisingly strong baseline on IMDB: most reviews contain a few words
# ("awful", "masterpiece", "waste") that give the answer away.
#
# The pieces, in the order you write them:
#
# 1. `multi_hot`: a review (a list of token ids) becomes one vector of 0s and 1s over the
#    vocabulary: 1 where the token occurs at least once.
# 2. `bigram_ids` and `bag_of_bigrams`: the same for pairs of neighbouring tokens, so that
#    "not good" and "good" become different features.
# 3. `fit_idf` and `tfidf`: weigh rare, informative features up and common ones down.
# 4. `MLPClassifier`: a small multi-layer perceptron from a feature vector to one logit.
# 5. `LSTMClassifier`: an embedding and a recurrent network (LSTM) that reads the tokens
#    in order, and must not be fooled by the padding at the end of short reviews.
#
# Shapes are written as `N` (or `B`) number of reviews, `S` sequence length, `V`
# vocabulary size, `F` number of features, `E` embedding size, `H` hidden size.
# The token ids come from the tokenizer of `m2l_nlp.data.tokenization`: a batch is an int32 array
# `ids` of shape `(N, S)` padded with id 0 on the right, and a `mask` of the same shape with 1
# on real tokens and 0 on padding. Every exercise has a graded check: run
# `pytest -m <exercise>` locally, or the check cell below it in Colab.

# %%
from __future__ import annotations

from collections.abc import Sequence

import haiku as hk
import jax
import jax.numpy as jnp

# %% [markdown]
# After each exercise, run its `check(...)` cell: it runs the same graded checks as
# `pytest -m <exercise>` on the objects defined in this notebook and says in words what
# is wrong. (These cells, and the training cells at the end, exist only in the notebook.)

# %% active="ipynb"
# from m2l_nlp.grading import check

# %% [markdown]
# ## 1. Multi-hot encoding (bag of words)
#
# For every review, build a vector of length `V` (the vocabulary size) that holds 1 at
# index `t` if token `t` occurs in the review, at least once, and 0 otherwise. Padding is
# not a token of the review: positions where `mask` is 0 must not set anything, whatever id
# they hold.
#
# Example with `V = 6`: `ids = [[3, 1, 3, 0]]`, `mask = [[1, 1, 1, 0]]` gives
# `[[0, 1, 0, 1, 0, 0]]` (token 3 occurs twice but still counts 1; the padding id 0 is not
# counted).
#
# Hints: JAX arrays are immutable; `x.at[rows, cols].max(values)` returns a copy of `x` where
# each `x[rows[i], cols[i]]` becomes the maximum of itself and `values[i]`, and repeated
# indices are combined correctly (`.set` would keep an arbitrary one of them).
# `rows = jnp.arange(N)[:, None]` broadcasts against `ids` of shape `(N, S)`.
# Write the encodings with `jnp`, not NumPy: they must work under `jax.jit`, because the
# training loop computes the features of each batch inside its compiled step.


# %%
def multi_hot(ids: jax.Array, mask: jax.Array, vocab_size: int) -> jax.Array:
    """Bag-of-words vectors: 1 where a token occurs in the review, 0 elsewhere.

    Args:
        ids: token ids, int `(N, S)`, each in `[0, vocab_size)`.
        mask: `(N, S)`, 1 for real tokens, 0 for padding (ignored whatever its id).
        vocab_size: `V`, the length of the output vectors.

    Returns:
        float32 `(N, V)` of 0s and 1s.
    """
    # YOUR CODE HERE
    raise NotImplementedError("multi_hot: not implemented yet")


# %% active="ipynb"
# check("multi_hot", multi_hot)


# %% [markdown]
# ## 2. Bag of bigrams
#
# A bag of words cannot tell "not good, just bad" from "not bad, just good". Pairs of
# neighbouring tokens (bigrams) keep a little of the order. There are `V * V` possible pairs,
# far too many to give each its own feature, so we *hash* them into `num_buckets` buckets:
#
# $$\text{bucket}(a, b) = (a \cdot V + b) \bmod \mathrm{num\_buckets}$$
#
# where `a` is the first token of the pair and `b` the second. Different pairs may share a
# bucket (a collision); with enough buckets this costs little accuracy.
#
# `bigram_ids` returns the bucket of every pair of neighbouring positions `(i, i + 1)`, so
# `S - 1` of them, and a mask that is 1 only where *both* tokens are real (a pair that
# reaches into the padding is not a bigram of the review). Masked pairs get bucket 0.
#
# `bag_of_bigrams` puts the unigrams and the bigrams side by side: the multi-hot vector of
# the tokens (`V` features) followed by the multi-hot vector of the bigram buckets
# (`num_buckets` features). Reuse `multi_hot` for both halves.
#
# Example with `V = 6`, 10 buckets: `ids = [[3, 1, 3, 0]]`, `mask = [[1, 1, 1, 0]]` has the
# pairs (3, 1) -> 19 mod 10 = 9 and (1, 3) -> 9 mod 10 = 9 (a collision), and (3, 0),
# which reaches into the padding. So the buckets are `[[9, 9, 0]]` with mask `[[1, 1, 0]]`.
#
# The products `a * V` stay below 2^31 (the int32 limit) for `V` up to 46,000.


# %%
def bigram_ids(
    ids: jax.Array, mask: jax.Array, vocab_size: int, num_buckets: int
) -> tuple[jax.Array, jax.Array]:
    """Hash the pairs of neighbouring tokens into buckets.

    Args:
        ids: token ids, int `(N, S)`.
        mask: `(N, S)`, 1 for real tokens, 0 for padding.
        vocab_size: `V`; token ids are in `[0, V)`.
        num_buckets: number of buckets.

    Returns:
        `(buckets, pair_mask)`, both int32 `(N, S - 1)`: `buckets[n, i]` is
        `(ids[n, i] * V + ids[n, i + 1]) % num_buckets` where both tokens are real (mask 1),
        and 0 elsewhere; `pair_mask[n, i]` is 1 where both tokens are real.
    """
    # YOUR CODE HERE
    raise NotImplementedError("bigram_ids: not implemented yet")


def bag_of_bigrams(ids: jax.Array, mask: jax.Array, vocab_size: int, num_buckets: int) -> jax.Array:
    """Multi-hot unigrams followed by multi-hot hashed bigrams.

    Args:
        ids: token ids, int `(N, S)`.
        mask: `(N, S)`, 1 for real tokens, 0 for padding.
        vocab_size: `V`.
        num_buckets: number of bigram buckets.

    Returns:
        float32 `(N, V + num_buckets)` of 0s and 1s: columns `[0, V)` are `multi_hot(ids, ...)`,
        columns `[V, V + num_buckets)` the multi-hot vector of the bigram buckets.
    """
    # YOUR CODE HERE
    raise NotImplementedError("bag_of_bigrams: not implemented yet")


# %% active="ipynb"
# check("bag_of_bigrams", bigram_ids, bag_of_bigrams)


# %% [markdown]
# ## 3. TF-IDF weighting
#
# In a multi-hot vector every feature counts the same, yet a token found in almost every
# review ("the", "movie") says little, while a rare one ("unwatchable") says a lot. The
# *inverse document frequency* gives every feature a weight that grows as the feature gets
# rarer. With `N` reviews and `df[f]` the number of reviews in which feature `f` is present
# (non-zero):
#
# $$\text{idf}[f] = \log\frac{1 + N}{1 + \text{df}[f]} + 1$$
#
# (the `1 +` terms avoid a division by zero for a feature never seen, and the final `+ 1`
# keeps features present everywhere from being switched off entirely).
#
# `fit_idf` computes the weights **on the training set only**: the test set plays the role of
# reviews we have never seen, so it must not influence anything we learn, these weights
# included. `tfidf` multiplies each feature by its weight, then scales every row to unit
# length (L2 norm 1), so that long and short reviews are on the same scale. A row of zeros
# (an empty review) stays zeros, without NaN.


# %%
def fit_idf(features: jax.Array) -> jax.Array:
    """Inverse document frequencies of the columns of `features`.

    Args:
        features: `(N, F)`, non-zero where a feature is present in a review.

    Returns:
        float32 `(F,)`: `log((1 + N) / (1 + df)) + 1`, `df` the number of rows where the
        feature is non-zero.
    """
    # YOUR CODE HERE
    raise NotImplementedError("fit_idf: not implemented yet")


def tfidf(features: jax.Array, idf: jax.Array) -> jax.Array:
    """Weigh the features by `idf` `(F,)` and scale each row of `(N, F)` to L2 norm 1.

    Returns:
        float32 `(N, F)`; rows that are all zero stay zero.
    """
    # YOUR CODE HERE
    raise NotImplementedError("tfidf: not implemented yet")


# %% active="ipynb"
# check("tfidf", fit_idf, tfidf)


# %% [markdown]
# ## 4. An MLP classifier
#
# A multi-layer perceptron maps a feature vector to one number, the *logit*: positive means
# "positive review". (The probability of a positive review is `jax.nn.sigmoid(logit)`; the
# loss used to train it is the binary cross-entropy, `optax.sigmoid_binary_cross_entropy`.)
#
# For each size `h` in `hidden_sizes`: a linear layer to `h` features, a ReLU, and dropout
# while training. Then a last linear layer (`head`) to 1 feature, without activation. Return
# one logit per review: shape `(B,)`, not `(B, 1)`.
#
# Dropout sets a random fraction `p_dropout` of the hidden features to zero (and scales the
# others up) while training, so the network cannot rely on any single feature; it is a
# strong defence against overfitting, which a bag of 100,000 features invites. In evaluation
# (`is_train=False`) there is no dropout and no random key.
#
# Hint: `hk.dropout(hk.next_rng_key(), rate, x)`.


# %%
class MLPClassifier(hk.Module):
    """Feature vector -> hidden layers (ReLU, dropout) -> one logit."""

    def __init__(
        self,
        hidden_sizes: Sequence[int] = (64,),
        p_dropout: float = 0.5,
        name: str | None = None,
    ):
        super().__init__(name=name)
        self.p_dropout = p_dropout
        self.hidden = [hk.Linear(size, name=f"hidden_{i}") for i, size in enumerate(hidden_sizes)]
        self.head = hk.Linear(1, name="head")

    def __call__(self, x: jax.Array, is_train: bool = True) -> jax.Array:
        """Logits `(B,)` for features `(B, F)`; dropout after each hidden layer if `is_train`."""
        # YOUR CODE HERE
        raise NotImplementedError("MLPClassifier: not implemented yet")


# %% active="ipynb"
# check("mlp_classifier", MLPClassifier)


# %% [markdown]
# ## 5. An LSTM classifier
#
# A recurrent network reads the review one token at a time and keeps a *state* that
# summarises what it has read so far. The LSTM (long short-term memory) is a recurrent cell
# whose state has two parts, `hidden` and `cell`, and whose gates decide what to keep and
# what to forget; haiku's `hk.LSTM(H)` is one step of it:
# `output, new_state = lstm(x_t, state)` with `x_t` of shape `(B, E)`, and
# `lstm.initial_state(B)` gives the zero state to start from.
#
# The model: embed the tokens `(B, S) -> (B, S, E)`, run the LSTM over the `S` positions, take
# the `hidden` part of the state **after the last real token** of each review, apply dropout
# (training only), and map it to one logit with `head`.
#
# The padding needs care. A review of 50 tokens padded to 600 must get exactly the same
# logit as the same review padded to 100. If the LSTM simply ran on, its state would keep
# changing over the padding. The simplest fix: at a padded step, keep the old state instead
# of the new one, so the state at the end of the sequence is the state after the last real
# token.
#
# Hints:
# - `hk.scan(step, init_state, xs)` loops over the **first** axis of `xs` (which can be a
#   tuple of arrays): move time to the front with `jnp.swapaxes(x, 0, 1)` -> `(S, B, E)`.
#   `step(state, x_t)` returns `(new_state, output)`.
# - The state is a named tuple `hk.LSTMState(hidden, cell)`, each `(B, H)`;
#   `jax.tree_util.tree_map(lambda new, old: jnp.where(keep, new, old), new_state, state)`
#   picks between two states, with `keep` of shape `(B, 1)`.
# - Use `hk.scan`, not `jax.lax.scan`, inside a haiku module (the LSTM has parameters).


# %%
class LSTMClassifier(hk.Module):
    """Token embedding -> LSTM over the real tokens -> final hidden state -> one logit."""

    def __init__(
        self,
        vocab_size: int,
        embed_size: int = 64,
        hidden_size: int = 64,
        p_dropout: float = 0.2,
        name: str | None = None,
    ):
        super().__init__(name=name)
        self.p_dropout = p_dropout
        self.embed = hk.Embed(vocab_size, embed_size, name="embed")
        self.lstm = hk.LSTM(hidden_size, name="lstm")
        self.head = hk.Linear(1, name="head")

    def __call__(self, ids: jax.Array, mask: jax.Array, is_train: bool = True) -> jax.Array:
        """Logits `(B,)` for token ids `(B, S)` and padding mask `(B, S)`."""
        # YOUR CODE HERE
        raise NotImplementedError("LSTMClassifier: not implemented yet")


# %% active="ipynb"
# check("lstm_classifier", LSTMClassifier)


# %% [markdown]
# ## 6. Train the baselines on IMDB
#
# The cells below run only in the notebook (they read IMDB and train). The same runs are
# available from the command line, e.g. `m2l-nlp train --model bigram-mlp`: both go through
# the course's one training loop, `train_and_evaluate`, with a recipe (a *preset*) from
# `m2l_nlp/config.py`. With `impl=globals()` it trains the functions and modules defined in
# this notebook, that is *your* code. (From a terminal, `m2l-nlp train --model bow-mlp
# --impl exercises` trains the code in `exercises/`.)
#
# By default this uses the small set of reviews bundled with the repository (36 s of CPU
# time when we measured it, a minute and a half of waiting on a busy 2-core machine). Set
# `FULL_IMDB = True` for the real IMDB (25,000 + 25,000 reviews, downloaded once, about
# 80 MB), or point the environment variable `M2L_NLP_IMDB` at a local copy of the archive.
#
# Things to try: compare `bow-mlp` with `bigram-mlp` (does word order help?), with and without
# TF-IDF (`preset = override(preset, ["model.use_tfidf=false"])`, with `override` from
# `m2l_nlp.overrides`, the syntax of `m2l-nlp train --set`); then the LSTM, which reads the words
# in order but is much slower to train. Keep the test set for the very end: choose the
# settings (epochs, dropout) on the validation split.

# %% active="ipynb"
# from m2l_nlp.config import PRESETS
# from m2l_nlp.data.pipeline import prepare_for
# from m2l_nlp.runs.experiment import train_and_evaluate
#
# FULL_IMDB = False
# preset = PRESETS["bigram-mlp"]  # the recipe of `m2l-nlp train --model bigram-mlp`
# data = prepare_for(preset, None if FULL_IMDB else "small")
# print(preset.description)
# result = train_and_evaluate(preset, data, name="bigram-mlp", impl=globals())
# print(f"test accuracy {result.test.accuracy:.2%} (epoch {result.metrics['best_epoch']} kept)")

# %% active="ipynb"
# from m2l_nlp.plotting import plot_confusion_matrix, plot_training_curves
#
# plot_training_curves(result.history, title="bigram-mlp")

# %% active="ipynb"
# plot_confusion_matrix(result.test.confusion)
