"""Helpers for writing checks: array assertions with messages in words, and haiku runners.

Every assertion raises :class:`~m2l_nlp.grading.checks.registry.CheckFailure` with a sentence that
names the quantity, what was expected and what was found (index and values included).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import zlib
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import haiku as hk
import jax
import jax.numpy as jnp
import numpy as np

from m2l_nlp import devices
from m2l_nlp.grading.checks.registry import CheckFailure
from m2l_nlp.transform import funcs_from_stateful

ATOL = 1e-5
RTOL = 1e-4

Build = Callable[[Any], Callable[..., Any]]
BUILD_MODULES = "m2l_nlp.grading.practicals."  # where a build named in a message may come from


@dataclasses.dataclass(frozen=True)
class BuildSpec:
    """A build function by name: ``factory(*args)`` in ``module`` returns ``build(ns)``.

    Named rather than a closure, so that the process running a student's code can rebuild
    it from plain data (see :mod:`m2l_nlp.grading.trusted.remote`). Call it like the build.
    """

    module: str
    name: str
    args: tuple = ()

    def __call__(self, namespace: Any) -> Callable[..., Any]:
        if not self.module.startswith(BUILD_MODULES) and self.module != __name__:
            raise ValueError(f"builds come from {BUILD_MODULES}* or {__name__}, not {self.module}")
        # By name, from a message: the one data-driven import here, and only of the checks'
        # own modules (a practical's, already imported by the catalog where checks run, or
        # this one, whose drawn() wraps another build).
        factory = getattr(importlib.import_module(self.module), self.name)
        return getattr(factory, "factory", factory)(*self.args)(namespace)

    def plain(self) -> dict[str, Any]:
        return {"module": self.module, "name": self.name, "args": list(self.args)}


def builder(factory: Callable[..., Build]) -> Callable[..., BuildSpec]:
    """Decorator for a module-level ``factory(*args) -> build``: calling it gives a
    :class:`BuildSpec` (args must be plain: numbers, strings, booleans, tuples)."""

    def spec(*args: Any) -> BuildSpec:
        return BuildSpec(factory.__module__, factory.__name__, tuple(args))

    spec.factory = factory  # type: ignore[attr-defined]
    spec.__name__ = factory.__name__
    spec.__doc__ = factory.__doc__
    return spec


class Elsewhere:
    """Base of a namespace whose code runs elsewhere (another process) or was recorded:
    :func:`run_haiku` hands it the whole call (``run_haiku(build, params, args, key, jit)``)."""

    def run_haiku(
        self, build: BuildSpec, params: Any, args: tuple, key: Any = None, jit: bool = False
    ) -> Any:
        raise NotImplementedError


class ElsewhereFunction:
    """Base of a function that runs elsewhere: ``jitted()`` gives its jitted version."""

    def jitted(self, static_argnums: tuple[int, ...] = ()) -> Callable[..., Any]:
        raise NotImplementedError


def jitted(func: Callable[..., Any], *static_argnums: int) -> Callable[..., Any]:
    """``jax.jit(func, static_argnums=...)``, also for a student's function that runs in
    another process."""
    if isinstance(func, ElsewhereFunction):
        return func.jitted(static_argnums)
    return _jit(func, static_argnums)


def _jit(func: Callable[..., Any], static_argnums: tuple[int, ...] = ()) -> Callable[..., Any]:
    """``jax.jit`` with the checking flags as the program's options where the process lacks
    them (in a notebook: :func:`~m2l_nlp.devices.checking_compiler_options`)."""
    options = devices.checking_compiler_options()
    return jax.jit(func, static_argnums=static_argnums, compiler_options=options or None)


def fail(message: str) -> None:
    """Raise :class:`CheckFailure` with ``message``."""
    raise CheckFailure(message)


def _index(flat: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat, shape))


def expect_array(
    value: Any,
    name: str,
    shape: Sequence[int] | None = None,
    dtype: Any = None,
    finite: bool = True,
    axes: str = "",
) -> np.ndarray:
    """Check that ``value`` is an array of ``shape``/``dtype`` without NaN or inf.

    ``axes`` names the expected axes for the message, e.g. ``"(B, S, D)"``.
    """
    if isinstance(value, (tuple, list)):
        fail(
            f"{name} should be one array, but yours is a {type(value).__name__} of "
            f"{len(value)} items"
        )
    if value is None:
        fail(f"{name} should be an array, but yours is None (did you forget a `return`?)")
    array = np.asarray(value)
    if shape is not None and array.shape != tuple(shape):
        fail(f"{name} should have shape {tuple(shape)} {axes}; yours has shape {array.shape}")
    if dtype is not None and array.dtype != np.dtype(dtype):
        fail(f"{name} should have dtype {np.dtype(dtype).name}; yours has dtype {array.dtype}")
    if finite and np.issubdtype(array.dtype, np.inexact):
        bad = ~np.isfinite(array)
        if bad.any():
            where = _index(int(np.argmax(bad)), array.shape)
            kind = "NaN" if np.isnan(array[where]) else "infinite"
            fail(
                f"{name}: {kind} values ({int(bad.sum())} of {array.size}), the first at index "
                f"{where}"
            )
    return array


def expect_close(
    got: Any,
    want: Any,
    name: str,
    atol: float = ATOL,
    rtol: float = RTOL,
    where: Any = None,
    hint: str = "",
    versus: str = "the reference",
) -> None:
    """Check ``got`` against ``want`` (optionally only where ``where`` is true).

    ``want`` is the reference's result unless ``versus`` names what else it is (e.g. "your
    evaluation-mode output"), for the message.
    """
    want = np.asarray(want)
    try:
        got = expect_array(got, name, shape=want.shape, finite=False)
    except CheckFailure as failure:  # a wrong shape has its hint too (a mask's, say)
        if not hint:
            raise
        raise CheckFailure(f"{failure}. {hint}") from None
    if got.dtype.kind not in "fciub":
        fail(f"{name} should hold numbers; yours has dtype {got.dtype}")
    got64 = got.astype(np.float64)
    want64 = want.astype(np.float64)
    select = np.ones(want.shape, bool) if where is None else np.broadcast_to(where, want.shape)
    nan_got = np.isnan(got64) & select & ~np.isnan(want64)
    if nan_got.any():
        at = _index(int(np.argmax(nan_got)), want.shape)
        fail(f"{name}: NaN at index {at}, where {versus} has {want64[at]:.6g}. {hint}".rstrip())
    err = np.where(select, np.abs(got64 - want64) - (atol + rtol * np.abs(want64)), -np.inf)
    if (err > 0).any():
        at = _index(int(np.argmax(err)), want.shape)
        diff = np.abs(got64 - want64)[at]
        fail(
            f"{name}: mismatch with {versus}: at index {at} yours is {got64[at]:.6g}, "
            f"{versus} has {want64[at]:.6g} (difference {diff:.3g}; {int((err > 0).sum())} of "
            f"{int(select.sum())} values are off by more than atol={atol:g} + rtol={rtol:g}). "
            f"{hint}".rstrip()
        )


def expect_rows_sum_to_one(weights: Any, name: str, rows: Any = None) -> None:
    """Attention weights are >= 0 and each row sums to 1 over the last axis."""
    w = expect_array(weights, name, finite=False).astype(np.float64)
    if (w < -1e-6).any():
        at = _index(int(np.argmin(w)), w.shape)
        fail(f"{name} should be >= 0 (they come from a softmax); yours is {w[at]:.4g} at {at}")
    sums = w.sum(axis=-1)
    select = np.ones(sums.shape, bool) if rows is None else np.broadcast_to(rows, sums.shape)
    off = np.where(select, np.abs(sums - 1.0), 0.0)
    if np.isnan(off).any() or (off > 1e-4).any():
        at = _index(int(np.nanargmax(np.where(np.isnan(off), np.inf, off))), sums.shape)
        fail(
            f"{name} should sum to 1 over the last axis (the keys); yours sum to "
            f"{sums[at]:.4g} at index {at}. Is the softmax taken over the last axis?"
        )


_SEED = [0]  # the grading seed; 0 for local checks (the handout's records are made with it)


def grading_seed() -> int:
    """The seed the checks' inputs are drawn from (see :func:`seeded`)."""
    return _SEED[0]


