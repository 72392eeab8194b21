"""Accelerators, device placement and the data-parallel mesh.

The same training code runs on a CPU, one GPU/TPU, or several devices: a one-axis
:class:`jax.sharding.Mesh` named ``"data"`` (automatic axis) spans the local devices,
parameters are replicated and every batch is split along its first axis.

Call :func:`configure_environment` in entry points *before* JAX starts (the CLI does), so
that JAX does not grab most of the GPU memory at start-up.
"""

from __future__ import annotations

import contextlib
import functools
import os
from collections.abc import Iterator, Sequence
from typing import Any

DATA_AXIS = "data"
COMPILATION_CACHE_MAX_BYTES = 1 << 30  # beyond 1 GiB, the least recently used programs go


def configure_environment(
    compilation_cache: str | os.PathLike | None = None,
    compilation_cache_max_bytes: int = COMPILATION_CACHE_MAX_BYTES,
) -> None:
    """Set XLA environment defaults; effective only if JAX has not been imported yet.

    ``XLA_PYTHON_CLIENT_PREALLOCATE=false``: allocate GPU memory on demand instead of 75%
    of it at start-up (Colab shares the GPU with the notebook's other work).
    ``JAX_COMPILATION_CACHE_DIR=compilation_cache`` (if given): keep compiled programs on
    disk, so that a second run skips compiling (on a GPU most of a short run's time), and
    ``JAX_COMPILATION_CACHE_MAX_SIZE=compilation_cache_max_bytes``, so that the cache does
    not grow without end (JAX then drops the least recently used programs; it needs the
    ``filelock`` package for that, and without it the cache stays unbounded). A value the
    user already set wins, for each; a cache folder the user set is not bounded by us, and
    an empty ``JAX_COMPILATION_CACHE_DIR`` turns the cache off.
    """
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    if compilation_cache is not None and "JAX_COMPILATION_CACHE_DIR" not in os.environ:
        os.environ["JAX_COMPILATION_CACHE_DIR"] = os.fspath(compilation_cache)
        if _has_filelock():  # a folder the user chose is theirs to bound
            os.environ.setdefault(
                "JAX_COMPILATION_CACHE_MAX_SIZE", str(int(compilation_cache_max_bytes))
            )


# Processes that compile hundreds of tiny programs and run each for milliseconds (the tests,
# the graded checks, the trusted grader's worker processes) spend most of their time
# compiling, not running. Three flags make that cheaper:
# - XLA's backend optimisation level 0 skips LLVM's optimisation of the machine code, a large
#   part of the compile time (XLA's own passes, fusion and layout, still run);
# - on a CPU, XLA's older loop emitter in place of its fusion emitters (jaxlib 0.6 to 0.10
#   have both) compiles a small training step faster still (benchmarks/checking_flags.py
#   measures both on the tests and the grader; benchmarks/README.md);
# - on a GPU, the embedding's gradient (a scatter-add) rounds the same way in every run only
#   when XLA is asked to be deterministic.
# Sums may round in another order than under XLA's defaults, so results agree with training's
# to float tolerance, not bit for bit. Training, the CLI and the benchmarks keep the defaults.
CHECKING_XLA_FLAGS = (
    ("xla_gpu_deterministic_ops", "true"),
    ("xla_backend_optimization_level", "0"),
    ("xla_cpu_use_fusion_emitters", "false"),
)
# XLA stops a process that names a flag its version does not know. The jaxlib versions that
# know each flag, as (first, first without): the loop emitter's switch is absent from the
# binaries of jaxlib 0.4.36 and 0.5.0, present in 0.6.0 to 0.10.2, and jaxlib 0.11.2 stops on
# it ("Unknown flag in XLA_FLAGS"). Left out, a flag costs compile time, never a result.
_JAXLIB_RANGE = {"xla_cpu_use_fusion_emitters": ((0, 6), (0, 11))}
# The newest jaxlib seen to know every flag its range gives it (0.11.2, on a GPU machine). A
# flag dropped by a later jaxlib would stop every test process, with pytest's capture hiding
# XLA's one line: checking_xla_flags asks such a jaxlib first (unknown_xla_flags).
_CHECKED_THROUGH = (0, 11)


