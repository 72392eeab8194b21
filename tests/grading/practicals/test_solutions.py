"""The reference solutions of practical 2 against independent references.

These tests never compare the solutions with themselves: the references are a float64 NumPy
re-implementation written here, haiku's own ``MultiHeadAttention``, and closed forms. They
always test ``solutions/`` (the graded checks in ``tests/graded`` test the student's code).
"""

from __future__ import annotations

import functools
import math

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from m2l_nlp.config import ClassifierConfig
from m2l_nlp.impl import load_practical
from m2l_nlp.transform import funcs_from_stateful

sol = load_practical("practical2_transformers", "solutions")

ATOL = 1e-5
RTOL = 1e-4


@pytest.fixture(autouse=True)
def _exact_matmuls():
    """float32 matrix products at full precision: a GPU would otherwise round them to TF32
    (about 3 decimal digits), far outside the tolerances against float64 NumPy."""
    with jax.default_matmul_precision("highest"):
        yield


# ----------------------------------------------------------------------------- references
def np_softmax(x: np.ndarray) -> np.ndarray:
    x = x - x.max(axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)


def np_attention(q, k, v, mask=None):
    """float64 attention; masked keys are dropped from the softmax (rows with none: uniform)."""
    q, k, v = (np.asarray(a, np.float64) for a in (q, k, v))
    scores = q @ np.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        visible = np.broadcast_to(np.asarray(mask) != 0, scores.shape)
        scores = np.where(visible, scores, -np.inf)
        scores = np.where(visible.any(-1, keepdims=True), scores, 0.0)
    weights = np_softmax(scores)
    return weights @ v, weights


def np_linear(params, x):
    return x @ np.asarray(params["w"], np.float64) + np.asarray(params["b"], np.float64)


def np_layer_norm(params, x, eps=1e-5):
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + eps) * params["scale"] + params["offset"]


def np_mha(params, prefix, x, mask, num_heads):
    """Self-attention with heads split as (S, h, d_head), in float64."""
    b, s, d = x.shape

    def heads(name):
        y = np_linear(params[f"{prefix}/~/{name}"], x)
        return y.reshape(b, s, num_heads, d // num_heads).transpose(0, 2, 1, 3)

    key_mask = None if mask is None else np.asarray(mask)[:, None, None, :]
    out, weights = np_attention(heads("proj_q"), heads("proj_k"), heads("proj_v"), key_mask)
    out = out.transpose(0, 2, 1, 3).reshape(b, s, d)
    return np_linear(params[f"{prefix}/~/proj_o"], out), weights


def np_block(params, prefix, x, mask, num_heads):
    attended, _ = np_mha(params, f"{prefix}/~/attention", x, mask, num_heads)
    x = np_layer_norm(params[f"{prefix}/~/norm_1"], x + attended)
    hidden = np.maximum(np_linear(params[f"{prefix}/~/feed_forward/~/linear_1"], x), 0)
    ff = np_linear(params[f"{prefix}/~/feed_forward/~/linear_2"], hidden)
    return np_layer_norm(params[f"{prefix}/~/norm_2"], x + ff)


def closed_form_pe(max_len: int, d_model: int) -> np.ndarray:
    """PE[pos, 2i] = sin(pos / 10000^(2i/D)), PE[pos, 2i+1] = cos(same), one entry at a time."""
    table = np.zeros((max_len, d_model))
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** ((j - j % 2) / d_model)
            table[pos, j] = math.sin(angle) if j % 2 == 0 else math.cos(angle)
    return table


def np_classifier(params, ids, mask, config: ClassifierConfig):
    p = {
        k: jax.tree_util.tree_map(lambda a: np.asarray(a, np.float64), v) for k, v in params.items()
    }
    mask = np.asarray(mask, np.float64)
    x = p["classifier/~/embedding/~/embed"]["embeddings"][np.asarray(ids)] * mask[..., None]
    x = x + closed_form_pe(config.max_len, config.d_model)[: ids.shape[1]]
    for i in range(config.num_layers):
        x = np_block(p, f"classifier/~/encoder/~/block_{i}", x, mask, config.num_heads)
    pooled = (x * mask[..., None]).sum(1) / np.maximum(mask.sum(1, keepdims=True), 1)
    return np_linear(p["classifier/~/head"], pooled)[:, 0]


def transformed(fn):
    return hk.transform(fn)


def padding_mask(lengths, seq_len):
    return (np.arange(seq_len)[None, :] < np.asarray(lengths)[:, None]).astype(np.int32)


# ----------------------------------------------------------------------------- attention
@pytest.mark.parametrize("shape", [(5, 4), (3, 6, 8), (2, 3, 4, 5, 8)])
def test_attention_matches_float64_numpy_for_any_leading_dims(shape):
    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=shape).astype(np.float32) for _ in range(3))
    values, weights = sol.scaled_dot_product(q, k, v)
    ref_values, ref_weights = np_attention(q, k, v)
    np.testing.assert_allclose(values, ref_values, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(weights, ref_weights, atol=ATOL, rtol=RTOL)


def test_attention_with_mask_matches_numpy_and_hides_keys():
    rng = np.random.default_rng(1)
    q, k, v = (rng.normal(size=(2, 3, 6, 8)).astype(np.float32) for _ in range(3))
    mask = padding_mask([6, 2], 6)[:, None, None, :]
    values, weights = sol.scaled_dot_product(q, k, v, mask)
    ref_values, ref_weights = np_attention(q, k, v, mask)
    np.testing.assert_allclose(values, ref_values, atol=ATOL, rtol=RTOL)
    np.testing.assert_allclose(weights, ref_weights, atol=ATOL, rtol=RTOL)
    assert np.all(np.asarray(weights)[1, :, :, 2:] == 0.0), "masked keys must get weight exactly 0"
    np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-6)


