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
# # Practical 3, part 1: the transformer decoder and a character language model
#
# Practical 2 built the encoder: every token looks at every other token and the result
# summarises a review. A decoder reads text the way it is written, left to right: every
# position may only look at itself and the positions before it. Trained to predict the next
# character at every position at once, such a model can then write text, one character at a
# time, each one drawn from what it predicts after the text so far.
#
# The pieces, in the order you write them:
#
# 1. `causal_mask`: which positions a position may attend to.
# 2. `DecoderBlock`: masked self-attention and the feed-forward network, each wrapped in a
#    residual connection and a layer norm, as in practical 2's `EncoderBlock`.
# 3. `TransformerDecoder`: a stack of decoder blocks.
# 4. `CharLanguageModel`: characters to vectors, positions, the decoder, and a score (logit)
#    for every character of the vocabulary at every position.
# 5. `next_token_loss`: how wrong the predictions of the next character are, over the
#    characters that count.
# 6. `sample_next`: drawing the next character, with a temperature and top-k.
# 7. `attend_with_cache`: self-attention for new positions only, with the keys and values
#    of the earlier ones kept (a key/value cache), to write fast.
#
# It builds on your practical 2: `MaskedEmbedding`, `MultiheadAttention`,
# `PositionwiseFeedForward` and `PositionalEncoding` are imported from it. Shapes are written
# as `B` batch, `S` sequence length, `D` model width, `h` heads, `V` vocabulary size.
# Every exercise has a graded check: run `pytest -m <exercise>` locally, or the check cell
# below it in Colab.

# %%
from __future__ import annotations

from typing import NamedTuple

import haiku as hk
import jax
import jax.numpy as jnp

from m2l_nlp.config import LanguageModelConfig

from .practical2_transformers import (
    MaskedEmbedding,
    MultiheadAttention,
    PositionalEncoding,
    PositionwiseFeedForward,
    scaled_dot_product,
)

# %% active="ipynb"
# from m2l_nlp import plotting
# from m2l_nlp.grading import check


# %% [markdown]
# ## 1. The causal mask
#
# While training, the model sees a whole window of text at once and predicts, at every
# position `i`, the character at `i + 1`. If position `i` could attend to position `i + 1`,
# it would simply copy the answer: the loss would fall to almost zero in training and the
# model would be useless for writing, where the future does not exist yet.
#
# `causal_mask(S)` is the `(S, S)` array whose entry `[i, j]` is 1 where query `i` may
# attend to key `j` (`j <= i`: itself and the past) and 0 elsewhere (the future). Its
# lower triangle, diagonal included. Hint: `jnp.tril`.


# %%
def causal_mask(seq_len: int) -> jax.Array:
    """`(S, S)` int32: 1 where query `i` may see key `j` (`j <= i`), 0 for the future."""
    # BEGIN SOLUTION
    return jnp.tril(jnp.ones((seq_len, seq_len), jnp.int32))
    # END SOLUTION


# %% active="ipynb"
# check("causal_mask", causal_mask)


# %% [markdown]
# The mask as a picture: row `i` is what position `i` may read (bright), column `j` is key `j`.

# %% active="ipynb"
# plotting.plot_attention_maps([causal_mask(8)[None]], tokens=list("The film"), title="causal mask")


# %% [markdown]
# ## 2. The decoder block
#
# The same two sub-layers as the encoder block, wrapped the same way
# (`x = LayerNorm(x + Dropout(SubLayer(x)))`), with one difference: the self-attention is
# masked twice. A query may not see the future (the causal mask) nor padding (the padding
# mask, `(B, S)`, 1 for a real character). Combine them into one `(B, S, S)` mask: a key is
# visible when both allow it. `MultiheadAttention` takes such a mask as it is.
#
# Return the block's output and its attention weights `(B, h, S, S)`: the decoder draws its
# attention maps from them. Hand `is_train` on to the feed-forward sub-layer.


# %%
class DecoderBlock(hk.Module):
    """Masked self-attention and feed-forward sub-layers with residuals and post-LayerNorm."""

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
        self, x: jax.Array, mask: jax.Array, is_train: bool = True
    ) -> tuple[jax.Array, jax.Array]:
        """`x (B, S, D)`, padding `mask (B, S)` -> `(B, S, D)` and weights `(B, h, S, S)`."""

        # BEGIN SOLUTION
        def dropout(y: jax.Array) -> jax.Array:
            if is_train and self.p_dropout > 0:
                return hk.dropout(hk.next_rng_key(), self.p_dropout, y)
            return y

        visible = causal_mask(x.shape[-2])[None, :, :] * jnp.asarray(mask)[:, None, :]
        attended, weights = self.attention(x, x, x, visible)
        x = self.norm_1(x + dropout(attended))
        x = self.norm_2(x + dropout(self.feed_forward(x, is_train)))
        return x, weights
        # END SOLUTION


