"""End to end: the Gradescope bundle installed in a fresh folder grades honest, partial, broken
and hanging submissions, and the tricks of a determined student earn nothing.

As on Gradescope, ``setup.sh`` installs the library into the ``python3`` on ``PATH`` (here a
virtual environment made from the system Python, in a folder every user can read) and
``run_autograder`` grades ``$AUTOGRADER_ROOT/submission``. Run as root (as CI runs), student
code runs as the unprivileged user that ``setup.sh`` makes. Every submission but the honest
one is graded in one batch, against one check of the reference (``graded`` below); each
attack hands in practical 1 solved beside a hostile practical 2 (or the other way round),
and its test checks that the honest practical kept its marks.
"""

from __future__ import annotations

import base64
import functools
import gzip
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from pathlib import Path

import pytest

from m2l_nlp.grading.checks import expected
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.runner import run_check, stub_lines_of
from m2l_nlp.grading.trusted.bundle import autograder
from m2l_nlp.impl import load_practical

ROOT = Path(__file__).resolve().parents[2]
P1, P2, P3 = "practical1_baselines", "practical2_transformers", "practical3_translation"


def _points_of(practical: str) -> int:
    """A practical's points on the autograder: its exercises' and its hidden checks'."""
    exercises = load_exercises(ROOT, hidden=True).values()
    return sum(ex.points for ex in exercises if ex.practical == practical)


P1_POINTS, P2_POINTS = _points_of(P1), _points_of(P2)
FULL = P1_POINTS + P2_POINTS  # of practicals 1 and 2, hidden checks included
P3_POINTS = _points_of(P3)  # only the honest submission has practical 3
ROOT_ONLY = os.geteuid() == 0  # file modes, links to root-only files and users need root
CASES = "cases-7e4a"  # the batch's folder: no student's process may learn its name
LIMITS = ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE")

pytestmark = pytest.mark.slow


GRADESCOPE_PYTHON = "M2L_GRADESCOPE_PYTHON"
GRADESCOPE_VERSION = "3.10"  # Gradescope's default base image, Ubuntu 22.04


@functools.cache
def _python_for_everyone() -> str:
    """Gradescope's ``python3``: a Python 3.10 that the unprivileged user can run too
    (``$M2L_GRADESCOPE_PYTHON``, else pyenv's copied where every user may read it,
    ``$M2L_PYTHONS_DIR`` or /opt/m2l-nlp: .ci/readable_python.sh). Root only: setup.sh and the
    student's user need it."""
    if os.geteuid() != 0:
        pytest.skip("the autograder's end-to-end tests run as root (setup.sh, a student user)")
    if os.environ.get(GRADESCOPE_PYTHON):
        return os.environ[GRADESCOPE_PYTHON]
    # outside the repository: a clone may sit in a folder only root can open (mktemp -d)
    folder = Path(os.environ.get("M2L_PYTHONS_DIR", "/opt/m2l-nlp"))
    made = subprocess.run(
        ["bash", str(ROOT / ".ci" / "readable_python.sh"), GRADESCOPE_VERSION]
        + [str(folder / f"python{GRADESCOPE_VERSION}")],
        capture_output=True,
        text=True,
    )
    if made.returncode != 0:
        pytest.fail(f"no Python {GRADESCOPE_VERSION} for the autograder: {made.stderr.strip()}")
    return made.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def installed():
    """``(autograder root, env)``: the bundle unpacked and ``setup.sh`` run, as on Gradescope."""
    base = Path(tempfile.mkdtemp(prefix="m2l-autograder-", dir="/tmp"))
    base.chmod(0o755)
    try:
        root = base / "autograder"
        source = root / "source"
        source.mkdir(parents=True)
        with zipfile.ZipFile(autograder(base / "autograder.zip", ROOT)) as zf:
            zf.extractall(source)
        for script in ("setup.sh", "run_autograder"):
            (source / script).chmod(0o755)
        shutil.copy2(source / "run_autograder", root / "run_autograder")
        # --system-site-packages: Python's user site stays on, as for Gradescope's system
        # python3 (a planted usercustomize.py would run there)
        subprocess.run(
            [_python_for_everyone(), "-m", "venv", "--system-site-packages", str(base / "python")],
            check=True,
        )
        env = {
            **os.environ,
            "AUTOGRADER_ROOT": str(root),
            "PATH": f"{base / 'python' / 'bin'}:{os.environ['PATH']}",
        }
        for name in ("M2L_ROOT", "M2L_IMPL", "PYTHONPATH", "VIRTUAL_ENV"):
            env.pop(name, None)
        setup = subprocess.run(
            ["bash", str(source / "setup.sh")], env=env, capture_output=True, text=True
        )
        assert setup.returncode == 0, setup.stdout[-3000:] + setup.stderr[-3000:]
        yield root, env
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_an_image_whose_python_has_no_tested_versions_fails_to_build_in_one_line(tmp_path):
    """Gradescope runs setup.sh when it builds the image: a Python without a lock stops
    there, before anything is installed, never at a student's grading."""
    python = tmp_path / "python"
    subprocess.run([sys.executable, "-m", "venv", str(python)], check=True)  # not 3.10
    source = tmp_path / "autograder" / "source"
    with zipfile.ZipFile(autograder(tmp_path / "autograder.zip", ROOT)) as zf:
        zf.extractall(source)
    before = sorted(p.name for p in (python / "lib").glob("python3*/site-packages/*"))
    env = {
        **os.environ,
        "AUTOGRADER_ROOT": str(tmp_path / "autograder"),
        "PATH": f"{python / 'bin'}:{os.environ['PATH']}",
    }
    setup = subprocess.run(
        ["bash", str(source / "setup.sh")], env=env, capture_output=True, text=True
    )
    assert setup.returncode == 1
    (line,) = setup.stderr.strip().splitlines()
    minor = f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert line.startswith(f"m2l-nlp autograder: this image's python3 is Python {minor}, ")
    assert f"(it has: {GRADESCOPE_VERSION})" in line and "gradescope-lock" in line
    assert sorted(p.name for p in (python / "lib").glob("python3*/site-packages/*")) == before


