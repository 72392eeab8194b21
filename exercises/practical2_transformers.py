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
# # Practical 2: a transformer encoder for sentiment classification
#
# In this practical you build, piece by piece, the encoder half of the transformer of
# Vaswani et al. (2017), "Attention Is All You Need", and use it to decide whether an IMDB
# movie review is positive or negative.
#
# The pieces, in the order you write them:
#
# 1. `scaled_dot_product`: the attention operation itself.
# 2. `MaskedEmbedding`: token ids to vectors, with padding set to zero.
# 3. `MultiheadAttention`: several attention operations side by side.
# 4. `PositionwiseFeedForward`: a small MLP applied to every token on its own.
# 5. `EncoderBlock`: attention + feed-forward, each wrapped in a residual connection and a
#    layer normalisation.
# 6. `TransformerEncoder`: a stack of encoder blocks, which can also hand back its
#    attention maps.
# 7. `PositionalEncoding`: attention ignores word order, so we add the position to each
#    token vector.
# 8. `TransformerClassifier`: all of the above, a pooling step over the real (non-padding)
#    tokens, and one output number (a logit) per review.
#
# Shapes are written as `B` batch, `S` sequence length, `D` model width, `h` heads.
# Every exercise has a graded check: run `pytest -m <exercise>` locally, or the check cell
# below it in Colab.

# %%
from __future__ import annotations

import math

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp.config import ClassifierConfig

# %% [markdown]
# After each exercise, run its `check(...)` cell: it runs the same graded checks as
# `pytest -m <exercise>` on the objects defined in this notebook and says in words what
# is wrong. (These cells, and the plotting and training cells, exist only in the notebook.)

# %% active="ipynb"
# from m2l_nlp import plotting
# from m2l_nlp.grading import check


# %% [markdown]
# ## 1. Scaled dot-product attention
#
# Every query vector is compared with every key vector by a dot product. Dividing by
# $\sqrt{d_k}$ keeps these scores from growing with the vector size (large scores would
# push the softmax into a region where its gradient is almost zero). A softmax over the
# keys turns the scores of one query into weights that are positive and add up to 1, and
# the output for that query is the weighted average of the value vectors:
#
# $$\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\left(\frac{Q K^\top}{\sqrt{d_k}}\right) V$$
#
# A mask says which keys a query may look at (1 = allowed, 0 = hidden). Hidden keys must
# receive weight exactly 0: replace their scores by a very negative number *before* the
# softmax. `-inf`, `-1e9` and `jnp.finfo(dtype).min` all work for the graded checks, with one
# difference worth knowing: if *every* key of a row is hidden, `-inf` makes the softmax compute
# 0/0 = NaN, while a large finite number gives a harmless uniform row. Padding masks hide a whole
# row only for an empty review, and the reference uses `finfo.min` so that even then no NaN
# can spread through the model.
#
# Hints: `jnp.swapaxes(k, -1, -2)` transposes the last two axes whatever the leading
# axes are; `jax.nn.softmax(x, axis=-1)`; `jnp.where(mask, a, b)`;
# `jnp.finfo(x.dtype).min` is the most negative number of a dtype.
#
# Going further (not graded): `softmax(s) @ v` equals `(e @ v) / e.sum(-1)` with
# `e = exp(s - max(s))`, so the division can wait until after the product, where it
# touches a `(S_q, d_v)` array instead of the `(S_q, S_k)` one. The reference does this.
# The numbers are the same, but on a CPU, XLA then writes two `(S, S)` arrays per
# attention in the forward and backward pass instead of four, and for long reviews those
# arrays are what a training step spends most of its time on, so the step gets noticeably
# faster. The maximum is wrapped in
# `jax.lax.stop_gradient`, as `jax.nn.softmax` does too: subtracting a constant does not
# change a softmax, so no gradient needs to flow through it.