@contextlib.contextmanager
def seeded(seed: int) -> Iterator[None]:
    """Draw every check's inputs from ``seed`` inside the block. The trusted grader picks a
    fresh one per submission, so that answers recorded from another run match nothing."""
    saved, _SEED[0] = _SEED[0], int(seed)
    try:
        yield
    finally:
        _SEED[0] = saved


def rng_for(*names: str) -> np.random.Generator:
    """A NumPy generator seeded by the names (and the grading seed, when not 0), so every
    check sees the same inputs each run with the same seed."""
    entropy = zlib.crc32("/".join(names).encode())
    return np.random.default_rng(entropy if _SEED[0] == 0 else [entropy, _SEED[0]])


def key_for(seed: int) -> jax.Array:
    """A JAX random key for a check's ``seed``, mixed with the grading seed when not 0."""
    if _SEED[0] != 0:
        seed = int(np.random.default_rng([seed, _SEED[0]]).integers(2**31))
    return jax.random.PRNGKey(seed)


def normal(rng: np.random.Generator, *shape: int) -> np.ndarray:
    """Float32 standard normal numbers of ``shape``."""
    return rng.standard_normal(shape).astype(np.float32)


def perturb(params: hk.Params, rng: np.random.Generator, scale: float = 0.3) -> hk.Params:
    """Add noise to every parameter, so that layer norms, biases and swapped sub-modules
    all matter (at initialisation a LayerNorm is the identity map and biases are 0)."""
    return jax.tree_util.tree_map(  # in NumPy: no JAX operation to compile per shape
        lambda p: np.asarray(p) + scale * rng.standard_normal(p.shape).astype(p.dtype), params
    )