def test_attention_fully_masked_row_has_no_nan():
    q = k = v = jnp.ones((1, 4, 8))
    mask = jnp.zeros((1, 4, 4)).at[:, :2, :].set(1)  # rows 2 and 3 see nothing
    values, weights = sol.scaled_dot_product(q, k, v, mask)
    assert np.isfinite(np.asarray(values)).all() and np.isfinite(np.asarray(weights)).all()


def test_attention_is_permutation_equivariant():
    rng = np.random.default_rng(2)
    x = rng.normal(size=(2, 7, 8)).astype(np.float32)
    perm = rng.permutation(7)
    out, _ = sol.scaled_dot_product(x, x, x)
    out_perm, _ = sol.scaled_dot_product(x[:, perm], x[:, perm], x[:, perm])
    np.testing.assert_allclose(np.asarray(out)[:, perm], out_perm, atol=ATOL, rtol=RTOL)


# ----------------------------------------------------------------------------- embedding
def test_masked_embedding_is_a_lookup_with_zeros_at_padding():
    ids = np.array([[3, 1, 4, 1], [5, 9, 2, 6]])
    mask = padding_mask([4, 2], 4)
    model = transformed(lambda i, m: sol.MaskedEmbedding(10, 6)(i, m))
    params = model.init(jax.random.PRNGKey(0), ids, mask)
    out = np.asarray(model.apply(params, None, ids, mask))
    table = np.asarray(params["masked_embedding/~/embed"]["embeddings"])
    assert out.shape == (2, 4, 6)
    np.testing.assert_allclose(out, table[ids] * mask[..., None], atol=0)
    assert np.all(out[1, 2:] == 0.0)


# ----------------------------------------------------------------------------- multi-head
D_MODEL, HEADS = 24, 4  # d_head 6 != heads, so a swapped head split shows


def _mha_inputs(seed=3, b=2, s=5):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(b, s, D_MODEL)).astype(np.float32)