# %%
def scaled_dot_product(
    q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None = None
) -> tuple[jax.Array, jax.Array]:
    """Scaled dot-product attention.

    Args:
        q: queries, `(..., S_q, d_k)`; any number of leading axes.
        k: keys, `(..., S_k, d_k)`.
        v: values, `(..., S_k, d_v)`.
        mask: optional, broadcastable to `(..., S_q, S_k)`; 0 (or False) hides a key.

    Returns:
        `(values, attention_weights)`: `(..., S_q, d_v)` and `(..., S_q, S_k)`; each row of
        the weights sums to 1 over the keys.
    """
    # YOUR CODE HERE
    raise NotImplementedError("scaled_dot_product: not implemented yet")


# %% active="ipynb"
# check("scaled_dot_product", scaled_dot_product)


# %% [markdown]
# ## 2. Masked embedding
#
# Reviews have different lengths, so a batch is padded to a common length `S` with the
# `[PAD]` token, and a mask of shape `(B, S)` marks the real tokens with 1. The embedding
# looks up one learned vector per token id; for padding positions we return the zero
# vector, so padding carries no information into the model.
#
# Hint: `self.embed(inputs)` gives `(B, S, E)`; `mask[..., None]` has shape `(B, S, 1)`.


# %%
class MaskedEmbedding(hk.Module):
    """Token embedding that returns zero vectors at padding positions."""

    def __init__(self, vocab_size: int, embed_size: int, name: str | None = None):
        super().__init__(name=name)
        self.vocab_size = vocab_size
        self.embed_size = embed_size
        self.embed = hk.Embed(vocab_size, embed_size, name="embed")

    def __call__(self, inputs: jax.Array, mask: jax.Array) -> jax.Array:
        """Embed token ids.

        Args:
            inputs: token ids, int `(B, S)`.
            mask: `(B, S)`, 1 for real tokens, 0 for padding.

        Returns:
            `(B, S, E)`, zero where `mask` is 0.
        """
        # YOUR CODE HERE
        raise NotImplementedError("MaskedEmbedding: not implemented yet")


# %% active="ipynb"
# check("masked_embedding", MaskedEmbedding)


# %% [markdown]
# ## 3. Multi-head attention
#
# One attention operation mixes the values with a single set of weights. Multi-head
# attention runs `h` of them in parallel on smaller vectors, so that different heads can
# attend to different things (a negation, the subject of a sentence, ...):
#
# 1. project the inputs: `proj_q(q)`, `proj_k(k)`, `proj_v(v)`, each `(B, S, D)`;
# 2. split the last axis into `h` heads of size `D // h` and move the head axis before
#    the sequence axis: `(B, S, D) -> (B, S, h, D//h) -> (B, h, S, D//h)`;
# 3. apply `scaled_dot_product` with the mask broadcast over the heads;
# 4. undo step 2, `(B, h, S, D//h) -> (B, S, D)`, and apply `proj_o`.
#
# Masks come in three shapes: `(B, S_k)` or `(B, 1, S_k)` (which keys are padding) and
# `(B, S_q, S_k)` (a full mask). Give them a head axis so they broadcast against
# `(B, h, S_q, S_k)`.


# %%
class MultiheadAttention(hk.Module):
    """Multi-head attention with learned input and output projections."""

    def __init__(self, d_model: int, num_heads: int, name: str | None = None):
        super().__init__(name=name)
        if d_model % num_heads != 0:
            raise ValueError(
                f"d_model ({d_model}) must be divisible by num_heads ({num_heads}): "
                "each head gets d_model // num_heads features; pick sizes that divide"
            )
        self.d_model = d_model
        self.num_heads = num_heads
        self.d_head = d_model // num_heads
        self.proj_q = hk.Linear(d_model, name="proj_q")
        # proj_k's bias b adds q . b to every score of one query alike, and the softmax
        # cancels any such shift: that bias never gets a gradient (kept, like the others)
        self.proj_k = hk.Linear(d_model, name="proj_k")
        self.proj_v = hk.Linear(d_model, name="proj_v")
        self.proj_o = hk.Linear(d_model, name="proj_o")

    def __call__(
        self, q: jax.Array, k: jax.Array, v: jax.Array, mask: jax.Array | None = None
    ) -> tuple[jax.Array, jax.Array]:
        """Attend from `q` to `k`/`v`.

        Args:
            q: `(B, S_q, D)`; k, v: `(B, S_k, D)`.
            mask: `(B, S_k)`, `(B, 1, S_k)` or `(B, S_q, S_k)`; 0 hides a key.

        Returns:
            `(out, weights)`: `(B, S_q, D)` and `(B, h, S_q, S_k)`.
        """

        # YOUR CODE HERE
        raise NotImplementedError("MultiheadAttention: not implemented yet")


