"""Tests of m2l_nlp.devices, and data-parallel training on 8 (forced) CPU devices."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import pytest

from m2l_nlp import devices


def test_configure_environment_keeps_a_user_choice(monkeypatch):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    devices.configure_environment()
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    monkeypatch.setenv("XLA_PYTHON_CLIENT_PREALLOCATE", "true")
    devices.configure_environment()
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "true"


def test_pytest_processes_say_how_to_take_gpu_memory_before_jax_starts():
    """tests/conftest.py sets ``false`` (memory on demand, so that pytest processes can share
    a GPU) unless the user started pytest with a value of their own."""
    assert "XLA_PYTHON_CLIENT_PREALLOCATE" in os.environ


def test_configure_environment_sets_the_compilation_cache_unless_the_user_did(
    monkeypatch, tmp_path
):
    monkeypatch.setenv("JAX_COMPILATION_CACHE_DIR", "/somewhere/else")
    monkeypatch.setenv("JAX_COMPILATION_CACHE_MAX_SIZE", "123")
    devices.configure_environment(compilation_cache=tmp_path)
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == "/somewhere/else"
    assert os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] == "123"
    monkeypatch.delenv("JAX_COMPILATION_CACHE_MAX_SIZE")
    devices.configure_environment(compilation_cache=tmp_path)  # the user's folder: no bound
    assert "JAX_COMPILATION_CACHE_MAX_SIZE" not in os.environ
    monkeypatch.delenv("JAX_COMPILATION_CACHE_DIR")
    devices.configure_environment()  # no cache asked for: nothing set
    assert "JAX_COMPILATION_CACHE_DIR" not in os.environ
    devices.configure_environment(compilation_cache=tmp_path)
    assert os.environ["JAX_COMPILATION_CACHE_DIR"] == str(tmp_path)
    assert os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] == str(devices.COMPILATION_CACHE_MAX_BYTES)


@pytest.mark.parametrize("jaxlib", [(0, 4), (0, 5), (0, 6), (0, 10), (0, 11), (1, 0)])
def test_checking_flags_name_only_what_the_installed_jaxlib_knows(monkeypatch, jaxlib):
    """XLA aborts a process whose XLA_FLAGS name a flag it does not know, so the CPU emitter
    flag (jaxlib 0.6 to 0.10) is left out for an older jaxlib (the dependency floor) and for
    a newer one (0.11.2 stopped every test worker on it)."""
    monkeypatch.setattr(devices, "_jaxlib_version", lambda: jaxlib)
    monkeypatch.setattr(devices, "unknown_xla_flags", lambda flags: set())  # XLA knows all
    flags = devices.checking_xla_flags("--xla_dump_to=/tmp/x").split()
    assert flags[0] == "--xla_dump_to=/tmp/x"
    assert "--xla_backend_optimization_level=0" in flags
    assert ("--xla_cpu_use_fusion_emitters=false" in flags) == ((0, 6) <= jaxlib < (0, 11))
    mine = "--xla_cpu_use_fusion_emitters=true"  # a choice of the user's wins
    assert devices.checking_xla_flags(mine).split().count(mine) == 1
    assert "fusion_emitters=false" not in devices.checking_xla_flags(mine)


def test_a_jaxlib_newer_than_those_checked_keeps_only_the_flags_its_xla_knows(monkeypatch):
    """For a jaxlib past ``_CHECKED_THROUGH`` the flags are tried in a real XLA first: one it
    does not know is left out (here a made-up name), not passed on to stop every test."""
    made_up = ("xla_m2l_nlp_no_such_flag", "1")
    monkeypatch.setattr(devices, "CHECKING_XLA_FLAGS", (*devices.CHECKING_XLA_FLAGS, made_up))
    monkeypatch.setattr(devices, "_jaxlib_version", lambda: (9, 0))
    flags = devices.checking_xla_flags("--xla_dump_to=/tmp/x").split()
    assert flags == [
        "--xla_dump_to=/tmp/x",
        "--xla_gpu_deterministic_ops=true",
        "--xla_backend_optimization_level=0",
    ]


def test_a_jaxlib_already_checked_starts_no_process(monkeypatch):
    def started(flags):
        raise AssertionError("a jaxlib already checked needs no throw-away process")

    monkeypatch.setattr(devices, "unknown_xla_flags", started)
    for version in [(0, 4), (0, 10), devices._CHECKED_THROUGH]:
        monkeypatch.setattr(devices, "_jaxlib_version", lambda v=version: v)
        assert "--xla_backend_optimization_level=0" in devices.checking_xla_flags()


def test_the_checking_flags_as_one_programs_options_are_those_xla_flags_lacks():
    """For the graded checks in a process started without the checking flags (a notebook's
    kernel): each flag the installed jaxlib knows becomes an option of the program, typed as
    XLA wants it, unless XLA_FLAGS already names it; XLA compiles with them."""
    added = devices.checking_xla_flags("").split()
    options = devices.checking_compiler_options("")
    assert len(options) == len(added) and options["xla_backend_optimization_level"] == 0
    assert options["xla_gpu_deterministic_ops"] is True
    theirs = "--xla_backend_optimization_level=2 --xla_dump_to=/tmp/x"
    rest = devices.checking_compiler_options(theirs)
    assert rest == {k: v for k, v in options.items() if k != "xla_backend_optimization_level"}
    assert devices.checking_compiler_options() == {}  # pytest's XLA_FLAGS have them all
    doubled = jax.jit(lambda x: 2 * x, compiler_options=options)
    assert doubled(jnp.arange(3.0)).tolist() == [0.0, 2.0, 4.0]


def test_an_option_xla_refuses_is_left_out_of_the_checks_options(monkeypatch):
    """An option the device's compiler refuses (here a made-up name, passed as if the jaxlib
    knew it) is tried once and left out, so no check fails for it; the others stay."""
    made_up = ("xla_m2l_nlp_no_such_option", "1")
    monkeypatch.setattr(devices, "CHECKING_XLA_FLAGS", (*devices.CHECKING_XLA_FLAGS, made_up))
    options = devices.checking_compiler_options("--xla_dump_to=/tmp/m2l-nlp-made-up")
    assert "xla_m2l_nlp_no_such_option" not in options
    assert options["xla_backend_optimization_level"] == 0


def test_beside_an_accelerator_the_checks_device_is_the_cpu(monkeypatch):
    """On a CPU the default device stays; where the default backend is an accelerator
    (pretended here on a CPU, real on a GPU), new arrays go to the CPU within the context,
    and not after it."""
    cpu = jax.devices("cpu")[0]
    with devices.on_checking_device():
        on_cpu = jax.default_backend() == "cpu"
        assert jax.config.jax_default_device == (None if on_cpu else cpu)
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    with devices.on_checking_device():
        assert jax.config.jax_default_device == cpu
        assert jnp.zeros(2).devices() == {cpu}
    assert jax.config.jax_default_device is None


def test_without_a_cpu_backend_the_checks_keep_the_default_device(monkeypatch):
    def no_cpu(backend=None):
        raise RuntimeError("Unknown backend cpu")

    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    monkeypatch.setattr(jax, "devices", no_cpu)
    with devices.on_checking_device():
        assert jax.config.jax_default_device is None


def test_the_installed_jaxlib_version_is_read():
    import jaxlib

    assert devices._jaxlib_version() == tuple(int(p) for p in jaxlib.__version__.split(".")[:2])


def test_compilation_cache_set_before_jax_starts_keeps_compiled_programs_within_its_bound(
    tmp_path,
):
    """In a fresh interpreter (JAX not imported yet), as in the CLI: programs land on disk,
    and the least recently used go once the cache passes its bound (here 10 kB, about four
    tiny programs: the script compiles twenty, about 50 kB)."""
    script = textwrap.dedent(
        f"""
        from m2l_nlp import devices
        devices.configure_environment(
            compilation_cache={str(tmp_path / "jax")!r}, compilation_cache_max_bytes=10_000
        )
        import jax, jax.numpy as jnp
        for n in range(1, 21):
            jax.jit(lambda x: jnp.sin(x) * 2 + n)(jnp.ones(n)).block_until_ready()
        """
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_COMPILATION_CACHE_")}
    env["JAX_PLATFORMS"] = "cpu"
    env["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # cache even a tiny program
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    entries = list((tmp_path / "jax").glob("*-cache"))
    assert entries
    assert sum(e.stat().st_size for e in entries) <= 10_000


def test_mesh_is_one_auto_data_axis_over_local_devices():
    mesh = devices.make_mesh()
    assert mesh.axis_names == (devices.DATA_AXIS,)
    axis_type = getattr(jax.sharding, "AxisType", None)  # jax >= 0.5 names the axis kinds
    if axis_type is not None:
        assert mesh.axis_types == (axis_type.Auto,)
    assert mesh.devices.size == len(jax.local_devices())
    assert devices.accelerator() in ("cpu", "gpu", "tpu")
    assert devices.describe_devices().startswith(devices.accelerator())


def test_data_is_copied_whole_to_each_device_and_batches_split_on_their_first_axis():
    mesh = devices.make_mesh()
    tree = {"ids": jnp.arange(8).reshape(4, 2)}
    placed = devices.put_replicated(tree, mesh)
    assert placed["ids"].sharding == devices.replicated(mesh)
    assert placed["ids"].sharding.is_fully_replicated
    assert devices.batch_sharded(mesh).spec == jax.sharding.PartitionSpec(devices.DATA_AXIS)


def test_batch_size_must_split_over_devices():
    mesh = devices.make_mesh(jax.local_devices()[:1])
    devices.check_batch_size(7, mesh)

    class Fake:
        class devices:  # noqa: N801 - mimics mesh.devices.size
            size = 8

    with pytest.raises(ValueError, match="not divisible by the 8 devices"):
        devices.check_batch_size(12, Fake)


SCRIPT = textwrap.dedent(
    """
    import json, sys
    import jax, numpy as np, optax
    from m2l_nlp import devices
    from m2l_nlp.model import classifiers as models
    from m2l_nlp.train import loop as training
    from m2l_nlp.config import ClassifierConfig, TrainSettings

    assert len(jax.devices()) == 8, jax.devices()
    cfg = ClassifierConfig(vocab_size=40, num_layers=1, num_heads=2, d_model=8, d_ff=16,
                           p_dropout=0.1, max_len=40)
    model = models.classifier(cfg)
    params = models.init_params(model, jax.random.PRNGKey(0), cfg.max_len)
    rng = np.random.default_rng(0)
    n = 60  # not a multiple of the batch: partial batches are sharded too
    lengths = rng.integers(3, 41, n)
    mask = (np.arange(40) < lengths[:, None]).astype(np.int32)
    labels = rng.integers(0, 2, n).astype(np.int32)
    ids = rng.integers(5, 40, (n, 40)).astype(np.int32) * mask
    ids[:, 0] = np.where(labels == 1, 3, 4)
    settings = TrainSettings(epochs=2, batch_size=16, learning_rate=1e-2, crop_len=24)
    out = {}
    for name, devs in (("one", jax.devices()[:1]), ("eight", jax.devices())):
        mesh = devices.make_mesh(devs)
        result = training.train(model, params, (ids, mask, labels), settings,
                                eval_data=(ids, mask, labels), mesh=mesh, progress=False,
                                log=None, optimizer=optax.sgd(0.5))
        # (SGD: Adam would blow float rounding of near-zero gradients up to lr-sized steps)
        leaves = jax.tree_util.tree_leaves(result.params)
        out[name] = {
            "history": result.history,
            "params": [np.asarray(x).ravel().tolist() for x in leaves],
            "replicated": all(x.sharding.is_fully_replicated for x in leaves),
            "n_devices": sorted({len(x.devices()) for x in leaves}),
        }
    json.dump(out, sys.stdout)
    """
)


@pytest.mark.slow
def test_eight_devices_train_like_one():
    env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
    env["JAX_PLATFORMS"] = "cpu"
    proc = subprocess.run(
        [sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    one, eight = out["one"], out["eight"]
    assert one["n_devices"] == [1] and eight["n_devices"] == [8]
    assert eight["replicated"]  # parameters replicated on all 8 devices
    for key in one["history"]:
        assert eight["history"][key] == pytest.approx(one["history"][key], rel=1e-4, abs=1e-5)
    for a, b in zip(one["params"], eight["params"], strict=True):
        assert b == pytest.approx(a, rel=1e-3, abs=1e-4)


def test_compile_counter_counts_each_program_once():
    five, six = jnp.ones(5), jnp.ones(6)  # made first: making them compiles programs too
    f = jax.jit(lambda x: x * 3 + 1)
    before = devices.compile_counter()
    f(five).block_until_ready()
    f(five).block_until_ready()  # the same shape: no new program
    middle = devices.compile_counter()
    assert middle["programs"] - before["programs"] == 1
    assert middle["seconds"] > before["seconds"]
    f(six).block_until_ready()  # a new shape: one more
    assert devices.compile_counter()["programs"] - middle["programs"] == 1
