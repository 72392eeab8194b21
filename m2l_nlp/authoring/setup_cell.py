# Setup cell (made from the course's m2l_nlp/authoring/setup_cell.py): safe to run twice.
import importlib
import importlib.metadata
import os
import re
import subprocess
import sys
import tempfile

REPO_URL = "https://github.com/m2l-nlp/m2l-nlp"  # [project.urls] Repository of pyproject.toml
CLONE_DIR = "/content/m2l-nlp"
JAX_FLOOR = "0.4.36"  # the oldest jax the course supports (pyproject.toml)
# Colab's own builds for its accelerator: installing the course keeps them as they are, with
# every accelerator plugin of jax the runtime has (CUDA 12, CUDA 13, a TPU's).
KEEP = ("jax", "jaxlib", "numpy")
PLUGINS = re.compile(r"jax[-_.]cuda\d+[-_.](plugin|pjrt)|libtpu([-_.]nightly)?", re.IGNORECASE)
# What Colab lacks, at the versions that the course's simulated Colab tested beside Colab's own
# packages (listed in m2l_nlp/authoring/colab_tested.txt).
TESTED = "dm-haiku==0.0.17"
SETUP_DONE = "M2L_NLP_SETUP_DONE"  # set at the end of this cell's first run


class SetupError(Exception):
    """A setup problem, shown as one line (IPython prints what this method returns)."""

    def _render_traceback_(self):
        return [f"Setup failed: {self}"]


def _numbers(version):
    return tuple(int(part) for part in re.findall(r"\d+", version)[:3])


def _installed(package):
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _kept():
    """What the runtime's jax runs on: KEEP and every accelerator plugin installed."""
    plugins = {d.metadata["Name"] for d in importlib.metadata.distributions()}
    return [*KEEP, *sorted(p for p in plugins if p and PLUGINS.fullmatch(p))]


def _cuda():
    """The CUDA major version of the runtime's jax plugins (12 where there is none)."""
    found = [re.search(r"cuda(\d+)", p.lower()) for p in _kept()]
    return max([int(m[1]) for m in found if m] or [12])


def _run(command, what, advice):
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        lines = (done.stderr or done.stdout or "").strip().splitlines()
        raise SetupError(f"{what} failed ({lines[-1] if lines else 'no message'}): {advice}")


if "jax" in sys.modules and not os.environ.get(SETUP_DONE):
    print("jax was imported before this cell: restart the runtime to change its memory use")

if "google.colab" in sys.modules:
    repo_url = os.environ.get("M2L_NLP_REPO_URL", REPO_URL)
    clone_dir = os.environ.get("M2L_NLP_CLONE_DIR", CLONE_DIR)
    jax_version = _installed("jax")
    if jax_version and _numbers(jax_version) < _numbers(JAX_FLOOR):
        raise SetupError(
            f"this runtime has jax {jax_version}, the course needs {JAX_FLOOR} or newer: run "
            f"`!pip install -q 'jax[cuda{_cuda()}]>={JAX_FLOOR}'` in a cell, then Runtime > "
            "Restart session, and run this cell again"
        )
    tested = dict(pin.split("==") for pin in TESTED.split())
    untested = [p for p, v in tested.items() if _installed(p) not in (None, v)]
    if untested:
        held = ", ".join(f"{p} {_installed(p)}" for p in untested)
        wanted = " ".join(f"{p}=={tested[p]}" for p in untested)
        raise SetupError(
            f"this runtime has {held}, which the course has not tested: run `!pip install -q "
            f"{wanted}` in a cell, then Runtime > Restart session, and run this cell again"
        )
    if not os.path.isdir(os.path.join(clone_dir, ".git")):
        _run(
            ["git", "clone", "--quiet", "--depth", "1", repo_url, clone_dir],
            f"downloading the course from {repo_url}",
            "check that this runtime is online (Runtime > Disconnect and delete runtime, then "
            "run again) and that the repository exists and is public",
        )
    # Colab's jax stack stays as installed (pip keeps the rest of what Colab has, as it
    # satisfies the course); what Colab lacks comes at the tested versions.
    pins = [f"{package}=={_installed(package)}" for package in _kept() if _installed(package)]
    pins += TESTED.split()
    # a file of this run's own: a fixed name in the shared /tmp could be another's
    fd, constraints = tempfile.mkstemp(prefix="m2l-nlp-constraints-", suffix=".txt")
    with os.fdopen(fd, "w") as handle:
        handle.write("\n".join(pins) + "\n")
    try:
        _run(
            [sys.executable, "-m", "pip", "install", "--quiet", "-c", constraints, "-e", clone_dir],
            "installing the course package",
            "run this cell again; if it fails twice, Runtime > Disconnect and delete runtime",
        )
    finally:
        os.remove(constraints)
    # Make the fresh install importable without restarting the runtime.
    if clone_dir not in sys.path:
        sys.path.insert(0, clone_dir)
    os.environ["M2L_ROOT"] = clone_dir
    importlib.invalidate_caches()

try:
    import m2l_nlp  # noqa: F401
except ImportError as error:
    if hasattr(error, "_render_traceback_"):  # m2l_nlp's own line: which versions to install
        raise SetupError(str(error)) from None
    raise SetupError(
        "the course package m2l_nlp is not installed: run `pip install -e .` in the "
        "repository root (or open this notebook in Colab)"
    ) from None

# Before the first `import jax`: GPU memory on demand (JAX grabs most of it at start-up
# otherwise), and compiled programs kept on disk so that training again compiles nothing.
from m2l_nlp import devices as m2l_devices  # noqa: E402
from m2l_nlp.data.pipeline import compilation_cache_dir  # noqa: E402

m2l_devices.configure_environment(compilation_cache=compilation_cache_dir())

import jax  # noqa: E402

devices = jax.devices()
kinds = sorted({d.device_kind for d in devices})
print(f"JAX {jax.__version__}: {len(devices)} {devices[0].platform.upper()} device(s): {kinds}")
if devices[0].platform == "cpu":
    print(
        "No GPU attached: everything works, only slower. In Colab: Runtime > Change runtime "
        "type > a GPU, then run this cell again."
    )
os.environ[SETUP_DONE] = "1"