# %% active="ipynb"
# check("multihead_attention", MultiheadAttention)


# %% [markdown]
# ## 4. Position-wise feed-forward
#
# A two-layer MLP applied to each token vector on its own: `Linear(d_ff)`, ReLU,
# dropout (only while training), `Linear(d_model)`.
#
# Hint: `hk.dropout(hk.next_rng_key(), rate, x)`; in evaluation (`is_train=False`) there
# is no random key and no dropout.


# %%
class PositionwiseFeedForward(hk.Module):
    """Two linear layers with a ReLU between them, applied to every position."""

    def __init__(self, d_model: int, d_ff: int, p_dropout: float = 0.1, name: str | None = None):
        super().__init__(name=name)
        self.p_dropout = p_dropout
        self.linear_1 = hk.Linear(d_ff, name="linear_1")
        self.linear_2 = hk.Linear(d_model, name="linear_2")

    def __call__(self, x: jax.Array, is_train: bool = True) -> jax.Array:
        """`(B, S, D) -> (B, S, D)`; dropout on the hidden layer when `is_train`."""
        # YOUR CODE HERE
        raise NotImplementedError("PositionwiseFeedForward: not implemented yet")


# %% active="ipynb"
# check("positionwise_feed_forward", PositionwiseFeedForward)


# %% [markdown]
# ## 5. Encoder block
#
# Two sub-layers, each wrapped the same way (the "post-LayerNorm" block of the original
# paper): `x = LayerNorm(x + Dropout(SubLayer(x)))`.
#
# 1. self-attention: queries, keys and values are all `x`, with the padding mask;
# 2. the position-wise feed-forward network.
#
# The residual connection (`x + ...`) lets the signal and the gradient pass through a
# deep stack unchanged; the layer norm keeps the scale of `x` steady.
# With `return_attention=True` the block also returns its attention weights, which the
# encoder uses to draw attention maps. Hand `is_train` on to the feed-forward sub-layer: its
# own default is `True`, so without it dropout would also run in evaluation.


# %%
class EncoderBlock(hk.Module):
    """Self-attention and feed-forward sub-layers with residuals and post-LayerNorm."""

    def __init__(
        self,
        d_model: int,
        num_heads: int,
        d_ff: int,
        p_dropout: float,
        name: str | None = None,
    ):
        super().__init__(name=name)
        self.p_dropout = p_dropout
        self.attention = MultiheadAttention(d_model, num_heads, name="attention")
        self.feed_forward = PositionwiseFeedForward(d_model, d_ff, p_dropout, name="feed_forward")
        self.norm_1 = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, name="norm_1")
        self.norm_2 = hk.LayerNorm(axis=-1, create_scale=True, create_offset=True, name="norm_2")

    def __call__(
        self,
        x: jax.Array,
        mask: jax.Array | None = None,
        is_train: bool = True,
        return_attention: bool = False,
    ) -> jax.Array | tuple[jax.Array, jax.Array]:
        """`(B, S, D) -> (B, S, D)`, plus the weights `(B, h, S, S)` if `return_attention`."""

        # YOUR CODE HERE
        raise NotImplementedError("EncoderBlock: not implemented yet")


# %% active="ipynb"
# check("encoder_block", EncoderBlock)


# %% [markdown]
# ## 6. The encoder: a stack of blocks
#
# Apply the blocks one after the other. `get_attention_maps` runs the same stack and
# collects the attention weights of every block, so we can look at what the model
# attends to.