# %% active="ipynb"
# check("decoder_block", DecoderBlock)


# %% [markdown]
# ## 3. The decoder: a stack of blocks
#
# Name the blocks `block_0`, `block_1`, ... (the names of their parameters) and apply them
# one after the other, each with the same padding mask. `get_attention_maps` runs the
# same stack and returns the attention weights of every block, in order.


# %%
class TransformerDecoder(hk.Module):
    """A stack of `num_layers` decoder blocks."""

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
            DecoderBlock(d_model, num_heads, d_ff, p_dropout, name=f"block_{i}")
            for i in range(num_layers)
        ]

    def __call__(self, x: jax.Array, mask: jax.Array, is_train: bool = True) -> jax.Array:
        """`x (B, S, D)`, padding `mask (B, S)` -> `(B, S, D)`."""
        # BEGIN SOLUTION
        for block in self.blocks:
            x, _ = block(x, mask, is_train)
        return x
        # END SOLUTION

    def get_attention_maps(
        self, x: jax.Array, mask: jax.Array, is_train: bool = False
    ) -> list[jax.Array]:
        """The attention weights of every block, in order: a list of `(B, h, S, S)`."""
        # BEGIN SOLUTION
        maps = []
        for block in self.blocks:
            x, weights = block(x, mask, is_train)
            maps.append(weights)
        return maps
        # END SOLUTION


# %% active="ipynb"
# check("transformer_decoder", TransformerDecoder)


# %% [markdown]
# ## 4. The character language model
#
# Characters in, scores out: embed the character ids (zero at padding, as in practical 2),
# add the positions, run the decoder with the padding mask, then map every position's
# vector to one logit per character of the vocabulary with a `Linear(vocab_size)` layer
# named `head`. The logits at position `i` score the character at `i + 1`.


# %%
class CharLanguageModel(hk.Module):
    """Embedding, positional encoding, decoder, and logits over the vocabulary."""

    def __init__(self, config: LanguageModelConfig, name: str | None = None):
        super().__init__(name=name)
        self.config = config
        self.embedding = MaskedEmbedding(config.vocab_size, config.d_model, name="embedding")
        self.positional = PositionalEncoding(
            config.d_model, config.max_len, config.p_dropout, name="positional"
        )
        self.decoder = TransformerDecoder(
            config.num_layers,
            config.num_heads,
            config.d_model,
            config.d_ff,
            config.p_dropout,
            name="decoder",
        )
        self.head = hk.Linear(config.vocab_size, name="head")

    def __call__(self, input_ids: jax.Array, mask: jax.Array, is_train: bool = True) -> jax.Array:
        """Logits `(B, S, V)` for character ids `(B, S)` and padding mask `(B, S)`."""
        # BEGIN SOLUTION
        x = self.embedding(input_ids, mask)
        x = self.positional(x, is_train)
        x = self.decoder(x, mask, is_train)
        return self.head(x)
        # END SOLUTION

    def get_attention_maps(self, input_ids: jax.Array, mask: jax.Array) -> list[jax.Array]:
        """Attention weights of every decoder block (evaluation mode): list of `(B, h, S, S)`."""
        x = self.positional(self.embedding(input_ids, mask), is_train=False)
        return self.decoder.get_attention_maps(x, mask, is_train=False)


def language_model_forward(
    input_ids: jax.Array,
    mask: jax.Array,
    is_train: bool = True,
    config: LanguageModelConfig | None = None,
) -> jax.Array:
    """Stateful forward for `funcs_from_stateful`: logits `(B, S, V)` of a `CharLanguageModel`."""
    return CharLanguageModel(config or LanguageModelConfig(), name="char_lm")(
        input_ids, mask, is_train
    )


# %% active="ipynb"
# check("language_model", CharLanguageModel)


