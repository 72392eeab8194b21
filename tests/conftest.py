"""Test configuration: load the auto-grader's pytest plugin (``--impl``, score table, ...),
and the tiny classifier that the tests of training, evaluation, batching and model share."""

import os

import numpy as np
import pytest

from m2l_nlp import devices
from m2l_nlp.config import ClassifierConfig

pytest_plugins = ["m2l_nlp.grading.local.pytest_plugin"]

# The CLI keeps compiled programs on disk (JAX_COMPILATION_CACHE_DIR); an empty value turns
# that off, so tests that run the CLI, and the subprocesses they start, write none.
os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", "")

# Tests compile hundreds of tiny programs, at XLA's lowest backend optimisation level, and ask
# two runs with the same seed for the same numbers, which a GPU gives only when told to be
# deterministic: `devices.checking_xla_flags` (a flag set in XLA_FLAGS wins). JAX reads them
# when it starts its backend, after this file is imported. Only pytest runs (and what they
# start) compile this way: `m2l-nlp` and the training benchmarks keep XLA's defaults. The
# flags as they were stay in USERS_XLA_FLAGS (xdist's workers inherit it): a notebook's kernel
# gets them back, as a student's kernel has them (the tests that run notebooks).
USERS_XLA_FLAGS = "M2L_NLP_USERS_XLA_FLAGS"
os.environ.setdefault(USERS_XLA_FLAGS, os.environ.get("XLA_FLAGS", ""))
os.environ["XLA_FLAGS"] = devices.checking_xla_flags(os.environ.get("XLA_FLAGS", ""))

# On a GPU each JAX process takes 75 % of the GPU's memory when it starts, unless told
# otherwise, and the pytest processes that share one (`make test`'s graded checks beside its
# workers, `-n N`) then fail to start cuBLAS (seen on an H200 with four workers). The tests'
# programs are tiny: memory on demand, as the CLI asks for it (a value the user set wins).
devices.configure_environment()


@pytest.fixture
def users_xla_flags(monkeypatch: pytest.MonkeyPatch) -> str:
    """XLA_FLAGS as the user started pytest with them, without the checking flags, for the
    processes this test starts (a notebook's kernel compiles as a student's kernel does)."""
    flags = os.environ[USERS_XLA_FLAGS]
    monkeypatch.setenv("XLA_FLAGS", flags)
    return flags


def pytest_configure(config: pytest.Config) -> None:
    """XLA stops a process at a flag it does not know, and under pytest its one line about it
    is never printed: the user's own flags in XLA_FLAGS (not the checking flags, which are
    tried elsewhere) are tried once, in a throw-away process, before any test starts."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the main process tried them
    ours = {name for name, _ in devices.CHECKING_XLA_FLAGS}
    theirs = [f for f in os.environ["XLA_FLAGS"].split() if f.split("=")[0][2:] not in ours]
    unknown = devices.unknown_xla_flags(theirs) if theirs else None
    if unknown:  # None: JAX did not start for another reason, which the tests will show
        raise pytest.UsageError(
            f"XLA_FLAGS names {' '.join(sorted(unknown))}, which this jaxlib's XLA does not "
            "know: remove it from XLA_FLAGS and run again"
        )


@pytest.fixture(scope="session", autouse=True)
def _share_compiled_programs(request, tmp_path_factory):
    """Within this test session, every program compiled is kept in a temporary folder that
    the parallel workers share: the many tests that build the same reference model or the
    same step (each its own jitted function, so no in-memory cache can serve them) load it
    instead of compiling it again. Nothing outside the session's temporary folder is written,
    and a fresh clone's first run benefits as much as any. A run of graded checks alone (a
    student's) keeps the grader's folder on disk instead, so that the next run is quick."""
    import jax

    from m2l_nlp.grading.local.pytest_plugin import graded_only

    if graded_only(request.session):
        return

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    jax.config.update("jax_compilation_cache_dir", str(shared / "jax-programs"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)


# ----------------------------------------------------------------------------- tiny classifier
# Session-scoped: one ModelFuncs object per worker, so the jitted steps keyed on it compile
# once for all the test files that use it (training, evaluation, batching, model).

TINY_CONFIG = ClassifierConfig(
    vocab_size=50, num_layers=1, num_heads=2, d_model=8, d_ff=16, p_dropout=0.1, max_len=48
)


def _random_split(n: int, seq_len: int = 48, seed: int = 0, min_len: int = 0):
    """Right-padded random ids, mask and labels; lengths spread over [min_len, seq_len]."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(min_len, seq_len + 1, n)
    lengths[:3] = [seq_len, 1, min_len]  # the extremes are always there
    mask = (np.arange(seq_len) < lengths[:, None]).astype(np.int32)
    ids = rng.integers(1, TINY_CONFIG.vocab_size, (n, seq_len)).astype(np.int32) * mask
    labels = rng.integers(0, 2, n).astype(np.int32)
    return ids, mask, labels