def run_haiku(
    build: Build,
    namespace: Any,
    params: hk.Params | None,
    *args: Any,
    key: jax.Array | None = None,
    jit: bool = True,
) -> Any:
    """Transform ``build(namespace)``: ``init`` if ``params`` is None, else ``apply``.

    ``build(ns)`` returns a function of arrays that creates modules from ``ns`` (the
    student's namespace or the reference module) with fixed names, so both share params.
    It is transformed by the course's :func:`~m2l_nlp.transform.funcs_from_stateful`, as in
    the practicals (its ``model``: ``init(key, *args)``, ``apply(params, key, *args)``).
    """
    if isinstance(namespace, Elsewhere):  # another process, or recorded results
        return namespace.run_haiku(build, params, args, key=key, jit=jit)
    transformed = funcs_from_stateful(build(namespace), jit=False).model
    if params is None:
        init = _jit(transformed.init) if jit else transformed.init
        return init(key if key is not None else key_for(0), *args)
    apply = _jit(transformed.apply) if jit else transformed.apply
    return apply(params, key, *args)


def expect_dropout_only_in_training(
    ctx: Any, make: Callable[[float, bool], Build], *args: Any, what: str
) -> None:
    """Dropout acts in training only, needs no random key in evaluation, and rate 0 is a no-op.

    ``make(p_dropout, is_train)`` returns a build function (see :func:`run_haiku`); where
    the forward returns a tuple, its first element is judged. ``ctx`` is a check's context
    (``ref``, ``student``, ``rng``, ``key``).
    """

    def output(p: float, is_train: bool, params: hk.Params, key: jax.Array | None = None):
        out = run_haiku(make(p, is_train), ctx.student, params, *args, key=key)
        return out[0] if isinstance(out, tuple) else out

    params = perturb(run_haiku(make(0.5, True), ctx.ref, None, *args), ctx.rng("params"))
    evals = expect_array(output(0.5, False, params), f"the output of {what} in evaluation mode")
    train = expect_array(
        output(0.5, True, params, ctx.key(1)), f"the output of {what} in training mode"
    )
    if train.shape != evals.shape:  # compared unbroadcast: two replies could make gigabytes
        fail(
            f"the output of {what} has shape {train.shape} in training mode but "
            f"{evals.shape} in evaluation mode: they should be the same"
        )
    if np.allclose(train, evals, atol=1e-6):
        fail(
            f"with p_dropout=0.5 and is_train=True the output of {what} equals the evaluation "
            "output: dropout should be active while training (hk.dropout with hk.next_rng_key())"
        )

    # At p=0.5 a rate and a keep probability are the same number. Where the student's masks
    # are the reference's (the same key, drawn in the same order), they must stay so at a low
    # rate; keys drawn in another order match at neither, and the statistics judge them.
    def reference(p: float, key: jax.Array) -> np.ndarray:
        return _first(run_haiku(make(p, True), ctx.ref, params, *args, key=key))

    want_half, want_low = reference(0.5, ctx.key(1)), reference(0.1, ctx.key(3))
    if train.shape == want_half.shape and np.allclose(train, want_half, atol=1e-4, rtol=1e-3):
        low = expect_array(
            output(0.1, True, params, ctx.key(3)), f"the output of {what} in training mode"
        )
        if low.shape != want_low.shape or not np.allclose(low, want_low, atol=1e-4, rtol=1e-3):
            fail(
                f"with the reference's random key the training-mode output of {what} is the "
                "reference's at p_dropout=0.5 but not at p_dropout=0.1: hk.dropout(key, rate, "
                "x) takes the rate of dropping (p_dropout), not the probability of keeping"
            )
    expect_close(
        output(0.0, True, params, ctx.key(2)),
        output(0.0, False, params),
        f"the training-mode output of {what} with p_dropout=0",
        hint="With a dropout rate of 0, training and evaluation must give the same output.",
        versus="your evaluation-mode output",
    )