def test_multihead_attention_matches_haiku_with_mapped_weights():
    x = _mha_inputs()
    mask = padding_mask([5, 3], 5)
    ours = transformed(lambda x, m: sol.MultiheadAttention(D_MODEL, HEADS)(x, x, x, m))
    params = ours.init(jax.random.PRNGKey(0), x, mask)
    out, weights = ours.apply(params, None, x, mask)

    def haiku_mha(x, m):
        mha = hk.MultiHeadAttention(
            num_heads=HEADS,
            key_size=D_MODEL // HEADS,
            model_size=D_MODEL,
            w_init=hk.initializers.VarianceScaling(1.0),
        )
        return mha(x, x, x, mask=m[:, None, None, :])

    ref = hk.transform(haiku_mha)
    names = {"query": "proj_q", "key": "proj_k", "value": "proj_v", "linear": "proj_o"}
    ref_params = {
        f"multi_head_attention/{theirs}": params[f"multihead_attention/~/{mine}"]
        for theirs, mine in names.items()
    }
    assert set(ref_params) == set(ref.init(jax.random.PRNGKey(1), x, mask))
    expected = ref.apply(ref_params, None, x, mask)
    np.testing.assert_allclose(out, expected, atol=ATOL, rtol=RTOL)
    assert weights.shape == (2, HEADS, 5, 5)
    assert np.all(np.asarray(weights)[1, :, :, 3:] == 0.0)


def test_multihead_attention_accepts_all_mask_shapes():
    x = _mha_inputs()
    lengths = [5, 2]
    key_mask = padding_mask(lengths, 5)
    full = np.repeat(key_mask[:, None, :], 5, axis=1)
    model = transformed(lambda x, m: sol.MultiheadAttention(D_MODEL, HEADS)(x, x, x, m))
    params = model.init(jax.random.PRNGKey(0), x, key_mask)
    outs = [model.apply(params, None, x, m)[0] for m in (key_mask, key_mask[:, None, :], full)]
    for out in outs[1:]:
        np.testing.assert_allclose(outs[0], out, atol=ATOL, rtol=RTOL)


def test_the_key_bias_moves_no_output_and_gets_no_gradient():
    """What the comment at ``proj_k`` says: the key projection's bias shifts all scores of a
    query by one amount, which the softmax over the keys cancels."""
    x = _mha_inputs()
    mask = padding_mask([5, 3], 5)
    model = transformed(lambda x, m: sol.MultiheadAttention(D_MODEL, HEADS)(x, x, x, m)[0])
    params = model.init(jax.random.PRNGKey(0), x, mask)
    shift = jnp.asarray(np.random.default_rng(4).normal(size=D_MODEL), jnp.float32)

    def with_bias_shift(layer):
        moved = {**params[f"multihead_attention/~/{layer}"]}
        moved["b"] = moved["b"] + shift
        return {**params, f"multihead_attention/~/{layer}": moved}

    out = model.apply(params, None, x, mask)
    np.testing.assert_allclose(
        model.apply(with_bias_shift("proj_k"), None, x, mask),
        out,
        atol=ATOL,
        rtol=RTOL,
        equal_nan=False,
    )
    assert np.abs(model.apply(with_bias_shift("proj_q"), None, x, mask) - out).max() > 1e-2
    grads = jax.grad(lambda p: (model.apply(p, None, x, mask) ** 2).sum())(params)
    size = {k: float(jnp.abs(g["b"]).max()) for k, g in grads.items()}
    assert size["multihead_attention/~/proj_k"] < 1e-5 < size["multihead_attention/~/proj_q"]


def test_multihead_attention_rejects_indivisible_sizes():
    model = transformed(lambda x: sol.MultiheadAttention(10, 3)(x, x, x))
    with pytest.raises(ValueError, match="divisible"):
        model.init(jax.random.PRNGKey(0), jnp.zeros((1, 2, 10)))