def _jaxlib_version() -> tuple[int, ...]:
    """The installed jaxlib's ``(major, minor)``, read without importing it; ``(0, 0)`` if
    it cannot be read."""
    from importlib import metadata

    try:
        return tuple(int(part) for part in metadata.version("jaxlib").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        return (0, 0)


def checking_xla_flags(flags: str = "") -> str:
    """``flags`` (a value of ``XLA_FLAGS``) with :data:`CHECKING_XLA_FLAGS` added, each one
    unless ``flags`` already names it (a level the user chose wins) or the installed jaxlib
    does not know it. Read when JAX starts its backend: set it in a process's environment
    before that. For a jaxlib newer than :data:`_CHECKED_THROUGH`, the flags are first tried
    in a throw-away process (about a second), and those its XLA rejects are left out."""
    version = _jaxlib_version()
    added = []
    for name, value in CHECKING_XLA_FLAGS:
        first, first_without = _JAXLIB_RANGE.get(name, ((0, 0), (10**6,)))
        if name not in flags and first <= version < first_without:
            added.append(f"--{name}={value}")
    if added and version > _CHECKED_THROUGH:
        unknown = unknown_xla_flags(added)  # None: XLA did not start; add none of them
        added = [flag for flag in added if unknown is not None and flag not in unknown]
    return " ".join([flags, *added]).strip()


def unknown_xla_flags(flags: list[str]) -> set[str] | None:
    """Those of ``flags`` (``--name=value`` each) that the installed XLA does not know, found
    by starting its CPU backend in a throw-away process, once more per flag it rejects;
    ``None`` if that process fails for another reason, or hangs."""
    import re
    import subprocess
    import sys

    unknown: set[str] = set()
    rest = list(flags)
    while rest:
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": " ".join(rest)}
        try:
            done = subprocess.run(
                [sys.executable, "-c", "import jax; jax.devices()"],
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
        except subprocess.TimeoutExpired:
            return None
        if done.returncode == 0:
            return unknown
        named = re.search(r"Unknown flags? in XLA_FLAGS: (\S+)", done.stderr)
        if named is None or named.group(1) not in rest:
            return None
        unknown.add(named.group(1))
        rest.remove(named.group(1))
    return unknown


def checking_compiler_options(flags: str | None = None) -> dict[str, bool | int]:
    """:data:`CHECKING_XLA_FLAGS` as options of one program (``jax.jit(...,
    compiler_options=...)``) for the graded checks of a process that did not start with them:
    a notebook's kernel, which also trains and so keeps XLA's defaults (there the checks
    compile faster with them: benchmarks/README.md). Left out: those that ``flags``
    (default: this process's ``XLA_FLAGS``) names, which then hold for every program, and
    those the installed jaxlib does not know (:func:`checking_xla_flags`), or that XLA refuses
    for a tiny program on the checks' device (tried once per process: a check must never
    fail for an option). Under pytest and in the grader's workers ``XLA_FLAGS`` names them
    all, and this is empty."""
    return dict(_compiler_options(os.environ.get("XLA_FLAGS", "") if flags is None else flags))


@functools.cache
def _compiler_options(flags: str) -> tuple[tuple[str, bool | int], ...]:
    theirs = flags.split()
    options = []
    for flag in (f for f in checking_xla_flags(flags).split() if f not in theirs):
        name, value = flag.removeprefix("--").split("=", 1)
        option = (name, value == "true" if value in ("true", "false") else int(value))
        if _compiles_with(dict([option])):
            options.append(option)
    return tuple(options)


def _compiles_with(options: dict[str, bool | int]) -> bool:
    """Whether XLA compiles and runs a tiny program on the checks' device with ``options``."""
    import jax
    import numpy as np

    try:
        with on_checking_device():
            jax.jit(lambda x: x + 1, compiler_options=options)(np.float32(0)).block_until_ready()
    except Exception:  # noqa: BLE001 - XLA's refusal of an option, in whatever form
        return False
    return True


@contextlib.contextmanager
def on_checking_device() -> Iterator[None]:
    """Within it, new arrays and the programs that use them go to the CPU, also in a process
    with a GPU or TPU: the graded checks run there. Their programs are tiny and each runs a
    few times, so compiling is nearly all their cost, and a GPU's compiler takes several times
    longer over each than a CPU's (benchmarks/README.md). Nothing changes where the CPU is
    already the default device, or where this process has no CPU backend (``JAX_PLATFORMS``
    names an accelerator alone)."""
    import jax

    cpu = None
    if jax.default_backend() != "cpu":
        with contextlib.suppress(RuntimeError):
            cpu = jax.devices("cpu")[0]
    if cpu is None:
        yield
        return
    with jax.default_device(cpu):
        yield


def _has_filelock() -> bool:
    """Whether JAX can bound its compilation cache (its eviction locks the directory)."""
    import importlib.util

    return importlib.util.find_spec("filelock") is not None


def accelerator() -> str:
    """``"gpu"``, ``"tpu"`` or ``"cpu"``: the platform JAX computes on by default."""
    import jax

    return jax.default_backend()


def describe_devices() -> str:
    """One line naming the devices in use, e.g. ``"cpu x1 (TFRT_CPU_0)"``."""
    import jax

    devices = jax.local_devices()
    kinds = sorted({d.device_kind for d in devices})
    return f"{accelerator()} x{len(devices)} ({', '.join(kinds)})"


def make_mesh(devices: Sequence[Any] | None = None):
    """A one-axis mesh ``("data",)`` over ``devices`` (default: all local devices).

    A plain :class:`jax.sharding.Mesh` has automatic (compiler-chosen) axes on every jax
    version the course supports, so no ``AxisType`` is needed (it appeared in jax 0.5).
    """
    import jax
    import numpy as np
    from jax.sharding import Mesh

    devices = list(devices) if devices is not None else jax.local_devices()
    return Mesh(np.array(devices), (DATA_AXIS,))


def replicated(mesh):
    """Sharding that keeps a full copy on every device of ``mesh`` (parameters, data)."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(mesh, PartitionSpec())


def batch_sharded(mesh):
    """Sharding that splits the first (batch) axis over the mesh's ``"data"`` axis."""
    from jax.sharding import NamedSharding, PartitionSpec

    return NamedSharding(mesh, PartitionSpec(DATA_AXIS))


def put_replicated(tree: Any, mesh) -> Any:
    """Copy a pytree of arrays to every device of ``mesh`` once (e.g. the encoded dataset)."""
    import jax

    return jax.device_put(tree, replicated(mesh))


def check_batch_size(batch_size: int, mesh) -> None:
    """Raise a clear error if ``batch_size`` cannot be split evenly over the mesh."""
    n = mesh.devices.size
    if batch_size % n:
        raise ValueError(
            f"batch size {batch_size} is not divisible by the {n} devices of the mesh: "
            f"use a multiple of {n} (e.g. {n * max(1, batch_size // n)})"
        )


_COMPILE_PREFIX = "/jax/core/compile/"  # tracing, lowering and backend compilation events
_BACKEND_COMPILE = "/jax/core/compile/backend_compile_duration"  # one per program built
_compile_totals = {"programs": 0, "seconds": 0.0}


def _on_compile_event(event: str, duration: float, **_kwargs: Any) -> None:
    if event.startswith(_COMPILE_PREFIX):
        _compile_totals["seconds"] += duration
        _compile_totals["programs"] += event == _BACKEND_COMPILE


def compile_counter() -> dict[str, float]:
    """XLA programs built so far in this process (compiled, or loaded from the persistent
    compilation cache: the "Finished XLA compilation" lines of ``JAX_LOG_COMPILES=1``) and
    the seconds spent tracing, lowering and compiling them; counting starts at the first
    call."""
    import jax.monitoring

    if not getattr(compile_counter, "listening", False):
        jax.monitoring.register_event_duration_secs_listener(_on_compile_event)
        compile_counter.listening = True
    return dict(_compile_totals)