def compare_module(
    ctx: Any,
    build: BuildSpec,
    *args: Any,
    names: tuple[str, ...] = ("output",),
    jit: bool = True,
    hint: str = "",
) -> tuple[Any, Any]:
    """Initialise the reference, perturb the parameters, apply the reference and the
    student's module with them and compare the outputs, one per name: ``(params, got)``."""
    rng = ctx.rng("params")
    params = perturb(run_haiku(build, ctx.ref, None, *args), rng)
    want = run_haiku(build, ctx.ref, params, *args)
    got = run_haiku(build, ctx.student, params, *args, jit=jit)
    if len(names) == 1:
        want, got = (want,), (got,)
    elif not isinstance(got, tuple) or len(got) != len(names):
        fail(f"should return a tuple ({', '.join(names)}); yours returned {kind_of(got)}")
    for name, g, w in zip(names, got, want, strict=True):
        expect_close(g, w, name, hint=hint)
    return params, got


def expect_tuple(value: Any, n: int, what: str) -> tuple | list:
    """``value`` is a tuple (or list) of ``n`` items, as ``what`` should return."""
    if not isinstance(value, (tuple, list)) or len(value) != n:
        fail(f"{what} should return a tuple of {n} items; yours returned {kind_of(value)}")
    return value


def expect_same_as_reference(
    ctx: Any, name: str, *args: Any, static: tuple[int, ...] = (), what: str, hint: str = ""
) -> Any:
    """The student's function ``name`` gives the reference's result on ``args``, both under
    ``jax.jit`` (``static``: its static argument numbers); returns the reference's."""
    want = jitted(getattr(ctx.ref, name), *static)(*args)
    got = jitted(getattr(ctx.student, name), *static)(*args)
    expect_close(got, want, what, hint=hint)
    return want


def kind_of(value: Any) -> str:
    """What a returned value is, in words (for a message)."""
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} items"
    if hasattr(value, "shape"):
        return f"one array of shape {tuple(value.shape)}"
    return type(value).__name__


DRAW_P = 0.5  # the dropout rate of the training-mode comparisons: the most noise per site
DRAW_KEY = 11  # their random key (the reference's answer is recorded for it)
DRAWS = 4096  # copies of the input in one call, each with its own dropout masks
# Above this mean squared z-score (about 1 where two outputs vary alike, and it grows with
# DRAWS where they do not), a training output varies otherwise than the reference's.
DRAW_SCORE = 5.0