# %%
class TransformerEncoder(hk.Module):
    """A stack of `num_layers` encoder blocks."""

    def __init__(
        self,
        num_layers: int,
        num_heads: int,
        d_model: int,
        d_ff: int,
        p_dropout: float,
        name: str | None = None,
    ):
        super().__init__(name=name)
        self.blocks = [
            EncoderBlock(d_model, num_heads, d_ff, p_dropout, name=f"block_{i}")
            for i in range(num_layers)
        ]

    def __call__(
        self, x: jax.Array, mask: jax.Array | None = None, is_train: bool = True
    ) -> jax.Array:
        """`(B, S, D) -> (B, S, D)`."""
        # YOUR CODE HERE
        raise NotImplementedError("TransformerEncoder: not implemented yet")

    def get_attention_maps(
        self, x: jax.Array, mask: jax.Array | None = None, is_train: bool = False
    ) -> list[jax.Array]:
        """The attention weights of every block, in order: a list of `(B, h, S, S)`."""
        # YOUR CODE HERE
        raise NotImplementedError("TransformerEncoder.get_attention_maps: not implemented yet")


# %% active="ipynb"
# check("transformer_encoder", TransformerEncoder)


# %% [markdown]
# ## 7. Positional encoding
#
# Self-attention treats its input as a set: shuffle the tokens and the outputs are
# shuffled the same way. To let the model use word order we add to the token at
# position `pos` a fixed vector made of sines and cosines of different wavelengths:
#
# $$PE_{pos, 2i} = \sin\left(\frac{pos}{10000^{2i/D}}\right), \qquad
#   PE_{pos, 2i+1} = \cos\left(\frac{pos}{10000^{2i/D}}\right)$$
#
# Even features get the sine, odd features the cosine, and the wavelength grows
# geometrically from $2\pi$ to $10000 \cdot 2\pi$ along the features. Write the table with
# NumPy (it is a constant, not a parameter), then add its first `S` rows to the input.
#
# A classic slip: JAX arrays are immutable, so `pe.at[:, 0::2].set(...)` returns a *new*
# array and leaves `pe` untouched. If you use JAX here, keep the result.


# %%
def sinusoidal_encoding(max_len: int, d_model: int) -> np.ndarray:
    """The sinusoidal position table, float32 `(max_len, d_model)` (odd `d_model` works)."""
    # YOUR CODE HERE
    raise NotImplementedError("sinusoidal_encoding: not implemented yet")


class PositionalEncoding(hk.Module):
    """Adds the sinusoidal position table to its input, then applies dropout."""

    def __init__(self, d_model: int, max_len: int, p_dropout: float = 0.1, name: str | None = None):
        super().__init__(name=name)
        self.d_model = d_model
        self.max_len = max_len
        self.p_dropout = p_dropout
        self.table = sinusoidal_encoding(max_len, d_model)

    def __call__(self, x: jax.Array, is_train: bool = True) -> jax.Array:
        """`(B, S, D) -> (B, S, D)`; raises `ValueError` if `S > max_len`."""
        # YOUR CODE HERE
        raise NotImplementedError("PositionalEncoding: not implemented yet")


# %% active="ipynb"
# check("positional_encoding", sinusoidal_encoding, PositionalEncoding)


# %% [markdown]
# Each row of this picture is the vector added to the token at one position. The first
# features have short wavelengths and change from one position to the next; the last ones
# have wavelengths of thousands of positions and barely move. Read together, the features
# give every position its own code, and neighbouring positions similar codes.

# %% active="ipynb"
# plotting.plot_positional_encoding(sinusoidal_encoding(200, 64))