# %% [markdown]
# ## 5. The next-character loss
#
# The logits at position `i` predict the character at position `i + 1`. So the targets are
# the ids shifted by one: the logits of positions `0 .. S-2` are scored against the ids of
# positions `1 .. S-1`; the last position has nothing to predict inside the window, and the
# first character is never a target (nothing comes before it).
#
# Only real characters are targets: a target at a padding position (its `mask` is 0) does
# not count. Return the mean cross-entropy over the targets that count (a batch with none
# gives 0, not NaN). In bits rather than nats (divided by `ln 2`), this is the *bits per
# character* that the training reports. Hint:
# `optax.softmax_cross_entropy_with_integer_labels`, or `jax.nn.log_softmax` and
# `jnp.take_along_axis`.


# %%
def next_token_loss(logits: jax.Array, input_ids: jax.Array, mask: jax.Array) -> jax.Array:
    """Mean cross-entropy (nats) of `logits (B, S, V)` predicting `input_ids (B, S)` one
    position ahead, over the targets where `mask (B, S)` is 1; a scalar."""
    # BEGIN SOLUTION
    log_probs = jax.nn.log_softmax(logits[:, :-1], axis=-1)
    targets = input_ids[:, 1:]
    picked = jnp.take_along_axis(log_probs, targets[..., None], axis=-1)[..., 0]
    counts = jnp.asarray(mask[:, 1:], logits.dtype)
    return -(picked * counts).sum() / jnp.maximum(counts.sum(), 1.0)
    # END SOLUTION


# %% active="ipynb"
# check("next_token_loss", next_token_loss)


# %% [markdown]
# ## 6. Sampling the next character
#
# To write, the model reads the text so far and gives logits for the next character; we
# draw one character from the softmax of those logits, append it and go on. Two knobs:
#
# - the **temperature** `T` divides the logits before the softmax: `T < 1` sharpens the
#   distribution (safer, more repetitive text), `T > 1` flattens it (more surprising, more
#   mistakes). It acts on the logits: a softmax's output divided by `T` is normalised back
#   to the same distribution, and nothing would change.
# - **top-k** keeps only the `k` most likely characters (the others get probability 0)
#   before drawing; `top_k=None` keeps them all.
#
# Draw with `jax.random.categorical(key, logits)`, which samples from the softmax of its
# logits along the last axis; a logit of `-jnp.inf` is never drawn. Hint:
# `jax.lax.top_k(logits, k)[0][..., -1:]` is the `k`-th largest logit of each row.


# %%
def sample_next(
    logits: jax.Array, key: jax.Array, temperature: float = 1.0, top_k: int | None = None
) -> jax.Array:
    """One id per row `(B,)` drawn from `softmax(logits / temperature)` `(B, V)`, among the
    `top_k` largest logits of the row only (all of them if `top_k` is None)."""
    # BEGIN SOLUTION
    scaled = logits / temperature
    if top_k is not None:
        kth = jax.lax.top_k(scaled, top_k)[0][..., -1:]
        scaled = jnp.where(scaled < kth, -jnp.inf, scaled)
    return jax.random.categorical(key, scaled, axis=-1)
    # END SOLUTION


# %% active="ipynb"
# check("sample_next", sample_next)


# %% [markdown]
# ## 7. Writing faster: a key/value cache
#
# Writing calls the model once per new character. Run as in training, each call reads the
# whole text again, although nothing about the earlier positions has changed: the causal
# mask means a position never looks at what comes after it, so its key and value in every
# block stay what they were. Keeping them (a *key/value cache*) makes each new character
# cost the projections of one position and one row of attention over the positions so far.
#
# `attend_with_cache(attention, x, cache, at)` is the self-attention of a decoder block for
# the new positions `at, at + 1, ..., at + S - 1` only (`x (B, S, D)`: the prompt at once,
# `S` > 1, or one new character, `S` = 1). With the layers of your practical 2
# `MultiheadAttention` (`attention.proj_q`, `proj_k`, `proj_v`, `proj_o`) and your
# `scaled_dot_product`:
#
# 1. project `x` to queries, keys and values and split them into heads, `(B, h, S, D / h)`;
# 2. write the new keys and values into the cache at positions `at .. at + S - 1` (axis 2
#    of its `(B, h, W, D / h)` arrays); `at` is traced under `jax.jit`, so slice with
#    `jax.lax.dynamic_update_slice_in_dim`, not with `[at:]`;
# 3. let the query at position `at + i` attend to the cached keys `0 .. at + i`: itself and
#    the past, never a later position (those may hold anything);
# 4. merge the heads and apply `proj_o`, as in `MultiheadAttention`.
#
# Return the output `(B, S, D)` and the cache with the new keys and values. The course's
# `language_model_step` below runs your own `CharLanguageModel` with every block's
# self-attention answered by this function; the check compares it with your model run on
# the whole text.


