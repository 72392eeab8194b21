"""Helpers around ``hk.transform`` for forward functions that take an ``is_train`` flag.

The flag switches dropout on and off. It is a Python ``bool`` that changes the traced graph,
so under ``jax.jit`` it must be *static*; otherwise ``if is_train:`` inside a module meets a
tracer and fails with ``TracerBoolConversionError``. The functions here make it static
whether it is passed by position or by keyword.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable, Hashable
from typing import Any, NamedTuple

import haiku as hk
import jax
import numpy as np

FLAG = "is_train"


class ModelFuncs(NamedTuple):
    """What :func:`funcs_from_stateful` returns (it unpacks like a 5-tuple).

    - ``model``: ``hk.transform(forward)``; ``model.apply(params, key, *args)``.
    - ``model_fw``: the deterministic forward (``is_train=False``, no key):
      ``model_fw.apply(params, *args)``.
    - ``predict(params, key, *args, **kwargs)``: ``model.apply``, jitted if asked.
    - ``predict_fw(params, *args, **kwargs)``: ``model_fw.apply``, jitted if asked.
    - ``init_params(key, *args, **kwargs)``: ``model.init``, jitted if asked.
    """

    model: hk.Transformed
    model_fw: hk.Transformed
    predict: Callable[..., Any]
    predict_fw: Callable[..., Any]
    init_params: Callable[..., Any]


def _is_static(value: Any) -> bool:
    """Python flags and settings (bools, strings, configs, None) are static under jit."""
    if isinstance(value, (jax.Array, np.ndarray, np.generic)):
        return False
    return isinstance(value, (bool, str, type(None))) or (
        dataclasses.is_dataclass(value) and isinstance(value, Hashable)
    )


def check_flag(value: Any) -> None:
    """Raise a clear ``TypeError`` unless ``value`` is a Python bool (a traced or NumPy flag
    cannot choose the graph)."""
    if not isinstance(value, bool):
        raise TypeError(f"{FLAG} must be a Python bool (True or False), got {value!r}")


def _with_static_flag(
    fn: Callable[..., Any], signature: inspect.Signature, n_lead: int, jit: bool
) -> Callable[..., Any]:
    """Wrap ``fn(*lead, *args, **kwargs)`` so that flags and settings are static under jit.

    ``n_lead`` leading arguments (params, key) are passed through; the rest are bound to the
    forward's ``signature``, so ``is_train`` is found by position or by name. Arrays are
    traced; bools, strings, ``None`` and frozen dataclasses (configs) are static.
    """

    def call(lead, arrays, static):
        return fn(*lead, **arrays, **dict(static))

    compiled = jax.jit(call, static_argnames="static") if jit else call

    def wrapped(*args, **kwargs):
        lead, rest = args[:n_lead], args[n_lead:]
        bound = signature.bind(*rest, **kwargs)
        bound.apply_defaults()
        if FLAG in bound.arguments:
            check_flag(bound.arguments[FLAG])
        arrays = {k: v for k, v in bound.arguments.items() if not _is_static(v)}
        static = tuple(sorted((k, v) for k, v in bound.arguments.items() if _is_static(v)))
        return compiled(tuple(lead), arrays, static)

    return wrapped


def _deterministic(
    forward: Callable[..., Any], signature: inspect.Signature
) -> tuple[Callable[..., Any], inspect.Signature]:
    """The forward with ``is_train=False`` and its signature (the flag defaults to False).

    The flag may still be passed, as the tutorial does (``model_fw.apply(params, x, mask,
    False)``), but only as ``False``: this function has no dropout key to train with.
    """
    params = [
        p.replace(default=False) if p.name == FLAG else p for p in signature.parameters.values()
    ]
    fw_signature = signature.replace(parameters=params)

    def deterministic(*args, **kwargs):
        bound = fw_signature.bind(*args, **kwargs)
        bound.apply_defaults()
        check_flag(bound.arguments[FLAG])
        if bound.arguments[FLAG]:
            raise ValueError(
                "model_fw / predict_fw run the model in evaluation mode (is_train=False): for "
                "training mode use model.apply or predict, which take a random key for dropout"
            )
        return forward(*bound.args, **bound.kwargs)

    return deterministic, fw_signature


def funcs_from_stateful(stateful_forward: Callable[..., Any], jit: bool = True) -> ModelFuncs:
    """Turn a forward function that builds haiku modules into pure, (jitted) functions.

    ``stateful_forward(*args, is_train=True)`` builds modules and returns the output. Inputs
    are arrays; ``is_train`` (if the forward has it) may be given by position or keyword and
    is treated as static, so ``predict(params, key, x, mask, True)`` and
    ``predict(params, key, x, mask, is_train=True)`` both compile (once per flag value).
    The deterministic pair accepts the flag too, as ``False`` or left out:
    ``predict_fw(params, x, mask)``, ``predict_fw(params, x, mask, False)``,
    ``model_fw.apply(params, x, mask, is_train=False)``.

    This module is the one place in the course where ``hk.transform`` is called.
    """
    signature = inspect.signature(stateful_forward)
    model = hk.transform(stateful_forward)
    if FLAG in signature.parameters:
        deterministic, fw_signature = _deterministic(stateful_forward, signature)
    else:
        deterministic, fw_signature = stateful_forward, signature
    model_fw = hk.without_apply_rng(hk.transform(deterministic))

    predict = _with_static_flag(model.apply, signature, 2, jit)
    init_params = _with_static_flag(model.init, signature, 1, jit)
    predict_fw = _with_static_flag(model_fw.apply, fw_signature, 1, jit)
    return ModelFuncs(model, model_fw, predict, predict_fw, init_params)


def pure_apply(stateful_fn: Callable[..., Any]) -> Callable[..., Any]:
    """``apply(params, *args, **kwargs)`` of a function that builds haiku modules and draws
    no random numbers (evaluation mode): for reading a trained model's parameters in another
    way than its forward, such as one position at a time while decoding."""
    return hk.without_apply_rng(hk.transform(stateful_fn)).apply


def init_and_pred(
    stateful_forward: Callable[..., Any], key: jax.Array, *args: Any, **kwargs: Any
) -> tuple[hk.Params, Any]:
    """Initialise parameters and run one forward pass: ``(params, output)``.

    Handy in a notebook cell to see a module's parameter shapes and output shape at once.
    """
    funcs = funcs_from_stateful(stateful_forward, jit=False)
    init_key, apply_key = jax.random.split(key)
    params = funcs.init_params(init_key, *args, **kwargs)
    return params, funcs.predict(params, apply_key, *args, **kwargs)