def over_draws(forward: Callable[..., Any], copies: int = DRAWS) -> Callable[..., Any]:
    """``forward`` run once on ``copies`` stacked copies of its array inputs (along axis 0),
    so that every copy gets its own dropout masks. Returns the first copy's output, and the
    mean, variance and fourth central moment of the output over the copies (where ``forward``
    returns a tuple, of its first element): what :func:`expect_trains_like` compares."""

    def run(*args: Any) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
        tiled = [jnp.tile(a, (copies,) + (1,) * (jnp.ndim(a) - 1)) for a in args]
        out = forward(*tiled)
        out = jnp.asarray(out[0] if isinstance(out, tuple) else out)
        out = out.reshape(copies, out.shape[0] // copies, *out.shape[1:])
        mean = out.mean(0)
        centred = out - mean
        return out[0], mean, (centred**2).mean(0), (centred**4).mean(0)

    return run


@builder
def drawn(module: str, name: str, args: tuple, copies: int) -> Build:
    """The build ``module.name(*args)`` (a module in training mode) run through
    :func:`over_draws` on ``copies`` copies of its inputs; see :func:`draws_of`."""
    training = BuildSpec(module, name, tuple(args))
    return lambda namespace: over_draws(training(namespace), copies)


def draws_of(training: BuildSpec) -> Callable[[int], BuildSpec]:
    """``make(copies)`` for :func:`expect_trains_like`, from ``training``: the build of the
    module in training mode at ``p_dropout=DRAW_P``, the same build a check runs once."""
    return functools.partial(drawn, training.module, training.name, training.args)


def draw_scores(got: Sequence[np.ndarray], want: Sequence[np.ndarray], copies: int) -> np.ndarray:
    """Per element, the mean of the squared z-scores of the difference of the means and of the
    difference of the variances of two outputs drawn ``copies`` times each (``got`` and
    ``want`` as :func:`over_draws` returns them): about 1 for two outputs that vary alike."""
    _, mean, var, m4 = (np.asarray(a, np.float64) for a in got)
    _, mean_w, var_w, m4_w = (np.asarray(a, np.float64) for a in want)
    floor = 1e-9 * (1.0 + np.abs(mean_w)) ** 2  # elements no dropout reaches: both ~0
    z_mean = (mean - mean_w) / np.sqrt((var + var_w) / copies + floor)
    spread = np.maximum(m4 - var**2, 0) + np.maximum(m4_w - var_w**2, 0)
    z_var = (var - var_w) / np.sqrt(spread / copies + floor)
    return (z_mean**2 + z_var**2) / 2


def _first(out: Any) -> np.ndarray:
    """A module's main output: the first of a tuple (an output and its attention maps)."""
    return np.asarray(out[0] if isinstance(out, tuple) else out)


def expect_trains_like(
    ctx: Any,
    make: Callable[[int], BuildSpec],
    *args: Any,
    init: BuildSpec,
    what: str,
    hint: str = "",
    draws: int = DRAWS,
) -> None:
    """The student's module in training mode gives the reference's output: exactly with the
    same random key where both draw their dropout keys in the same order, else (keys drawn in
    another order) the same distribution over ``draws`` independent draws of the masks.

    ``make(copies)`` is a build that runs the module in training mode through
    :func:`over_draws`; ``init`` a build with the same parameters (the evaluation-mode one: no
    dropout to compile). The distributions are compared element by element
    (:func:`draw_scores`); the mean score is about 1 for two outputs that vary alike and grows
    with ``draws`` for one whose dropout is elsewhere, missing or doubled (a model of many
    dropout sites, each a small part of the noise, needs more draws).
    """
    params = perturb(run_haiku(init, ctx.ref, None, *args), ctx.rng("params"))
    key = ctx.key(DRAW_KEY)

    def run(namespace: Any, copies: int) -> list[np.ndarray]:
        out = run_haiku(make(copies), namespace, params, *args, key=key)
        if not isinstance(out, tuple) or len(out) != 4:
            fail(f"the training-mode statistics of {what} should be 4 arrays; got {kind_of(out)}")
        return [expect_array(o, f"the training-mode output of {what}") for o in out]

    # Recorded answers (a handout's, the trusted grader's) hold what the reference was asked,
    # whatever the student answers: there, the reference is asked both questions at once.
    recorded = isinstance(ctx.ref, Elsewhere)
    want = run(ctx.ref, 1)
    want_many = run(ctx.ref, draws) if recorded else None
    evaluated = _first(run_haiku(init, ctx.ref, params, *args))
    got = run(ctx.student, 1)
    if got[0].shape == want[0].shape and np.allclose(got[0], want[0], atol=1e-4, rtol=1e-3):
        return  # the same masks on the same tensors: nothing left to compare
    # Training mode is compared once evaluation mode matches: a module already wrong without
    # dropout is told so, without the many draws (seconds for a whole model) saying it again.
    mine = _first(run_haiku(init, ctx.student, params, *args))
    mine = expect_array(mine, f"the evaluation-mode output of {what}")
    if mine.shape != evaluated.shape or not np.allclose(mine, evaluated, atol=1e-3, rtol=1e-2):
        fail(
            f"the evaluation-mode output of {what} already differs from the reference's (the "
            "checks above say where): this check compares training mode once evaluation mode "
            "matches"
        )
    want = want_many if want_many is not None else run(ctx.ref, draws)
    got = run(ctx.student, draws)
    if got[0].shape != want[0].shape:
        fail(
            f"the training-mode output of {what} has shape {got[0].shape}; the reference's "
            f"has shape {want[0].shape}"
        )
    score = draw_scores(got, want, draws)
    if score.mean() <= DRAW_SCORE:
        return
    at = _index(int(np.argmax(score)), score.shape)
    mean, var = got[1].astype(np.float64), got[2].astype(np.float64)
    if var.max() <= 1e-12:
        found = "it does not vary at all: no dropout acts in training"
    else:
        found = (
            f"at index {at} its standard deviation is {np.sqrt(var[at]):.3g} (the reference's "
            f"{np.sqrt(want[2][at]):.3g}) and its mean {mean[at]:.3g} (the reference's "
            f"{want[1][at]:.3g})"
        )
    fail(
        f"in training mode (p_dropout={DRAW_P}) the output of {what} varies otherwise than "
        f"the reference's over {draws} draws of the dropout masks: {found}. {hint}".rstrip()
    )


def expect_module_trains_like(
    ctx: Any,
    make: Callable[[float, bool], BuildSpec],
    *args: Any,
    what: str,
    hint: str = "",
    draws: int = DRAWS,
) -> None:
    """:func:`expect_trains_like` for a module that ``make(p_dropout, is_train)`` builds, as
    :func:`expect_dropout_only_in_training` takes it: trained at ``DRAW_P``, with the
    parameters of its evaluation mode."""
    training, evaluation = make(DRAW_P, True), make(0.1, False)
    expect_trains_like(
        ctx, draws_of(training), *args, init=evaluation, what=what, hint=hint, draws=draws
    )


@dataclasses.dataclass(frozen=True)
class WithDropout:
    """A module with dropout as its two dropout checks see it, declared once: ``make``
    builds it (``make(p_dropout, is_train)``), ``inputs(rng)`` draws a tuple of inputs for
    it, ``what`` names it in the messages."""

    make: Callable[[float, bool], BuildSpec]
    inputs: Callable[[np.random.Generator], tuple]
    what: str

    def expect_evaluation_matches(self, ctx: Any, hint: str = "") -> None:
        """:func:`compare_module` of its output in evaluation mode (at p_dropout 0.1), on inputs
        drawn for the check: the gate of a module whose output is all there is to compare."""
        args = self.inputs(ctx.rng())
        compare_module(
            ctx, self.make(0.1, False), *args, names=(f"the output of {self.what}",), hint=hint
        )

    def expect_only_in_training(self, ctx: Any) -> None:
        """:func:`expect_dropout_only_in_training`, on inputs drawn for the check."""
        expect_dropout_only_in_training(ctx, self.make, *self.inputs(ctx.rng()), what=self.what)

    def expect_trains_like(self, ctx: Any, hint: str = "") -> None:
        """:func:`expect_module_trains_like`, on inputs drawn for the check."""
        args = self.inputs(ctx.rng())
        expect_module_trains_like(ctx, self.make, *args, what=self.what, hint=hint)