# %%
class LayerCache(NamedTuple):
    """One block's keys and values at every position of the window, `(B, h, W, D / h)` each."""

    keys: jax.Array
    values: jax.Array


def attend_with_cache(
    attention: MultiheadAttention, x: jax.Array, cache: LayerCache, at: jax.Array
) -> tuple[jax.Array, LayerCache]:
    """Self-attention of positions `at .. at + S - 1` (`x (B, S, D)`) over every position up
    to each: `(B, S, D)` and `cache` with their keys and values written in."""

    # BEGIN SOLUTION
    def split_heads(y: jax.Array) -> jax.Array:
        y = y.reshape(*y.shape[:-1], attention.num_heads, attention.d_head)
        return jnp.swapaxes(y, -2, -3)

    queries = split_heads(attention.proj_q(x))
    keys = jax.lax.dynamic_update_slice_in_dim(
        cache.keys, split_heads(attention.proj_k(x)), at, axis=2
    )
    values = jax.lax.dynamic_update_slice_in_dim(
        cache.values, split_heads(attention.proj_v(x)), at, axis=2
    )
    positions = at + jnp.arange(x.shape[-2])
    visible = jnp.arange(keys.shape[2])[None, :] <= positions[:, None]  # (S, W)
    out, _ = scaled_dot_product(queries, keys, values, visible)
    out = jnp.swapaxes(out, -2, -3)
    return attention.proj_o(out.reshape(*out.shape[:-2], -1)), LayerCache(keys, values)
    # END SOLUTION


# %% active="ipynb"
# check("attention_cache", attend_with_cache)


# %% [markdown]
# The course's side of it (read, nothing to write): your modules run as you wrote them,
# with each block's `attention` answered from its cache and the positions read from `at`.


# %%
class _AttentionFromCache:
    """Stands in for a block's `attention` while the block reads new positions."""

    def __init__(self, attention: MultiheadAttention, cache: LayerCache, at: jax.Array):
        self.attention, self.cache, self.at = attention, cache, at

    def __call__(self, q, k, v, mask=None):
        # k, v and the mask are the new positions': the cache holds all of them
        out, self.cache = attend_with_cache(self.attention, q, self.cache, self.at)
        return out, None


class _PositionsFrom:
    """Stands in for `PositionalEncoding`: the rows of positions `at ..`, not `0 ..`."""

    def __init__(self, positional: PositionalEncoding, config: LanguageModelConfig, at):
        zeros = jnp.zeros((1, config.max_len, config.d_model), jnp.float32)
        self.table = positional(zeros, is_train=False)[0]  # (W, D): what it adds
        self.at = at

    def __call__(self, x, is_train=False):
        rows = jax.lax.dynamic_slice_in_dim(self.table, self.at, x.shape[-2], axis=0)
        return x + rows