# %% [markdown]
# ## 8. The classifier
#
# Put it together: embed the tokens (zero at padding), add positions, run the encoder
# with the padding mask, then summarise each review by **pooling over its real tokens
# only** and map the summary to one logit (positive if the review is positive).
#
# Pooling must ignore padding: a review of 50 tokens padded to 600 should get the same
# summary as the same review padded to 100. Mean pooling divides the sum of the real
# token vectors by their number (at least 1, so an empty review gives zeros, not NaN);
# max pooling takes the maximum over real tokens only, and gives zeros for an empty review
# too (not minus infinity). Any other `pooling` name raises a `ValueError` that lists the
# three allowed ones.
#
# In `TransformerClassifier`, pool the way its config asks for: pass `self.config.pooling`
# on to `masked_pool` (`"mean_max"` doubles the width that the final `Linear` layer sees).


# %%
def masked_pool(x: jax.Array, mask: jax.Array, pooling: str = "mean") -> jax.Array:
    """Pool `(B, S, D)` over the tokens where `mask` `(B, S)` is 1: returns `(B, D)`.

    `pooling` is `"mean"`, `"max"` or `"mean_max"` (both, concatenated: `(B, 2D)`); any
    other name raises `ValueError`. A review with no token (mask all 0) pools to zeros.
    """
    # YOUR CODE HERE
    raise NotImplementedError("masked_pool: not implemented yet")


class TransformerClassifier(hk.Module):
    """Embedding, positional encoding, encoder, masked pooling, one logit per review."""

    def __init__(self, config: ClassifierConfig, name: str | None = None):
        super().__init__(name=name)
        self.config = config
        self.embedding = MaskedEmbedding(config.vocab_size, config.d_model, name="embedding")
        self.positional = PositionalEncoding(
            config.d_model, config.max_len, config.p_dropout, name="positional"
        )
        self.encoder = TransformerEncoder(
            config.num_layers,
            config.num_heads,
            config.d_model,
            config.d_ff,
            config.p_dropout,
            name="encoder",
        )
        self.head = hk.Linear(1, name="head")

    def __call__(self, input_ids: jax.Array, mask: jax.Array, is_train: bool = True) -> jax.Array:
        """Logits `(B,)` for token ids `(B, S)` and padding mask `(B, S)`."""
        # YOUR CODE HERE
        raise NotImplementedError("TransformerClassifier: not implemented yet")

    def get_attention_maps(self, input_ids: jax.Array, mask: jax.Array) -> list[jax.Array]:
        """Attention weights of every encoder block (evaluation mode): list of `(B, h, S, S)`."""
        x = self.positional(self.embedding(input_ids, mask), is_train=False)
        return self.encoder.get_attention_maps(x, mask, is_train=False)


def classifier_forward(
    input_ids: jax.Array,
    mask: jax.Array,
    is_train: bool = True,
    config: ClassifierConfig | None = None,
) -> jax.Array:
    """Stateful forward for `funcs_from_stateful`: logits `(B,)` of a `TransformerClassifier`."""
    return TransformerClassifier(config or ClassifierConfig(), name="classifier")(
        input_ids, mask, is_train
    )


# %% active="ipynb"
# check("classifier", masked_pool, TransformerClassifier)


# %% [markdown]
# ### Before IMDB: can your encoder learn to reverse a sequence?
#
# A task whose answer is known tells whether your encoder can learn to attend at all, before
# the reviews do: give it a sequence of digits and ask, at every position, for the digit of
# the mirrored position (position `i` must output the input at position `L - 1 - i`). The
# only way to solve it is for position `i` to attend to position `L - 1 - i`, so once trained
# the attention map is an anti-diagonal. Without the positional encoding every position
# looks alike, and the accuracy stays far from 100 % (about a quarter of the digits and no
# whole sequence, when we measured it). The task checks the whole pipeline, not the details:
# a softmax over the wrong axis, heads reshaped without the transpose or scores left
# unscaled still learn it perfectly (the network finds a way around them), so 100 % here
# does not replace the `check(...)` cells above, which catch those. The cell below trains
# your `PositionalEncoding` and `TransformerEncoder` (with an embedding before them and a
# linear layer per position after) with the course's training loop (16 s of CPU time when
# we measured it, a minute of waiting on a busy 2-core machine), then shows the attention
# map of one sequence.