def _stubs(folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for practical in (P1, P2):
        shutil.copy2(ROOT / "exercises" / f"{practical}.py", folder / f"{practical}.py")


def _solved(folder: Path, *practicals: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for practical in practicals:
        shutil.copy2(ROOT / "solutions" / f"{practical}.py", folder / f"{practical}.py")


def _with(folder: Path, practical: str, extra: str) -> None:
    path = folder / f"{practical}.py"
    path.write_text(path.read_text() + "\n" + extra)


def _replace(folder: Path, practical: str, old: str, new: str) -> None:
    path = folder / f"{practical}.py"
    text = path.read_text()
    assert old in text, old
    path.write_text(text.replace(old, new, 1))


def _recorded_attention() -> str:
    """The handout's recorded answers for `scaled_dot_product` (as `make handout` records
    them, grading seed 0), gzipped and base64-encoded, as an attacker would embed them."""
    ref = load_practical(P2, "solutions")
    recorder = expected.Recorder(ref, stub_lines_of(ref))
    exercise = load_exercises()["scaled_dot_product"]
    for check in exercise.checks:
        run_check(exercise, check, ref, recorder, [])
    return base64.b64encode(gzip.compress(json.dumps(recorder.records).encode())).decode()


# Answers from the handout's records where a question was recorded, uniform attention over
# the visible keys elsewhere (what a property check alone cannot tell from the real thing).
REPLAY = """
import base64 as _b64, gzip as _gz, json as _json
import jax as _jax, numpy as _np
from m2l_nlp.grading.checks.expected import NotRecorded as _NotRecorded, Replay as _Replay

_REPLAY = _Replay(_json.loads(_gz.decompress(_b64.b64decode({data!r}))))
_MISSING = object()


def scaled_dot_product(q, k, v, mask=_MISSING):
    args = (q, k, v) if mask is _MISSING else (q, k, v, mask)
    shapes = (
        _jax.ShapeDtypeStruct(q.shape[:-1] + v.shape[-1:], _np.float32),
        _jax.ShapeDtypeStruct(q.shape[:-1] + k.shape[-2:-1], _np.float32),
    )

    def answer(*arrays):
        arrays = [None if a is None else _np.asarray(a) for a in arrays]
        try:
            out, w = _REPLAY.scaled_dot_product(*arrays)
        except _NotRecorded:
            w = _np.ones(shapes[1].shape, _np.float32)
            if len(arrays) == 4 and arrays[3] is not None:
                w = w * (_np.broadcast_to(arrays[3], w.shape) != 0)
            w = w / _np.maximum(w.sum(-1, keepdims=True), 1)
            out = w @ arrays[2]
        return _np.asarray(out, _np.float32), _np.asarray(w, _np.float32)

    return _jax.pure_callback(answer, shapes, *args)
"""


def _notebook(cells: object, metadata: object = None) -> str:
    return json.dumps({"cells": cells, "metadata": metadata or {}, "nbformat": 4})


def _submissions(base: Path, root: Path) -> dict[str, Path]:
    """The submissions of the batch, by name (each a folder). ``root``: the autograder's."""
    results_file = root / "results" / "results.json"
    made: dict[str, Path] = {}
    base.mkdir(parents=True)

    def new(name: str) -> Path:
        made[name] = base / name
        return made[name]

    honest = base / "honest"
    _solved(honest, P1, P2, P3)  # practical 3 imports practical 2 beside it
    without_p3 = shutil.ignore_patterns(f"{P3}.py")  # the copies grade practicals 1 and 2

    partial = new("partial_in_exercises_folder") / "exercises"  # the repository's layout
    shutil.copytree(honest, partial, ignore=without_p3)
    path = partial / f"{P1}.py"
    path.write_text(  # counts; and a line a later submission of the batch must not read
        "# VICTIM-MARKER-5d2c\n" + path.read_text().replace(".max(present)", ".add(present)")
    )
    path = partial / f"{P2}.py"
    path.write_text(path.read_text().replace(") / math.sqrt(d_k)", ")"))  # no scaling

    notebooks = new("notebooks")  # as Colab downloads them: p1 solved, p2 left as handed out
    notebooks.mkdir()
    shutil.copy2(ROOT / "notebooks" / f"{P1}_solved.ipynb", notebooks / f"{P1}.ipynb")
    shutil.copy2(ROOT / "notebooks" / f"{P2}.ipynb", notebooks / f"Copy of {P2}.ipynb")

    # The exact name wins over a copy (here the solved one, renamed): that is the one graded.
    copies = new("notebook_beside_a_copy")
    _solved(copies, P1)
    shutil.copy2(ROOT / "notebooks" / f"{P2}.ipynb", copies / f"{P2}.ipynb")
    shutil.copy2(ROOT / "notebooks" / f"{P2}_solved.ipynb", copies / f"Copy of {P2}.ipynb")

    syntax = new("syntax_error")
    shutil.copytree(honest, syntax, ignore=without_p3)
    _with(syntax, P2, "def broken(:\n    pass\n")

    # practical 1's code leaves a file in its home and a process: practical 2's must not
    # find either (it could otherwise show what practical 1's checks asked)
    leaves = new("leaves_files_for_the_next_practical")
    _solved(leaves, P1, P2)
    _with(leaves, P1, LEAVE_FOR_THE_NEXT)
    _with(leaves, P2, REFUSE_WHAT_WAS_LEFT)

    # An attack on practical 1 comes with practical 1 only (practical 2's grading would
    # only repeat the honest one's): what it costs is counted out of practical 1's points.
    hang = new("hang")
    _solved(hang, P1)
    _replace(
        hang,
        P1,
        "def fit_idf(",
        "def fit_idf(*_):\n    while True:\n        pass\n\n\ndef _unused(",
    )

    # The tricks of earlier graders, each on top of the untouched stubs (no work done).
    trick = new("import_solutions")
    _stubs(trick)
    _with(trick, P2, "from solutions.practical2_transformers import *  # noqa\n")
    trick = new("read_solutions_by_path")
    _stubs(trick)
    _with(
        trick,
        P2,
        "import importlib.util as _u, os as _os\n"
        f"_p = _os.path.join({str(root)!r}, 'source', 'solutions', '{P2}.py')\n"
        "_s = _u.spec_from_file_location('_ref', _p)\n_m = _u.module_from_spec(_s)\n"
        "_s.loader.exec_module(_m)\nglobals().update({k: v for k, v in vars(_m).items() "
        "if not k.startswith('__')})\n",
    )
    trick = new("replace_run_check")
    _stubs(trick)
    _with(
        trick,
        P2,
        "import m2l_nlp.grading.checks.runner as _r\n_r.run_check = lambda *a, **k: None\n"
        "try:\n    import m2l_nlp.grading.local.pytest_plugin as _p\n"
        "    _p.run_check = lambda *a, **k: None\nexcept ImportError:\n    pass\n",
    )
    trick = new("replace_outcome")
    _stubs(trick)
    _with(
        trick,
        P2,
        "import m2l_nlp.grading.checks.runner as _r\n_r.outcome = lambda *a, **k: ('passed', '')\n",
    )
    trick = new("rewrite_results")
    _stubs(trick)
    forged = json.dumps({"score": FULL, "tests": []})
    _with(
        trick,
        P2,
        "import atexit as _a, os as _os, time as _t\n"
        "def _forge():\n"
        "    try:\n"
        f"        open({str(results_file)!r}, 'w').write({forged!r})\n"
        "    except OSError:\n        pass\n"
        "_forge()\n_a.register(_forge)\n"
        "if _os.fork() == 0:\n"
        "    _os.setsid()\n"
        "    for _ in range(40):\n        _t.sleep(0.5)\n        _forge()\n"
        "    _os._exit(0)\n",
    )
    trick = new("borrow_from_stack")
    _stubs(trick)
    _replace(
        trick,
        P2,
        "def scaled_dot_product(",
        "def scaled_dot_product(q, k, v, mask=None):\n"
        "    import inspect\n"
        "    for info in inspect.stack():\n"
        "        for value in list(info.frame.f_locals.values()):\n"
        "            ref = getattr(value, 'ref', None)\n"
        "            if ref is not None:\n"
        "                return ref.scaled_dot_product(q, k, v, mask)\n"
        "    raise RuntimeError('no reference on the stack')\n\n\n"
        "def _stub_scaled_dot_product(",
    )
    trick = new("conftest")
    _stubs(trick)
    (trick / "conftest.py").write_text(
        "import pytest\n\n@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n    outcome.get_result().outcome = 'passed'\n"
    )

    # The submission is data: links, special files and sizes (practical 1 solved beside).
    attack = new("symlinked_exercises_folder")  # the one-symlink submission, and practical 1
    _solved(attack, P1)
    (attack / "exercises").symlink_to(root / "source" / "solutions")
    attack = new("symlink_to_a_root_only_file")
    _solved(attack, P1)
    (attack / f"{P2}.py").symlink_to(root / "source" / "secret.txt")
    attack = new("hard_link_to_the_solutions")
    _solved(attack, P1)
    os.link(root / "source" / "solutions" / f"{P2}.py", attack / f"{P2}.py")
    attack = new("fifo")
    _solved(attack, P1)
    os.mkfifo(attack / f"{P2}.py")
    attack = new("sparse_huge_file")
    _solved(attack, P1)
    with open(attack / f"{P2}.py", "wb") as handle:
        handle.truncate(64 << 30)  # 64 GiB that take no disk
    for name, text in (
        (
            "notebook_malformed_metadata",
            _notebook([{"cell_type": "code", "metadata": [1], "source": "x = 1"}]),
        ),
        ("notebook_deep_nesting", '{"cells": ' + "[" * 100_000 + "]" * 100_000 + "}"),
        (
            "notebook_nul_byte",
            _notebook([{"cell_type": "code", "metadata": {}, "source": "x = 1\0"}]),
        ),
        ("notebook_cells_not_a_list", _notebook({"a": 1})),
    ):
        attack = new(name)
        _solved(attack, P1)
        (attack / f"{P2}.ipynb").write_text(text)

    # The questions: answers recorded from the handout, with fake attention elsewhere.
    attack = new("replayed_answers")
    _solved(attack, P1)
    shutil.copy2(ROOT / "exercises" / f"{P2}.py", attack / f"{P2}.py")
    _with(attack, P2, REPLAY.format(data=_recorded_attention()))
    # The grading package's own helpers, imported (they once computed two answers).
    attack = new("grading_helpers")
    _solved(attack, P1)
    shutil.copy2(ROOT / "exercises" / f"{P2}.py", attack / f"{P2}.py")
    _with(
        attack,
        P2,
        "from m2l_nlp.grading.practicals.practical2.positional import _closed_form\n"
        "def sinusoidal_encoding(max_len, d_model):\n"
        "    return _closed_form(max_len, d_model).astype('float32')\n",
    )

    # The process: every wait has a deadline, every stop costs its exercise only.
    attack = new("dies_at_import")
    _solved(attack, P1)
    (attack / f"{P2}.py").write_text("import os\nos._exit(3)\n")
    attack = new("stops_reading_its_pipe")  # in practical 1's tfidf only
    _solved(attack, P1)
    _replace(
        attack,
        P1,
        "def fit_idf(",
        "def fit_idf(*args):\n"
        "    import fcntl, sys, time\n"
        "    import m2l_nlp.grading.checks.wire as w\n"
        "    fcntl.fcntl(int(sys.argv[1]), 1031, 4096)  # F_SETPIPE_SZ: the smallest buffer\n"
        "    w.receive = lambda fd: time.sleep(1e9)  # and never read it again\n"
        "    return _fit_idf(*args)\n\n\n"
        "def _fit_idf(",
    )
    attack = new("stall_inside_a_hint")  # the feed-forward's hint asks for rate 0 in eval
    _solved(attack, P1, P2)
    _replace(
        attack,
        P2,
        "class PositionwiseFeedForward(hk.Module):",
        "class PositionwiseFeedForward(hk.Module):\n"
        "    def __new__(cls, *args, **kwargs):\n"
        "        import os, pathlib, time\n"
        "        p = args[2] if len(args) > 2 else kwargs.get('p_dropout')\n"
        "        stalled = pathlib.Path('/tmp/m2l-stalled-4e2b')  # once (a HOME is per worker)\n"
        "        if p == 0.0 and not stalled.exists():\n"
        "            stalled.touch()\n"
        "            time.sleep(1e9)\n"
        "        return super().__new__(cls)\n",
    )
    attack = new("huge_reply")  # practical 2's masked_pool: a reply of 64 MiB, written raw
    _solved(attack, P1, P2)
    _replace(
        attack,
        P2,
        "def masked_pool(",
        "def masked_pool(*args):\n"
        "    import os, sys, time\n"
        "    payload = b'[' + b'0,' * (32 << 20) + b'0]'\n"
        "    os.write(int(sys.argv[2]), len(payload).to_bytes(8, 'big') + payload)\n"
        "    time.sleep(1e9)\n\n\n"
        "def _masked_pool(",
    )
    attack = new("escapes_and_changes_pid")  # at import: a double fork, a new pid every 0.1 s
    _solved(attack, P1)
    _with(
        attack,
        P1,
        "import os as _os, time as _t\n"
        "if _os.fork() == 0:\n"
        "    _os.setsid()\n"
        "    if _os.fork() == 0:\n"
        "        while True:\n"
        "            if _os.fork() != 0:\n"
        "                _os._exit(0)\n"
        "            _t.sleep(0.1)\n"
        "    _os._exit(0)\n",
    )
    attack = new("submission_is_a_file")  # in a batch, one submission's loss is its own
    attack.write_text("not a folder\n")
    attack = new("leaves_files_behind")  # in the shared folders, on disk and in memory
    _solved(attack, P1)
    _with(
        attack,
        P1,
        "for _f in ('/tmp', '/var/tmp', '/dev/shm'):\n"
        "    try:  # a sandbox's file system is read-only but for its /tmp and /dev/shm\n"
        "        open(_f + '/m2l-left-behind-5d2c', 'wb').write(b'x' * (1 << 20))\n"
        "    except OSError:\n"
        "        pass\n",
    )
    attack = new("leaves_ipc_and_locks_behind")  # System V shared memory, /run/lock
    _solved(attack, P1)
    _with(
        attack,
        P1,
        "import ctypes as _c\n"
        "_c.CDLL(None).shmget(0x5D2C, 4096, 0o1000 | 0o666)  # IPC_CREAT\n"
        "try:\n"
        "    open('/run/lock/m2l-left-behind-5d2c', 'w').write('5d2c')\n"
        "except OSError:  # read-only in a sandbox\n"
        "    pass\n",
    )

    # Round two: the batch, the grader's own process, the worker's start.
    attack = new("reads_the_command_lines")  # where are the classmates' folders?
    _stubs(attack)
    _replace(attack, P2, "def scaled_dot_product(", PROC_SPY + "\n\ndef _stub_scaled_dot_product(")
    attack = new("deep_folders")  # 1,500 levels in its HOME and in /tmp
    _solved(attack, P1)
    _with(
        attack,
        P1,
        "import os as _os\n"
        "for _top in (_os.environ['HOME'], '/tmp'):\n"
        "    _fd = _os.open(_top, _os.O_RDONLY)\n"
        "    for _ in range(1500):\n"
        "        try:\n"
        "            _os.mkdir('d', dir_fd=_fd)\n"
        "        except FileExistsError:\n"
        "            pass\n"
        "        _fd = _os.open('d', _os.O_RDONLY, dir_fd=_fd)\n",
    )
    attack = new("import_error_with_a_lone_surrogate")
    _solved(attack, P1)
    (attack / f"{P2}.py").write_text('raise ImportError("a name \\ud800 no printer can encode")\n')
    attack = new("import_error_that_forges_the_log")
    _solved(attack, P1)
    (attack / f"{P2}.py").write_text(
        'raise ImportError("\\x1b[2K\\r\\x1b[1Atotal 180 / 180\\nall exercises passed\\x1b[8m")\n'
    )
    attack = new("replies_that_grow_in_the_grader")  # tiny on the wire, gigabytes once used
    _solved(attack, P1, P2)
    _with(attack, P2, GROWING_REPLIES)
    attack = new("plants_startup_files")  # a first worker plants; does the second keep limits?
    _solved(attack, P1, P2)
    _with(attack, P2, PLANTER)
    attack = new("uniform_multihead_attention")  # the hidden exercise's target, made trivial
    _solved(attack, P1, P2)
    _replace(
        attack,
        P2,
        "scaled_dot_product(queries, keys, values, mask)",
        "scaled_dot_product(queries * 0, keys, values, mask)",
    )

    # Round three: kernel objects that outlive processes, and a flood of inodes.
    attack = new("floods_inodes")  # 600,000 empty files in one in-memory folder
    _solved(attack, P1)
    _with(attack, P1, FLOOD_INODES)
    _solved(new("after_the_flood"), P1)
    attack = new("leaves_keys_and_queues")  # a keyring it makes unwritable, a POSIX queue
    _solved(attack, P1)
    _with(attack, P1, LEAVE_KEYS_AND_QUEUES)
    attack = new("reads_keys_and_queues")
    _stubs(attack)
    _replace(attack, P2, "def scaled_dot_product(", READ_KEYS_AND_QUEUES)
    # practical 2 keeps what every check asked in its keyring and a queue; practical 3 (not
    # started but for that) shows it
    attack = new("hidden_inputs_through_the_keyring")
    _solved(attack, P2)
    shutil.copy2(ROOT / "exercises" / f"{P3}.py", attack / f"{P3}.py")
    _with(attack, P2, KEEP_QUESTIONS_IN_THE_KEYRING)
    _with(attack, P3, SHOW_THE_KEYRING)

    attack = new("reads_earlier_submissions")  # last: every other submission came before
    _stubs(attack)
    _replace(
        attack,
        P2,
        "def scaled_dot_product(",
        "def scaled_dot_product(q, k, v, mask=None):\n"
        "    import glob, os\n"
        "    class CheckFailure(Exception):\n"
        "        pass\n"
        "    seen = []\n"
        "    scratch = os.path.dirname(os.getcwd())  # the grader's, beside this submission's\n"
        "    patterns = [scratch + '/*/*.py', scratch + '/*/home-*/*']\n"
        "    shared = ('/tmp', '/var/tmp', '/dev/shm', '/run/lock')\n"
        "    patterns += [f + '/m2l-left-*' for f in shared]\n"
        "    import ctypes\n"
        "    if ctypes.CDLL(None).shmget(0x5D2C, 0, 0) >= 0:\n"
        "        seen.append('System V shared memory of key 5d2c')\n"
        "    for pattern in patterns:\n"
        "        for path in glob.glob(pattern):\n"
        "            try:\n"
        "                seen.append(path + ': ' + open(path, errors='replace').read(200))\n"
        "            except OSError:\n"
        "                pass\n"
        "    raise CheckFailure('\\n'.join(s for s in seen if '5d2c' in s) or 'nothing')\n\n\n"
        "def _stub_scaled_dot_product(",
    )
    return made


# keyctl and add_key by number (x86_64), as a student would; the keyring's permissions: the
# possessor and the user may view, read, search and link, but no longer write (nor clear).
# keyctl and add_key by number (x86_64), as a student would, in the user keyring (it lives
# while any process of the user does: the batch's bystander); the ring's permissions then:
# the possessor and the user may view, read, search and link, but no longer write (nor clear).
KEYS = """
import ctypes as _c
_libc = _c.CDLL(None, use_errno=True)
_libc.syscall.restype = _c.c_long
_NO_WRITE, _RING = 0x1B1B0000, -4  # the user keyring


def _add_key(name, data):
    key = _libc.syscall(248, b"user", name, data, _c.c_size_t(len(data)), _c.c_long(_RING))
    _libc.syscall(250, 5, _c.c_long(key), _c.c_long(0x3F3F0000))  # the user may read it too
    return key


def _lock_ring():
    return _libc.syscall(250, 5, _c.c_long(_RING), _c.c_long(_NO_WRITE))  # KEYCTL_SETPERM


def _read_key(name):
    key = _libc.syscall(250, 10, _c.c_long(_RING), b"user", name, 0)  # KEYCTL_SEARCH
    if key < 0:
        return None
    buffer = _c.create_string_buffer(4096)
    size = _libc.syscall(250, 11, _c.c_long(key), buffer, 4096)  # KEYCTL_READ
    return buffer.raw[: max(size, 0)].decode(errors="replace")
"""

FLOOD_INODES = """
import os as _os
_os.makedirs("/dev/shm/m2l-flood-5d2c", exist_ok=True)
for _i in range(600_000):
    try:
        _os.close(_os.open(f"/dev/shm/m2l-flood-5d2c/{_i}", _os.O_CREAT | _os.O_WRONLY, 0o600))
    except OSError:  # out of inodes (a sandbox's tmpfs has a bound)
        break
"""

LEAVE_KEYS_AND_QUEUES = (
    KEYS
    + """
_add_key(b"m2l-5d2c", b"left by a classmate 5d2c")
_lock_ring()
_queue = _libc.mq_open(b"/m2l-5d2c", 0o100 | 2 | 0o4000, 0o666, None)  # O_CREAT, O_RDWR, O_NONBLOCK
if _queue >= 0:
    _libc.mq_send(_queue, b"left by a classmate 5d2c", 24, 0)
"""
)

READ_KEYS_AND_QUEUES = (
    "def scaled_dot_product(q, k, v, mask=None):\n"
    + "\n".join("    " + line for line in KEYS.strip().splitlines())
    + "\n"
    "    class CheckFailure(Exception):\n"
    "        pass\n"
    "    seen = [_read_key(b'm2l-5d2c') or '']\n"
    "    if _libc.mq_open(b'/m2l-5d2c', 0, 0, None) >= 0:\n"
    "        seen.append('a queue 5d2c')\n"
    "    raise CheckFailure('\\n'.join(s for s in seen if '5d2c' in s) or 'nothing')\n\n\n"
    "def _stub_scaled_dot_product("
)

KEEP_QUESTIONS_IN_THE_KEYRING = (
    KEYS
    + """
_asked = []
_scaled_dot_product = scaled_dot_product


def scaled_dot_product(q, k, v, mask=None):
    _asked.append(f"q{tuple(q.shape)}")
    said = ("asked-5d2c " + " ".join(_asked[-40:])).encode()
    _add_key(b"m2l-asked-5d2c", said)
    _lock_ring()
    # and a POSIX queue (O_CREAT | O_RDWR | O_NONBLOCK: a full queue drops, never waits)
    queue = _libc.mq_open(b"/m2l-asked-5d2c", 0o100 | 2 | 0o4000, 0o666, None)
    if queue >= 0:
        _libc.mq_send(queue, said[:8192], len(said[:8192]), 0)
    return _scaled_dot_product(q, k, v, mask)
"""
)

SHOW_THE_KEYRING = (
    KEYS
    + """
_found = _read_key(b"m2l-asked-5d2c")
_queue = _libc.mq_open(b"/m2l-asked-5d2c", 0o4000, 0, None)  # O_RDONLY | O_NONBLOCK
if _queue >= 0:
    _message = _c.create_string_buffer(1 << 16)
    _size = _libc.mq_receive(_queue, _message, 1 << 16, None)
    _found = (_found or "") + _message.raw[: max(_size, 0)].decode(errors="replace")
if _found:
    raise ImportError(_found)
"""
)

PROC_SPY = f"""def scaled_dot_product(q, k, v, mask=None):
    import os

    found = []
    for pid in os.listdir("/proc"):
        for what in ("cmdline", "environ") if pid.isdigit() else ():
            try:
                text = open(f"/proc/{{pid}}/{{what}}", "rb").read().decode(errors="replace")
            except OSError:
                continue
            found += [part for part in text.split("\\0") if "{CASES}" in part]
    for path in found:  # a classmate's folder: use their attention
        for name in ("{P2}.py", "exercises/{P2}.py"):
            try:
                code = open(os.path.join(path, name)).read()
            except OSError:
                continue
            namespace = {{}}
            exec(compile(code, name, "exec"), namespace)
            return namespace["scaled_dot_product"](q, k, v, mask)
    raise ValueError("FOUND " + " | ".join(found) if found else "no folder on any command line")
"""

# The feed-forward's outputs broadcast against each other in the dropout check, and the
# encoder block's zero-size output is reduced along its last axis in the layer-norm check.
GROWING_REPLIES = """
class PositionwiseFeedForward(PositionwiseFeedForward):
    def __call__(self, x, is_train=True):
        return jnp.zeros((30000, 1)) if is_train else jnp.zeros((1, 30000))


class EncoderBlock(EncoderBlock):
    def __call__(self, x, mask=None, is_train=True, return_attention=False):
        return jnp.zeros((2**30, 0))
"""

# A first worker plants startup files wherever the student's user may write, then ends; the
# second worker says which limits it runs with.
PLANTER = """
_solved_attention = scaled_dot_product


def scaled_dot_product(q, k, v, mask=None):
    import os, resource, site, sys

    marker = "/tmp/m2l-planted-9b1f"
    if not os.path.exists(marker):
        code = "import resource\\nresource.setrlimit = lambda *a, **k: None\\n"
        places = [site.getusersitepackages(), os.environ["HOME"], "/tmp", "/var/tmp", "/dev/shm"]
        for place in places + sys.path:
            try:
                os.makedirs(place, exist_ok=True)
                for name in ("usercustomize.py", "sitecustomize.py"):
                    open(os.path.join(place, name), "w").write(code)
                open(os.path.join(place, "m2l.pth"), "w").write(code.replace("\\n", "; "))
            except OSError:
                pass
        open(marker, "w").write("planted")
        os._exit(0)
    names = ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_FSIZE", "RLIMIT_CORE")
    limits = " ".join(f"{n}={resource.getrlimit(getattr(resource, n))}" for n in names)
    raise ValueError("LIMITS " + limits)
"""


def _student_user(env: dict[str, str]) -> str:
    return env.get("M2L_GRADER_USER") or "m2l-student"


def _id(user: str, flag: str) -> str:
    return subprocess.run(["id", flag, user], capture_output=True, text=True).stdout.strip()


def _processes_of(user: str) -> set[int]:
    try:
        uid = int(_id(user, "-u"))
    except ValueError:
        return set()
    pids = set()
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and (entry / "status").read_text().count(f"Uid:\t{uid}\t"):
                pids.add(int(entry.name))
        except OSError:
            continue
    return pids


def _run_or_show(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess:
    """``subprocess.run`` with its output captured; past ``timeout``, the test fails with what
    the command had printed (the grader's log says where it was)."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    except subprocess.TimeoutExpired as err:
        said = err.stdout or b""
        said = said.decode(errors="replace") if isinstance(said, bytes) else said
        pytest.fail(f"{command[0]} ran past {timeout} s; its output:\n{said[-6000:]}")


@pytest.fixture(scope="module")
def graded(installed, tmp_path_factory):
    """Results by name, the honest run and the batch run, and what they ran in: the honest
    submission
    through ``run_autograder`` as on Gradescope, then every other case in one batch (the
    reference is checked once for all), with a process of the student's user that the
    grader did not start (it must live on)."""
    root, env = installed
    tmp_path = tmp_path_factory.mktemp("graded")
    results_file = root / "results" / "results.json"
    if ROOT_ONLY:
        (root / "source" / "secret.txt").write_text("TOP-SECRET-7d1f\n")
        (root / "source" / "secret.txt").chmod(0o600)
    cases = _submissions(tmp_path / CASES, root)
    shutil.copytree(tmp_path / CASES / "honest", root / "submission")

    honest = _run_or_show(  # a guard against a hang: a busy CI machine takes twice as long
        [str(root / "run_autograder")], env=env, timeout=1800
    )
    results = {"honest": json.loads(results_file.read_text())}

    bystander = None
    if ROOT_ONLY:
        uid, gid = (int(_id(_student_user(env), flag)) for flag in ("-u", "-g"))
        bystander = subprocess.Popen(["sleep", "86400"], user=uid, group=gid, extra_groups=[])
    pairs = []
    for name, folder in cases.items():
        target = results_file if name == "rewrite_results" else tmp_path / f"{name}.json"
        pairs += [str(folder), str(target)]
    start = time.monotonic()
    batch = _run_or_show(
        [sys.executable if not ROOT_ONLY else "python3", "-m", "m2l_nlp.grading.trusted", *pairs],
        env={**env, "M2L_ROOT": str(root / "source")},
        cwd=root / "source",
        timeout=3600,  # a guard against a hang (47 submissions; a busy machine is slower)
    )
    batch.seconds = time.monotonic() - start
    for name in cases:
        path = results_file if name == "rewrite_results" else tmp_path / f"{name}.json"
        results[name] = json.loads(path.read_text()) if path.exists() else None
    took = {}  # the grader's own log: seconds per submission, its peak memory
    for part in batch.stdout.split("\n== submission ")[1:]:
        head, _, rest = part.partition("\n")
        seconds = rest.split("submission graded in ")[-1].split(" s")[0]
        took[Path(head.split(": ", 1)[-1]).stem] = seconds
    for name, data in results.items():  # shown with `pytest -s`: the table in the closing note
        score = "no results" if data is None else f"{data.get('score', 0):>5g} / {FULL}"
        print(f"{name:36s} {score}  {took.get(name, '-'):>6s} s")
    print(*(line for line in batch.stdout.splitlines() if line.startswith("peak memory")))
    try:
        yield types.SimpleNamespace(
            results=results,
            honest=honest,
            batch=batch,
            root=root,
            env=env,
            cases=cases,
            bystander=bystander,
        )
    finally:
        if bystander is not None:
            bystander.kill()
            bystander.wait()


def _lock_of(python: str) -> dict[str, str]:
    """The versions that setup.sh installs into ``python`` (its lock file)."""
    minor = subprocess.run(
        [python, "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    lock = ROOT / "m2l_nlp" / "grading" / "trusted" / "gradescope" / f"python{minor}.txt"
    return dict(line.split("==") for line in lock.read_text().splitlines() if "==" in line)


def _tests(data: dict) -> dict[str, dict]:
    return {t["name"]: t for t in data["tests"]}


def _points(data: dict, practical: str) -> float:
    return sum(t["score"] for t in data["tests"] if t["tags"][0] == practical)


def _practical_refused(data: dict, words: str) -> None:
    """Practical 2 scores 0 with ``words`` in its messages; practical 1 keeps its 70."""
    assert _points(data, P1) == P1_POINTS, data
    assert _points(data, P2) == 0, data
    assert words in _tests(data)["scaled_dot_product"]["output"], data


def test_the_honest_submission_earns_every_point_through_run_autograder(graded):
    results, honest = graded.results, graded.honest
    assert honest.returncode == 0, honest.stdout[-3000:] + honest.stderr[-3000:]
    data = results["honest"]
    assert data["score"] == FULL + P3_POINTS and _points(data, P3) == P3_POINTS
    assert [t["score"] for t in data["tests"]] == [t["max_score"] for t in data["tests"]]
    assert f"{FULL + P3_POINTS} / {FULL + P3_POINTS}" in honest.stdout  # as the file says
    lock = _lock_of(_python_for_everyone())
    assert f"jax=={lock['jax']} dm-haiku=={lock['dm-haiku']}" in honest.stdout  # as tested
    hidden = _tests(data)["attention_beyond_the_examples (hidden)"]
    assert hidden["visibility"] == "after_due_date" and hidden["score"] == 10
    assert data["stdout_visibility"] == "hidden" and data["extra_data"]["seed"] > 0


def test_the_batch_ends_well_and_writes_every_results_file(graded):
    results, batch = graded.results, graded.batch
    assert batch.returncode == 0, batch.stdout[-3000:] + batch.stderr[-3000:]
    assert "Traceback" not in json.dumps(results)
    assert all(data is not None and "score" in data for data in results.values())


def test_partial_notebook_and_broken_submissions_get_their_own_marks(graded):
    results = graded.results
    partial = _tests(results["partial_in_exercises_folder"])
    assert partial["multi_hot"]["score"] == 0 and partial["scaled_dot_product"]["score"] == 0
    assert "without dividing the scores" in partial["scaled_dot_product"]["output"]
    assert "fix that first" in partial["multihead_attention"]["output"]
    assert partial["tfidf"]["score"] == partial["tfidf"]["max_score"]
    assert results["notebooks"]["score"] == P1_POINTS  # practical 2 not started
    assert f"graded Copy of {P2}.ipynb" in results["notebooks"]["output"]
    syntax = results["syntax_error"]
    assert syntax["score"] == P1_POINTS  # the other practical is graded
    assert re.search(rf"{P2}\.py, line \d+: syntax error", syntax["output"]), syntax["output"]
    hang = _tests(results["hang"])
    assert hang["tfidf"]["score"] == 0 and "stopped after" in hang["tfidf"]["output"]
    assert sum(t["score"] for t in hang.values()) == P1_POINTS - hang["tfidf"]["max_score"]


def test_the_notebook_named_exactly_wins_over_a_copy(graded):
    data = graded.results["notebook_beside_a_copy"]
    assert data["score"] == P1_POINTS  # the exact name holds the stubs; the copy is solved
    assert f"graded {P2}.ipynb" in data["output"] and f"Copy of {P2}.ipynb" in data["output"]


@pytest.mark.parametrize(
    "trick",
    [
        "import_solutions",
        "read_solutions_by_path",
        "replace_run_check",
        "replace_outcome",
        "rewrite_results",
        "borrow_from_stack",
        "conftest",
    ],
)
def test_tricks_on_the_stubs_earn_nothing(graded, trick):
    if trick == "read_solutions_by_path" and not ROOT_ONLY:
        pytest.skip("the solutions are root's only when the grader is root")
    assert graded.results[trick]["score"] == 0, graded.results[trick]


@pytest.mark.skipif(not ROOT_ONLY, reason="links to root's files need root")
def test_a_submission_that_is_one_symlink_earns_nothing_from_it(graded):
    _practical_refused(graded.results["symlinked_exercises_folder"], "symbolic link")


@pytest.mark.skipif(not ROOT_ONLY, reason="a root-only file needs root")
def test_a_symlink_to_a_root_only_file_is_never_read(graded):
    data = graded.results["symlink_to_a_root_only_file"]
    _practical_refused(data, "symbolic link")
    assert "TOP-SECRET" not in json.dumps(data)


@pytest.mark.skipif(not ROOT_ONLY, reason="a link to root's solutions needs root")
def test_a_hard_link_to_the_solutions_is_refused(graded):
    _practical_refused(graded.results["hard_link_to_the_solutions"], "link")


def test_a_fifo_and_a_huge_sparse_file_are_refused_unread(graded):
    _practical_refused(graded.results["fifo"], "named pipe (FIFO)")
    _practical_refused(graded.results["sparse_huge_file"], "over the limit of 20 MiB")


@pytest.mark.parametrize(
    "name",
    [
        "notebook_malformed_metadata",
        "notebook_deep_nesting",
        "notebook_nul_byte",
        "notebook_cells_not_a_list",
    ],
)
def test_a_hostile_notebook_costs_its_own_practical_only(graded, name):
    _practical_refused(graded.results[name], "is not a readable notebook")


def test_answers_recorded_from_the_handout_earn_nothing(graded):
    """The grader draws its questions from a fresh seed: the handout's records answer none,
    and the fake attention they fell back on fails the comparisons with the reference."""
    data = graded.results["replayed_answers"]
    assert _points(data, P1) == P1_POINTS and _points(data, P2) == 0, data
    assert "mismatch with the reference" in _tests(data)["scaled_dot_product"]["output"]


def test_the_grading_package_holds_no_answer_to_import(graded):
    data = graded.results["grading_helpers"]
    _practical_refused(data, "ImportError")


def test_a_worker_that_dies_at_import_costs_its_practical_only(graded):
    _practical_refused(graded.results["dies_at_import"], "exit status 3")


def test_a_worker_that_stops_reading_costs_that_exercise_only(graded):
    tests = _tests(graded.results["stops_reading_its_pipe"])
    assert tests["tfidf"]["score"] == 0 and "stopped after" in tests["tfidf"]["output"]
    assert sum(t["score"] for t in tests.values()) == P1_POINTS - tests["tfidf"]["max_score"]


def test_a_stall_inside_a_hint_costs_that_exercise_only(graded):
    """Once the checks caught the stop and every later exercise met a closed pipe."""
    tests = _tests(graded.results["stall_inside_a_hint"])
    ffn = tests["positionwise_feed_forward"]
    assert ffn["score"] == 0 and "stopped after" in ffn["output"]
    assert sum(t["score"] for t in tests.values()) == FULL - ffn["max_score"]


def test_a_reply_over_the_limit_costs_that_exercise_only(graded):
    tests = _tests(graded.results["huge_reply"])
    assert tests["classifier"]["score"] == 0 and "over the limit" in tests["classifier"]["output"]
    assert sum(t["score"] for t in tests.values()) == FULL - tests["classifier"]["max_score"]


@pytest.mark.skipif(not ROOT_ONLY, reason="a user of its own for student code needs root")
def test_cleanup_kills_what_student_code_started_and_nothing_else(graded):
    assert graded.results["escapes_and_changes_pid"]["score"] == P1_POINTS
    assert graded.bystander.poll() is None  # the user's process the grader did not start
    assert _processes_of(_student_user(graded.env)) == {graded.bystander.pid}


def test_in_a_batch_no_submission_reads_or_keeps_what_another_left(graded):
    """Each submission's files and what its code wrote in /tmp, /var/tmp and /dev/shm are
    gone before the next one runs (here: the last reads everything it can find)."""
    spy = _tests(graded.results["reads_earlier_submissions"])["scaled_dot_product"]["output"]
    assert "nothing" in spy and "VICTIM" not in spy and "left-behind" not in spy, spy
    assert graded.results["leaves_files_behind"]["score"] == P1_POINTS
    for folder in ("/tmp", "/var/tmp", "/dev/shm", "/run/lock"):
        assert not Path(folder, "m2l-left-behind-5d2c").exists()
    assert graded.results["leaves_ipc_and_locks_behind"]["score"] == P1_POINTS
    shm = Path("/proc/sysvipc/shm").read_text().split("\n")[1:]
    assert not any(row.split()[:1] == [str(0x5D2C)] for row in shm)


def test_a_flood_of_inodes_costs_its_maker_nothing_and_no_classmate_anything(graded):
    """600,000 empty files in /dev/shm: bounded by the sandbox's tmpfs (or removed with its
    user, who is retired if they cannot be); the classmate after it is graded in full."""
    assert graded.results["floods_inodes"]["score"] == P1_POINTS
    assert graded.results["after_the_flood"]["score"] == P1_POINTS
    assert not Path("/dev/shm/m2l-flood-5d2c").exists()
    assert "could not grade this submission in this batch" not in graded.batch.stdout


def test_keyrings_and_message_queues_reach_no_classmate(graded):
    spy = _tests(graded.results["reads_keys_and_queues"])["scaled_dot_product"]["output"]
    assert "nothing" in spy and "5d2c" not in spy, spy
    assert graded.results["leaves_keys_and_queues"]["score"] == P1_POINTS
    assert not Path("/dev/mqueue/m2l-5d2c").exists()


def test_hidden_inputs_never_reach_a_visible_message(graded):
    """Practical 2's checks, hidden ones included, leave their questions in the keyring;
    practical 3 would show them in its import error: its visible checks run before any
    hidden one, each phase in a place of its own."""
    data = graded.results["hidden_inputs_through_the_keyring"]
    assert "asked-5d2c" not in json.dumps(data), data
    assert _points(data, P2) == P2_POINTS, data
    stubs = {t["tags"][1] for t in data["tests"] if t["tags"][0] == P3}
    said = {c["status"] for c in data["extra_data"]["checks"] if c["exercise"] in stubs}
    assert said and "error" not in said, data  # practical 3 imported: it found nothing to show


def _log_of(batch_stdout: str, name: str) -> str:
    """What the grader logged while grading the batch's submission ``name``."""
    parts = batch_stdout.split("\n== submission ")
    return next(p for p in parts if f"{name}.json" in p.split("\n", 1)[0])


def test_no_command_line_names_a_classmate_folder(graded):
    """The grader's command line (every user can read /proc) names no submission folder."""
    data = graded.results["reads_the_command_lines"]
    spy = _tests(data)["scaled_dot_product"]["output"]
    assert "no folder on any command line" in spy and CASES not in spy, spy
    assert data["score"] == 0


def test_a_batch_from_folders_the_student_can_open_is_refused(installed, tmp_path_factory):
    root, env = installed
    if not ROOT_ONLY:
        pytest.skip("the student's user is another user only when the grader is root")
    open_to_all = Path(tempfile.mkdtemp(prefix="m2l-open-batch-", dir="/tmp"))
    try:
        open_to_all.chmod(0o755)
        for name in ("a", "b"):
            _solved(open_to_all / name, P1)
        pairs = [str(open_to_all / "a"), str(open_to_all / "a.json")]
        pairs += [str(open_to_all / "b"), str(open_to_all / "b.json")]
        run = subprocess.run(
            ["python3", "-m", "m2l_nlp.grading.trusted", *pairs],
            env={**env, "M2L_ROOT": str(root / "source")},
            cwd=root / "source",
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert run.returncode == 2 and run.stderr.count("\n") == 1, run.stderr
        assert "chmod 700" in run.stderr and "Traceback" not in run.stderr
        assert not (open_to_all / "a.json").exists()
    finally:
        shutil.rmtree(open_to_all)


def test_folders_thousands_deep_cost_nothing_and_the_batch_goes_on(graded):
    assert graded.results["deep_folders"]["score"] == P1_POINTS
    assert not Path("/tmp/d").exists()
    names = list(graded.cases)
    later = names[names.index("deep_folders") + 1 :]
    assert later and all(graded.results[n] is not None for n in later)


def test_import_errors_that_cannot_be_printed_or_forge_the_log_are_escaped(graded):
    for name in ("import_error_with_a_lone_surrogate", "import_error_that_forges_the_log"):
        _practical_refused(graded.results[name], "ImportError")
    log = _log_of(graded.batch.stdout, "import_error_that_forges_the_log")
    assert "\x1b" not in graded.batch.stdout and "\r" not in graded.batch.stdout
    assert "\\u001b[2K" in log
    forged = ("total", "all exercises passed")  # as lines of the grader's own table
    lines = [line for line in log.splitlines() if line.startswith(forged)]
    assert len(lines) == 1 and f"70 / {FULL + P3_POINTS}" in lines[0], log  # the real total


def test_replies_that_would_grow_in_the_grader_fail_and_its_memory_stays_bounded(graded):
    tests = _tests(graded.results["replies_that_grow_in_the_grader"])
    assert tests["positionwise_feed_forward"]["score"] == 0
    said = "PositionwiseFeedForward returned shape (1, 30000) float32; the check expects (B, S, D)"
    assert said in tests["positionwise_feed_forward"]["output"]
    assert tests["encoder_block"]["score"] == 0
    assert "shape (1073741824, 0)" in tests["encoder_block"]["output"]
    assert tests["scaled_dot_product"]["score"] == tests["scaled_dot_product"]["max_score"]
    peak = float(graded.batch.stdout.split("peak memory: the grader ")[1].split(" MB")[0])
    assert peak < 1024, graded.batch.stdout[-2000:]


def test_a_second_worker_keeps_every_limit_whatever_the_first_planted(graded):
    from m2l_nlp.grading.trusted.limits import STUDENT_LIMITS

    output = _tests(graded.results["plants_startup_files"])["scaled_dot_product"]["output"]
    assert "LIMITS" in output, output
    for name in LIMITS:
        value = STUDENT_LIMITS[name]
        assert f"{name}=({value}, {value})" in output, output


def test_a_trivial_target_of_the_hidden_exercise_earns_nothing(graded):
    tests = _tests(graded.results["uniform_multihead_attention"])
    assert tests["multihead_attention"]["score"] == 0
    assert tests["attention_beyond_the_examples (hidden)"]["score"] == 0
    assert tests["scaled_dot_product"]["score"] == tests["scaled_dot_product"]["max_score"]


# The bounded batch's seconds a submission: small enough that a slow submission spends it all,
# large enough for an honest one on a CI machine loaded by four lanes (40 s ran out there).
BOUNDED_S = 120


@pytest.fixture(scope="module")
def bounded(installed, tmp_path_factory):
    """A batch under small budgets (``grading.toml``: BOUNDED_S a submission, 700 MB for its
    processes together), each phase as a fresh user of the pool (the path where sandboxes
    are refused): a submission whose processes hold too much memory, one that spends its
    time importing and dying, one that holds 1.5 GB in socket buffers (kernel memory), one
    that tries to leave a key in a keyring it makes unwritable (refused) and leaves a message
    queue, then an honest classmate."""
    root, env = installed
    tmp = tmp_path_factory.mktemp("bounded")
    source = tmp / "source"
    shutil.copytree(root / "source", source, symlinks=True)
    settings = source / "grading.toml"
    kept = [
        line
        for line in settings.read_text().splitlines()
        if not line.startswith(("submission_time_limit", "memory_budget_mb"))
    ]
    budgets = f"submission_time_limit = {BOUNDED_S}\nmemory_budget_mb = 700\n"
    settings.write_text(budgets + "\n".join(kept))
    cases = tmp / CASES
    hog = cases / "memory_hog"
    _solved(hog, P1, P2)
    _with(hog, P2, MEMORY_HOG)
    slow = cases / "slow_import_then_dies"
    _solved(slow, P1, P2)
    _with(slow, P2, SLOW_THEN_DIES)
    sockets = cases / "socket_buffers"
    _solved(sockets, P1, P2)
    _with(sockets, P2, SOCKET_HOG)
    keys = cases / "leaves_keys_and_queues"  # nothing it leaves outlives its phase
    _solved(keys, P1)
    _with(keys, P1, LEAVE_KEYS_AND_QUEUES)
    honest = cases / "honest"
    _solved(honest, P1, P2)
    pairs = []
    for folder in (hog, slow, sockets, keys, honest):
        pairs += [str(folder), str(tmp / f"{folder.name}.json")]
    run = _run_or_show(
        ["python3" if ROOT_ONLY else sys.executable, "-m", "m2l_nlp.grading.trusted", *pairs],
        # the fallback path, where a machine refuses sandboxes: a fresh user per phase
        env={**env, "M2L_ROOT": str(source), "M2L_ISOLATION": "users"},
        cwd=source,
        timeout=1800,
    )
    cases = (hog, slow, sockets, keys, honest)
    missing = [f.name for f in cases if not (tmp / f"{f.name}.json").exists()]
    if missing:  # what the grader said is the whole story: show it
        pytest.fail(
            f"no results for {', '.join(missing)}; the grader's log ends:\n"
            f"{run.stdout[-6000:]}\n{run.stderr[-3000:]}"
        )
    results = {f.name: json.loads((tmp / f"{f.name}.json").read_text()) for f in cases}
    for line in run.stdout.splitlines():  # shown with `pytest -s`
        if line.startswith(("== submission", "submission graded in", "peak memory")):
            print(line)
    for name, data in results.items():
        print(f"{name:36s} {data.get('score', 0):>5g} / {FULL}")
    return types.SimpleNamespace(run=run, results=results)


# Practical 1's code at import: a file in its HOME and a process that outlives it.
LEAVE_FOR_THE_NEXT = """
import os as _os
import subprocess as _sp

with open(_os.path.join(_os.environ["HOME"], "left.txt"), "w") as _f:
    _f.write("what practical 1's checks asked")
try:
    _sp.Popen(["sleep", "317"], start_new_session=True)
except OSError:
    pass
"""

REFUSE_WHAT_WAS_LEFT = """
import glob as _glob
import os as _os


def _sleepers():
    found = []
    for pid in filter(str.isdigit, _os.listdir("/proc")):
        try:
            mine = _os.stat(f"/proc/{pid}").st_uid == _os.getuid()
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if mine and f.read() == b"sleep\\x00317\\x00":
                    found.append(pid)
        except OSError:
            pass
    return found


_here = _os.path.dirname(_os.path.abspath(__file__))
_left = _glob.glob(_os.path.join(_here, "home-*", "left.txt"))
if _left or _sleepers():
    raise ImportError(f"practical 1 left {_left} and processes {_sleepers()}")
"""


# At import, once: six processes of 150 MB each (each under any one process's limit).
MEMORY_HOG = """
import os as _os, time as _time
if not _os.path.exists("/tmp/m2l-hog-3c1d"):
    open("/tmp/m2l-hog-3c1d", "w").close()
    for _ in range(6):
        if _os.fork() == 0:
            _held = b"x" * (150 << 20)
            _time.sleep(600)
            _os._exit(0)
"""

# At the first call, 1.5 GB in flight between socket pairs: kernel memory, in no process's
# size (the fds' limit raised to its hard one, and processes forked where it is too low).
SOCKET_HOG = """
import os as _os, resource as _resource, socket as _socket, time as _time
_attention = scaled_dot_product
_pairs = []


def _fill(goal):
    held = 0
    try:
        while held < goal:
            a, b = _socket.socketpair()
            a.setblocking(False)
            try:
                while True:
                    held += a.send(bytes(65536))
            except BlockingIOError:
                _pairs.append((a, b))
    except OSError:  # out of descriptors
        pass
    return held


def scaled_dot_product(q, k, v, mask=None):
    if not _pairs:
        hard = _resource.getrlimit(_resource.RLIMIT_NOFILE)[1]
        _resource.setrlimit(_resource.RLIMIT_NOFILE, (hard, hard))
        goal = 1536 << 20
        each = max(_fill(goal), 1 << 20)
        for _ in range(min((goal - each) // each + 1, 64) if each < goal else 0):
            if _os.fork() == 0:  # a child holds its share until it is killed
                _fill(each)
                _time.sleep(600)
                _os._exit(0)
    return _attention(q, k, v, mask)
"""

# Every import takes 30 s (under the 60 s an import may take); every call ends the process:
# its time runs out after a few imports, whatever the number of checks.
SLOW_THEN_DIES = """
import os as _os, time as _time
_time.sleep(30)


def _dies(*args, **kwargs):
    _os._exit(1)


globals().update(
    {n: _dies for n, v in list(globals().items()) if not n.startswith("_") and callable(v)}
)
scaled_dot_product = _dies
"""


def test_a_submission_whose_processes_hold_too_much_memory_is_stopped_alone(bounded):
    assert bounded.run.returncode == 0, bounded.run.stderr[-3000:]
    hog = bounded.results["memory_hog"]
    assert _points(hog, P1) == P1_POINTS
    assert "over the 700 MB one submission may use" in json.dumps(hog), hog
    assert bounded.results["honest"]["score"] == FULL  # the reference's processes live on


def test_kernel_memory_a_submission_holds_counts_in_its_phase_memory_group(bounded):
    """Socket buffers are in no process's size: the phase's memory cgroup counts them, the
    kernel stops the submission's process, the student reads why, and the classmate after
    it is graded in full."""
    log = _log_of(bounded.run.stdout, "socket_buffers")
    if "memory: no cgroup per phase" in bounded.run.stdout:
        pytest.skip("this machine gives the grader no memory cgroup")
    sockets = bounded.results["socket_buffers"]
    assert "counted by the kernel" in _tests(sockets)["scaled_dot_product"]["output"], log
    assert _points(sockets, P1) == P1_POINTS, sockets  # practical 1 had a group of its own
    assert bounded.results["honest"]["score"] == FULL


def test_a_submission_has_one_time_budget_for_its_imports_and_checks(bounded):
    assert bounded.run.returncode == 0, bounded.run.stderr[-3000:]
    slow = bounded.results["slow_import_then_dies"]
    assert _points(slow, P1) == P1_POINTS and _points(slow, P2) == 0
    assert f"whole submission's time ({BOUNDED_S} s" in json.dumps(slow)
    log = _log_of(bounded.run.stdout, "slow_import_then_dies")
    took = float(log.split("submission graded in ")[1].split(" s")[0])
    assert took < BOUNDED_S + 30, log  # its own time, and the reference's answers
    assert bounded.results["honest"]["score"] == FULL


def test_without_sandboxes_what_a_user_leaves_is_removed_and_its_keyring_stays_empty(bounded):
    """The users path: the queue is removed as root; the key is refused when made (a keyring
    its user makes unwritable would shut root out, and burn that user for every later
    grading on the machine), so no user of the pool is retired."""
    if not ROOT_ONLY:
        pytest.skip("the grader runs student code as users of a pool only as root")
    log = bounded.run.stdout
    assert "isolation: a fresh user per phase" in log, log[-3000:]
    # (a user left unwritable by a grading before the filter is retired at start, not here)
    assert "what it left could not all be removed" not in log, log[-3000:]
    assert bounded.results["leaves_keys_and_queues"]["score"] == P1_POINTS
    assert bounded.results["honest"]["score"] == FULL
    assert not Path("/dev/mqueue/m2l-5d2c").exists()


def test_nothing_a_practical_left_reaches_the_next_one(graded):
    data = graded.results["leaves_files_for_the_next_practical"]
    assert _points(data, P1) == P1_POINTS and _points(data, P2) == P2_POINTS, data


def test_in_a_batch_each_results_file_is_its_own(graded):
    results = graded.results
    assert "not a folder" in results["submission_is_a_file"]["output"]
    assert results["submission_is_a_file"]["score"] == 0
    assert results["hang"]["score"] == P1_POINTS - 10 and results["notebooks"]["score"] == P1_POINTS


def test_the_grade_is_reproduced_from_its_seed(graded, tmp_path):
    """The seed in a results file grades the submission again to the same verdicts."""
    first = graded.results["partial_in_exercises_folder"]
    seed = first["extra_data"]["seed"]
    again = tmp_path / "again.json"
    run = _run_or_show(
        [
            sys.executable if not ROOT_ONLY else "python3",
            "-m",
            "m2l_nlp.grading.trusted.grader",
            "--seed",
            str(seed),
            str(graded.cases["partial_in_exercises_folder"]),
            str(again),
        ],
        env={**graded.env, "M2L_ROOT": str(graded.root / "source")},
        cwd=graded.root / "source",
        timeout=1200,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    second = json.loads(again.read_text())

    def verdicts(data: dict) -> list[dict]:  # the same but for the seconds they took
        return [{k: v for k, v in t.items() if k != "execution_time"} for t in data["tests"]]

    assert verdicts(second) == verdicts(first) and second["extra_data"]["seed"] == seed


def test_no_user_to_run_student_code_is_said_in_the_results(installed, tmp_path):
    root, env = installed
    if not ROOT_ONLY:
        pytest.skip("the grader drops to another user only as root")
    _solved(tmp_path / "submission", P1)
    out = tmp_path / "results.json"
    run = _run_or_show(
        ["python3", "-m", "m2l_nlp.grading.trusted", str(tmp_path / "submission"), str(out)],
        env={**env, "M2L_ROOT": str(root / "source"), "M2L_GRADER_USER": "no-such-user-m2l"},
        cwd=root / "source",
        timeout=120,
    )
    assert run.returncode == 1 and "Traceback" not in run.stderr
    assert "no user no-such-user-m2l" in json.loads(out.read_text())["output"]


NAIVE_SOFTMAX = """
def scaled_dot_product(q, k, v, mask=None):
    import jax.numpy as jnp

    scores = q @ jnp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = jnp.where(mask == 0, -1e9, scores)
    e = jnp.exp(scores)  # no maximum subtracted: scores in the thousands overflow
    w = e / e.sum(-1, keepdims=True)
    return w @ v, w
"""


def test_partial_credit_and_visible_hidden_checks_through_run_autograder(graded, tmp_path):
    """A half-done submission (practical 1 solved; practical 2's attention right but for
    large scores, the rest not started) under an instructor's other settings: points per
    check, the hidden checks shown at once and left out of the total."""
    settings = graded.root / "source" / "grading.toml"
    kept = settings.read_text()
    submission = graded.root / "submission"
    shutil.rmtree(submission)
    _solved(submission, P1)
    shutil.copy2(ROOT / "exercises" / f"{P2}.py", submission / f"{P2}.py")
    _with(submission, P2, "import math\n" + NAIVE_SOFTMAX)
    settings.write_text(
        "partial_credit = true\n[hidden]\nvisibility = 'visible'\nin_total = false\n"
    )
    try:
        run = subprocess.run(
            [str(graded.root / "run_autograder")],
            env=graded.env,
            timeout=1200,
        )
    finally:
        settings.write_text(kept)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    data = json.loads((graded.root / "results" / "results.json").read_text())
    tests = _tests(data)
    assert tests["scaled_dot_product"]["score"] == 12  # 4 of its 5 checks
    assert "(3 points)" in tests["scaled_dot_product"]["output"]
    assert tests["multihead_attention"]["score"] == 0  # not started
    hidden = tests["attention_beyond_the_examples (hidden)"]
    assert hidden["visibility"] == "visible" and hidden["score"] == 0  # a gate: MHA not started
    assert "longer_sequences_through_heads" in hidden["output"] or "not started" in hidden["output"]
    assert data["score"] == P1_POINTS + 12  # the hidden points are not counted
