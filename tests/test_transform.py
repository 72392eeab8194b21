"""funcs_from_stateful: the is_train flag is static under jit, by position or by keyword."""

from __future__ import annotations

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from m2l_nlp.transform import funcs_from_stateful, init_and_pred, pure_apply


def forward(x, mask, is_train=True):
    """A tiny model whose graph depends on the Python flag (dropout only when training)."""
    h = hk.Linear(8)(x) * mask[..., None]
    if is_train:
        h = hk.dropout(hk.next_rng_key(), 0.5, h)
    return hk.Linear(1)(h)[..., 0]


X = np.random.default_rng(0).normal(size=(2, 5, 3)).astype(np.float32)
MASK = np.ones((2, 5), np.float32)
KEY = jax.random.PRNGKey(0)


@pytest.fixture(scope="module")
def funcs():
    return funcs_from_stateful(forward)


@pytest.fixture(scope="module")
def params(funcs):
    return funcs.init_params(KEY, X, MASK)


def test_plain_jit_of_apply_fails_with_a_positional_flag():
    """The bug this helper exists for: jitting model.apply traces the flag."""
    model = hk.transform(forward)
    params = model.init(KEY, X, MASK)
    with pytest.raises(jax.errors.TracerBoolConversionError):
        jax.jit(model.apply)(params, KEY, X, MASK, True)


def test_flag_by_position_and_by_keyword_agree_under_jit(funcs, params):
    by_position = funcs.predict(params, KEY, X, MASK, True)
    by_keyword = funcs.predict(params, KEY, X, MASK, is_train=True)
    np.testing.assert_array_equal(by_position, by_keyword)
    assert not np.allclose(by_position, funcs.predict(params, KEY, X, MASK, False))


def test_default_flag_is_the_forward_default(funcs, params):
    np.testing.assert_array_equal(
        funcs.predict(params, KEY, X, MASK), funcs.predict(params, KEY, X, MASK, True)
    )


def test_predict_fw_is_the_deterministic_forward(funcs, params):
    np.testing.assert_allclose(
        funcs.predict_fw(params, X, MASK), funcs.predict(params, KEY, X, MASK, False), rtol=1e-6
    )
    np.testing.assert_allclose(
        funcs.predict_fw(params, X, MASK), funcs.model_fw.apply(params, X, MASK), rtol=1e-6
    )


def test_jit_and_no_jit_agree(funcs, params):
    plain = funcs_from_stateful(forward, jit=False)
    for flag in (True, False):
        np.testing.assert_allclose(
            funcs.predict(params, KEY, X, MASK, flag),
            plain.predict(params, KEY, X, MASK, is_train=flag),
            rtol=1e-6,
        )


def test_a_traced_flag_gets_a_clear_error(funcs, params):
    with pytest.raises(TypeError, match="is_train must be a Python bool"):
        funcs.predict(params, KEY, X, MASK, jnp.array(True))


def test_the_flag_compiles_once_per_value(funcs, params):
    traces = []

    def counting(x, mask, is_train=True):
        traces.append(is_train)
        return forward(x, mask, is_train)

    counted = funcs_from_stateful(counting)
    for _ in range(3):
        counted.predict(params, KEY, X, MASK, True)
        counted.predict(params, KEY, X, MASK, is_train=False)
    assert traces == [True, False]


def test_init_and_pred_gives_params_and_output():
    params, out = init_and_pred(forward, KEY, X, MASK, False)
    assert out.shape == (2, 5)
    assert set(params) == {"linear", "linear_1"}


def test_every_tutorial_call_form_works(funcs, params):
    """The tutorial's calls, jitted and not, flag by position or keyword, all agree."""
    for f in (funcs, funcs_from_stateful(forward, jit=False)):
        want = f.predict(params, KEY, X, MASK, False)
        np.testing.assert_allclose(f.predict_fw(params, X, MASK, False), want, rtol=1e-6)
        np.testing.assert_allclose(f.predict_fw(params, X, MASK, is_train=False), want, rtol=1e-6)
        np.testing.assert_allclose(f.model_fw.apply(params, X, MASK, False), want, rtol=1e-6)
        np.testing.assert_allclose(f.predict(params, KEY, X, MASK, is_train=False), want, rtol=1e-6)
        trained = f.model.apply(params, KEY, X, MASK, True)
        np.testing.assert_allclose(f.predict(params, KEY, X, MASK, True), trained, rtol=1e-6)
        assert set(f.init_params(KEY, X, MASK, True)) == set(params)


def test_the_deterministic_forward_refuses_training_mode(funcs, params):
    with pytest.raises(ValueError, match="evaluation mode"):
        funcs.predict_fw(params, X, MASK, True)
    with pytest.raises(TypeError, match="is_train must be a Python bool"):
        funcs.model_fw.apply(params, X, MASK, np.bool_(False))


def test_pure_apply_reads_the_parameters_without_a_key(funcs, params):
    """A trained model's parameters read another way (here: the evaluation forward, with no
    random key to pass) give the deterministic forward's result."""
    apply = pure_apply(lambda x, mask: forward(x, mask, is_train=False))
    np.testing.assert_allclose(apply(params, X, MASK), funcs.predict_fw(params, X, MASK), rtol=1e-6)