# %% active="ipynb"
# import sys
#
# import numpy as np
#
# from m2l_nlp.config import ReverseConfig
# from m2l_nlp.plotting import plot_attention_maps
# from m2l_nlp.train.reverse import reverse_batch, train_reverse
#
# reverse = train_reverse(ReverseConfig(), module=sys.modules["__main__"])  # your modules
# print(f"digits right: {reverse.accuracy:.1%}, sequences: {reverse.sequence_accuracy:.1%}")
# digits, _ = reverse_batch(np.random.default_rng(0), 1, reverse.config.seq_len)
# plot_attention_maps(
#     reverse.attention_maps(digits), tokens=[str(d) for d in digits[0]], title="reversing"
# )


# %% [markdown]
# ## 9. Training the classifier
#
# Time to train the model you wrote. The course package does the plumbing: it trains a
# tokenizer on the training reviews, turns every review into `input_ids` and a padding `mask`
# of length `seq_len`, and runs a jitted training loop (AdamW, one evaluation on a validation
# split after every epoch), the same loop as `m2l-nlp train`. The validation split
# (`split_validation`, the one the command line uses too) holds out runs of neighbouring
# training reviews of the archive, mostly reviews of one film each: as with the test films,
# the model never trains on its films, so it does not reward remembering them. Choices such
# as which epoch to keep are made on it, and the test reviews are scored once, at the end, so
# that the test accuracy stays an honest estimate. The recipe
# (model sizes, training settings) is a preset of `m2l_nlp/config.py`: `demo` for the small
# data, `default` (the recipe of `make train`) for the full IMDB. Here you train your own
# classifier exactly as you wrote it; `make train` adds one thing around it, which the preset
# calls `bigram_backoff`: each pair token is read as its own vector plus its first token's
# (`m2l_nlp/model/classifiers.py`).
#
# By default this uses the small set of reviews bundled with the repository (1,000 for
# training and 500 for testing, short made-up reviews meant for quick runs): it trains in
# about half a minute of CPU time. For the real IMDB (25,000 + 25,000 reviews, downloaded
# once, about 80 MB) set `FULL_IMDB = True`, preferably on a GPU (in Colab: *Runtime >
# Change runtime type*). A local copy of the archive works too: `prepare_for(preset,
# "path/to/aclImdb_v1.tar.gz")`, or set the environment variable `M2L_NLP_IMDB` to that path.

# %% active="ipynb"
# from m2l_nlp.config import PRESETS
# from m2l_nlp.data.pipeline import prepare_for
# from m2l_nlp.data.splits import split_validation
# from m2l_nlp.train.evaluation import evaluate
# from m2l_nlp.data.tokenization import batch_encode
# from m2l_nlp.train.loop import train
# from m2l_nlp.transform import funcs_from_stateful
#
# FULL_IMDB = False
# preset = PRESETS["default" if FULL_IMDB else "demo"]  # the recipes of m2l_nlp/config.py
# data = prepare_for(preset, None if FULL_IMDB else "small")
# config = preset.model_config(data.vocab_size)  # ClassifierConfig: the model's sizes
# settings = preset.settings()  # TrainSettings: epochs, learning rate, batch size, ...
# train_split, val_split = split_validation(data, preset.val_size_for(len(data.train_labels)))
# test_split = (data.test_ids, data.test_mask, data.test_labels)
# sizes = [len(split[2]) for split in (train_split, val_split, test_split)]
# print("{} training, {} validation, {} test reviews".format(*sizes))
# print(f"vocabulary: {data.vocab_size} tokens; {config}")


# %% [markdown]
# `funcs_from_stateful` turns the forward function into pure functions, as in the lectures:
# `model.apply(params, key, ids, mask, is_train)` trains (dropout needs a random key),
# `predict_fw(params, ids, mask)` predicts with dropout off, and `init_params(key, ids, mask,
# True)` creates the parameters. A second forward, `attention_maps`, runs the same modules up
# to the encoder and returns its attention maps, with the same parameters. Before any training
# the attention is spread almost evenly over the tokens of the review.