# ----------------------------------------------------------------------------- feed-forward
def test_feed_forward_matches_numpy_and_dropout_only_in_training():
    x = _mha_inputs()
    model = transformed(lambda x, t: sol.PositionwiseFeedForward(D_MODEL, 32, 0.5)(x, t))
    params = model.init(jax.random.PRNGKey(0), x, True)
    first = params["positionwise_feed_forward/~/linear_1"]
    second = params["positionwise_feed_forward/~/linear_2"]
    ref = np_linear(second, np.maximum(np_linear(first, x.astype(np.float64)), 0))
    evals = [model.apply(params, jax.random.PRNGKey(s), x, False) for s in (1, 2)]
    np.testing.assert_allclose(evals[0], ref, atol=ATOL, rtol=RTOL)
    np.testing.assert_array_equal(evals[0], evals[1])
    trains = [model.apply(params, jax.random.PRNGKey(s), x, True) for s in (1, 2)]
    assert not np.allclose(trains[0], trains[1]), "dropout should make training passes differ"


# ----------------------------------------------------------------------------- encoder
def _encoder(num_layers=2, p_dropout=0.0):
    def forward(x, mask, is_train=True):
        return sol.TransformerEncoder(num_layers, HEADS, D_MODEL, 32, p_dropout)(x, mask, is_train)

    return forward


def test_encoder_matches_float64_numpy_post_layernorm_blocks():
    x = _mha_inputs(b=3, s=6)
    mask = padding_mask([6, 4, 1], 6)
    funcs = funcs_from_stateful(_encoder(p_dropout=0.3))
    params = funcs.init_params(jax.random.PRNGKey(0), x, mask)
    out = funcs.predict_fw(params, x, mask)
    p = {k: {n: np.asarray(a, np.float64) for n, a in v.items()} for k, v in params.items()}
    ref = x.astype(np.float64)
    for i in range(2):
        ref = np_block(p, f"transformer_encoder/~/block_{i}", ref, mask, HEADS)
    np.testing.assert_allclose(out, ref, atol=1e-4, rtol=1e-4)


def test_encoder_without_positions_is_permutation_equivariant():
    x = _mha_inputs(b=2, s=7)
    mask = padding_mask([7, 5], 7)
    perm = np.random.default_rng(4).permutation(7)
    funcs = funcs_from_stateful(_encoder())
    params = funcs.init_params(jax.random.PRNGKey(0), x, mask)
    out = np.asarray(funcs.predict_fw(params, x, mask))
    out_perm = funcs.predict_fw(params, x[:, perm], mask[:, perm])
    np.testing.assert_allclose(out[:, perm], out_perm, atol=1e-4, rtol=1e-4)


def test_encoder_dropout_is_off_in_eval_and_on_in_training():
    x = _mha_inputs()
    funcs = funcs_from_stateful(_encoder(p_dropout=0.5))
    params = funcs.init_params(jax.random.PRNGKey(0), x, None)
    k1, k2 = jax.random.PRNGKey(1), jax.random.PRNGKey(2)
    np.testing.assert_array_equal(
        funcs.predict(params, k1, x, None, False), funcs.predict(params, k2, x, None, False)
    )
    assert not np.allclose(
        funcs.predict(params, k1, x, None, True), funcs.predict(params, k2, x, None, True)
    )


def test_encoder_attention_maps_have_one_entry_per_layer():
    x = _mha_inputs(b=2, s=5)
    mask = padding_mask([5, 3], 5)

    def maps(x, mask):
        return sol.TransformerEncoder(3, HEADS, D_MODEL, 32, 0.1).get_attention_maps(x, mask)

    model = transformed(maps)
    params = model.init(jax.random.PRNGKey(0), x, mask)
    result = model.apply(params, None, x, mask)
    assert len(result) == 3
    for weights in result:
        assert weights.shape == (2, HEADS, 5, 5)
        np.testing.assert_allclose(np.asarray(weights).sum(-1), 1.0, atol=1e-5)
        assert np.all(np.asarray(weights)[1, :, :, 3:] == 0.0)


# ----------------------------------------------------------------------------- positions
@pytest.mark.parametrize("d_model", [8, 7])
def test_sinusoidal_table_matches_the_closed_form(d_model):
    table = sol.sinusoidal_encoding(50, d_model)
    assert table.shape == (50, d_model) and table.dtype == np.float32
    np.testing.assert_allclose(table, closed_form_pe(50, d_model), atol=1e-6)
    assert np.abs(table).sum() > 0  # the seed tutorial's table is silently all zeros