def empty_caches(config: LanguageModelConfig, batch: int) -> list[LayerCache]:
    """A cache of zeros for every block of the model."""
    shape = (batch, config.num_heads, config.max_len, config.d_model // config.num_heads)
    zeros = jnp.zeros(shape, jnp.float32)
    return [LayerCache(zeros, zeros) for _ in range(config.num_layers)]


def language_model_step(
    input_ids: jax.Array,
    caches: list[LayerCache],
    at: jax.Array,
    config: LanguageModelConfig,
) -> tuple[jax.Array, list[LayerCache]]:
    """Logits `(B, S, V)` of the characters `input_ids (B, S)` at positions `at ..`, reading
    every block's cache (evaluation mode), and the caches with their keys and values."""
    model = CharLanguageModel(config, name="char_lm")
    blocks, positional = model.decoder.blocks, model.positional
    cached = [_AttentionFromCache(b.attention, c, at) for b, c in zip(blocks, caches, strict=True)]
    try:
        for block, stand_in in zip(blocks, cached, strict=True):
            block.attention = stand_in
        model.positional = _PositionsFrom(positional, config, at)
        logits = model(input_ids, jnp.ones_like(input_ids), is_train=False)
    finally:  # the modules as they were, for any later call
        for block, stand_in in zip(blocks, cached, strict=True):
            block.attention = stand_in.attention
        model.positional = positional
    return logits, [stand_in.cache for stand_in in cached]


# %% [markdown]
# ## 8. Training the language model on reviews
#
# The text is the IMDB reviews themselves, read as characters: the course package cuts the
# training reviews into windows of `seq_len` characters (128 for the `char-lm` preset),
# labels every position with the next character, and builds the vocabulary from the
# training reviews only (the rarest characters share one id for "unknown"). Some training
# reviews are held out for validation after every epoch, and the test reviews are read once
# at the end.
#
# The loss is reported in **bits per character**: how many yes/no questions, on average, the
# model still needs to guess the next character. Two baselines tell whether it learnt more
# than letter frequencies: the *unigram* model (how often each character occurs) and the
# *bigram* model (how often each character follows the previous one), both counted on the
# training reviews. The training loop is the one of practical 2 (`m2l-nlp train` runs the
# same): here with a loss per character instead of one per review.
#
# With the bundled small data (`FULL_IMDB = False`) this takes seconds and shows the path
# only: 800 reviews are too little text to beat the bigram counts. On the full IMDB the
# preset's recipe reads 10,000 reviews once (about 10 minutes on a 2-core CPU, far less on
# a GPU) and gets about 1.5 bits per character below the bigram model.

# %% active="ipynb"
# import sys
#
# import numpy as np
#
# from m2l_nlp.config import PRESETS
# from m2l_nlp.data.characters import prepare_characters
# from m2l_nlp.model.language_models import init_params
# from m2l_nlp.runs.language_model import Writer
# from m2l_nlp.train.loop import train
# from m2l_nlp.train.metrics import NEXT_CHAR
# from m2l_nlp.transform import funcs_from_stateful
#
# FULL_IMDB = False
# preset = PRESETS["char-lm"]  # the recipe of m2l_nlp/config.py
# data = prepare_characters(
#     None if FULL_IMDB else "small",
#     width=preset.seq_len,
#     max_chars=preset.vocab_size,
#     val_size=preset.val_size,
#     train_reviews=preset.train_reviews,  # a CPU's share; 0 reads all 24,500 (on a GPU)
# )
# config = preset.model_config(data.vocab.size)  # LanguageModelConfig: the model's sizes
# settings = preset.settings()
# print(f"{data.reviews}; {len(data.train.ids)} windows; {data.vocab.size} character ids")
#
#
# def forward(input_ids, mask, is_train=True):
#     return language_model_forward(input_ids, mask, is_train, config=config)
#
#
# model = funcs_from_stateful(forward)
# params = init_params(model, 0, config.max_len)
# result = train(model, params, data.train.split(), settings, eval_data=data.val.split(),
#                objective=NEXT_CHAR)
# print("bits per character of the baselines on the test reviews:", data.baselines)
# plotting.plot_training_curves(result.history)


# %% [markdown]
# ## 9. Writing, one character at a time
#
# The course's `Writer` reads the prompt once through `language_model_step` (your modules,
# with your `attend_with_cache`), then draws each new character with your `sample_next`
# and feeds it back: one position per character, the earlier ones read from the caches.
# It first checks that the cached path gives your model's own logits on the prompt
# (`benchmarks/generation.py` measures how much faster it is than reading the text again).
#
# Try other prompts, temperatures (0.5, 1.0, 1.5) and `top_k`.

# %% active="ipynb"
# writer = Writer(model, sys.modules["__main__"], config, data.vocab)  # your modules
# PROMPT = "The film"  # type your own beginning
# TEMPERATURE = 0.8
# print(repr(PROMPT + writer.write(result.params, PROMPT, 100, temperature=TEMPERATURE)))


# %% [markdown]
# Where the trained decoder looks: each block's heads, for the characters of one sentence.
# Every row stops at the diagonal (the causal mask). Look for heads that read the character
# just before, and for heads that look further back; on the small data there is less to see.

# %% active="ipynb"
# def attention_maps(input_ids, mask):
#     return CharLanguageModel(config, name="char_lm").get_attention_maps(input_ids, mask)
#
#
# text = "The film was great."
# ids = data.vocab.encode(text)[None]
# maps = funcs_from_stateful(attention_maps).predict_fw(result.params, ids, np.ones_like(ids))
# plotting.plot_attention_maps(maps, tokens=list(text), title="Decoder attention after training")