def _signal_split(n: int, seq_len: int = 48, seed: int = 0):
    """A learnable task: token 3 marks positive reviews, token 4 negative ones."""
    ids, mask, labels = _random_split(n, seq_len, seed, min_len=4)
    ids = np.where(ids == 3, 5, np.where(ids == 4, 5, ids))
    marker = np.where(labels == 1, 3, 4)
    ids[:, 0] = marker
    ids[:, 2] = marker
    return ids, mask, labels


@pytest.fixture(scope="session")
def tiny_config() -> ClassifierConfig:
    """Sizes of the tiny transformer classifier (vocabulary 50, 48 tokens)."""
    return TINY_CONFIG


@pytest.fixture(scope="session")
def tiny_model(tiny_config):
    """The tiny classifier's ModelFuncs: one object per session, so its steps compile once."""
    from m2l_nlp.model import classifiers as model

    return model.classifier(tiny_config)


@pytest.fixture(scope="session")
def tiny_params(tiny_model, tiny_config):
    import jax

    from m2l_nlp.model import classifiers as model

    return model.init_params(tiny_model, jax.random.PRNGKey(0), tiny_config.max_len)


@pytest.fixture(scope="session")
def random_split():
    """``random_split(n, seq_len=48, seed=0, min_len=0) -> (ids, mask, labels)``."""
    return _random_split


@pytest.fixture(scope="session")
def signal_split():
    """``signal_split(n, seq_len=48, seed=0) -> (ids, mask, labels)`` of a learnable task."""
    return _signal_split


@pytest.fixture
def same_parameters():
    """``check(one, other)``: the two checkpoint folders hold bit-identical parameters."""

    def check(one, other) -> None:
        with np.load(one / "params.npz") as a, np.load(other / "params.npz") as b:
            assert sorted(a.files) == sorted(b.files)
            for name in a.files:
                assert a[name].tobytes() == b[name].tobytes(), name

    return check


@pytest.fixture
def stopped_after_epoch_1(monkeypatch):
    """``run(argv)``: ``m2l-nlp argv`` interrupted (as by Ctrl-C) once its first epoch is kept;
    returns the exit status."""
    from m2l_nlp import cli
    from m2l_nlp.runs import folders

    saving = folders.RunFolder.save_progress

    def stop(self, info, arrays):
        saving(self, info, arrays)
        raise KeyboardInterrupt

    def run(argv) -> int:
        with monkeypatch.context() as patch:
            patch.setattr(folders.RunFolder, "save_progress", stop)
            return cli.main(argv)

    return run


@pytest.fixture(scope="session")
def tatoeba_small() -> list:
    """The bundled excerpt of Tatoeba's English-Greek pairs (data and model tests share it)."""
    from m2l_nlp.data import tatoeba

    return tatoeba.read_pairs(tatoeba.resolve_pairs("small"))