def test_positional_encoding_adds_the_table_and_checks_the_length():
    x = np.zeros((2, 10, 8), np.float32)
    model = transformed(lambda x, t: sol.PositionalEncoding(8, 12, 0.5)(x, t))
    out = model.apply({}, None, x, False)
    np.testing.assert_allclose(out[0], closed_form_pe(10, 8), atol=1e-6)
    with pytest.raises(ValueError, match="max_len"):
        model.apply({}, None, np.zeros((1, 13, 8), np.float32), False)
    trained = model.apply({}, jax.random.PRNGKey(0), x, True)
    assert np.mean(np.asarray(trained) == 0) > 0.3, "dropout should zero about half the entries"


# ----------------------------------------------------------------------------- classifier
SMALL = ClassifierConfig(
    vocab_size=30, num_layers=2, num_heads=2, d_model=16, d_ff=32, p_dropout=0.2, max_len=12
)


@functools.cache
def classifier_funcs(config: ClassifierConfig = SMALL):
    return funcs_from_stateful(functools.partial(sol.classifier_forward, config=config))


def _reviews(seed=5):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, SMALL.vocab_size, size=(3, 10)).astype(np.int32)
    mask = padding_mask([10, 6, 1], 10)
    return ids * mask, mask


def test_classifier_matches_float64_numpy_reference():
    ids, mask = _reviews()
    funcs = classifier_funcs()
    params = funcs.init_params(jax.random.PRNGKey(0), ids, mask)
    logits = funcs.predict_fw(params, ids, mask)
    assert logits.shape == (3,)
    np.testing.assert_allclose(
        logits, np_classifier(params, ids, mask, SMALL), atol=1e-4, rtol=1e-4
    )


def test_classifier_ignores_padding():
    """The same reviews padded to 10 or to 12 tokens get the same logits."""
    ids, mask = _reviews()
    funcs = classifier_funcs()
    params = funcs.init_params(jax.random.PRNGKey(0), ids, mask)
    longer_ids = np.pad(ids, ((0, 0), (0, 2)), constant_values=7)  # garbage behind the mask
    longer_mask = np.pad(mask, ((0, 0), (0, 2)))
    np.testing.assert_allclose(
        funcs.predict_fw(params, ids, mask),
        funcs.predict_fw(params, longer_ids, longer_mask),
        atol=1e-5,
        rtol=1e-5,
    )


def test_classifier_empty_review_gives_a_finite_logit():
    ids = np.zeros((1, 10), np.int32)
    mask = np.zeros((1, 10), np.int32)
    funcs = classifier_funcs()
    params = funcs.init_params(jax.random.PRNGKey(0), ids, mask)
    assert np.isfinite(np.asarray(funcs.predict_fw(params, ids, mask))).all()


@pytest.mark.parametrize("pooling", ["max", "mean_max"])
def test_masked_pool_variants_ignore_padding(pooling):
    x = np.random.default_rng(6).normal(size=(2, 5, 4)).astype(np.float32)
    mask = padding_mask([5, 2], 5)
    noisy = x.copy()
    noisy[1, 2:] = 1e3  # padding positions hold large garbage
    pooled = np.asarray(sol.masked_pool(noisy, mask, pooling))
    expected_max = np.stack([x[0].max(0), x[1, :2].max(0)])
    np.testing.assert_allclose(pooled[:, -4:], expected_max, atol=1e-6)


@pytest.mark.slow  # over 3 s here
def test_classifier_jit_and_no_jit_agree():
    ids, mask = _reviews()
    jitted = classifier_funcs()
    plain = funcs_from_stateful(functools.partial(sol.classifier_forward, config=SMALL), jit=False)
    params = jitted.init_params(jax.random.PRNGKey(0), ids, mask)
    key = jax.random.PRNGKey(1)
    for is_train in (False, True):
        np.testing.assert_allclose(
            jitted.predict(params, key, ids, mask, is_train),
            plain.predict(params, key, ids, mask, is_train=is_train),
            atol=1e-5,
            rtol=1e-5,
        )