# %% active="ipynb"
# def forward(input_ids, mask, is_train=True):
#     return classifier_forward(input_ids, mask, is_train, config=config)
#
#
# def attention_maps(input_ids, mask):
#     return TransformerClassifier(config, name="classifier").get_attention_maps(input_ids, mask)
#
#
# classifier = funcs_from_stateful(forward)
# model, model_fw, predict, predict_fw, init_params = classifier
# get_maps = funcs_from_stateful(attention_maps).predict_fw  # compiled once, used twice
#
# review = "A wonderful film. The acting was not bad at all."
# ids, mask = batch_encode(data.tokenizer, [review], seq_len=config.max_len)
# params = init_params(jax.random.PRNGKey(0), ids, mask, True)
# tokens = [data.tokenizer.id_to_token(int(i)) for i in ids[0, : mask[0].sum()]]
# plotting.plot_attention_maps(
#     get_maps(params, ids, mask), tokens=tokens, title="Attention before training"
# )


# %% [markdown]
# Now train, with the course's training loop. Each line of the log is one epoch: the training
# loss and accuracy, and the loss and accuracy on the validation reviews. At the end, `train`
# returns the parameters of the epoch with the best validation accuracy.

# %% active="ipynb"
# result = train(classifier, params, train_split, settings, eval_data=val_split)
# plotting.plot_training_curves(result.history)


# %% [markdown]
# Now, once, the test reviews. The confusion matrix counts them by true label (rows) and
# predicted label (columns): the diagonal holds the correct answers.

# %% active="ipynb"
# test = evaluate(result.params, classifier, test_split, window=settings.crop_len)
# print(f"test accuracy {test.accuracy:.2%} (epoch {result.best_epoch} of {settings.epochs})")
# plotting.plot_confusion_matrix(test.confusion, title="Test reviews")


# %% [markdown]
# The trained model on new sentences (the number is the predicted probability that the
# review is positive), and the attention maps of the same review as before: after training
# some heads concentrate on a few tokens. `review_probabilities` is the path of
# `m2l-nlp predict`: the sentences are read as the model was trained to read them, with its
# tokenizer, its pair tokens and its windows.
#
# On the small bundled data (`FULL_IMDB = False`) expect some of the four to come out wrong,
# and which ones to change with the seed. The model has read 950 made-up reviews of a few
# paragraphs each, not single sentences. Its tokenizer knows 265 pieces and spells most
# words in letters ("was" is w, a, s). Those reviews never use "warm", "funny", "waste",
# "no", "sense" or "wooden". Their only "and" is in "Go and see it", which ends positive
# reviews. And in them "film." after any word but "the" ends a negative verdict ("What a
# dull horror film."; the positive one ends with "!"). The demo's recipe was tried with
# other settings (more epochs, shorter crops, pair tokens off or backed off, token dropout):
# none got all four right, and the ones missed changed from one setting to the next. That
# is its data, not your code. Trained on the full IMDB the model reads them with its whole
# vocabulary.

# %% active="ipynb"
# from m2l_nlp.runs.checkpoint import review_probabilities
#
# reviews = [
#     "One of the best films I have seen this year.",
#     "A dull, tedious waste of two hours.",
#     "A warm, funny and clever film.",
#     "The plot made no sense and the acting was wooden.",
# ]
# probabilities = review_probabilities(  # the path of `m2l-nlp predict`
#     reviews,
#     result.params,
#     classifier,
#     data.tokenizer,
#     max_len=config.max_len,
#     bigram_table=data.bigram_table,  # the pair tokens the model was trained with
#     window=settings.crop_len,
# )
# for text, p in zip(reviews, probabilities):
#     print(f"{float(p):.2f}  {text}")


# %% active="ipynb"
# trained_maps = get_maps(result.params, ids, mask)
# plotting.plot_attention_maps(trained_maps, tokens=tokens, title="Attention after training")
