"""The pieces of trusted grading: the plain-data wire, the worker process, notebooks turned
back into modules, and recorded reference answers. (End to end: test_autograder.py.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest

from m2l_nlp.grading.checks import expected, wire
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.registry import CheckFailure
from m2l_nlp.grading.checks.runner import StudentError, outcome
from m2l_nlp.grading.checks.tools import jitted
from m2l_nlp.grading.trusted.remote import (
    RemoteNamespace,
    Worker,
    WorkerLost,
    WorkerStopped,
)
from m2l_nlp.grading.trusted.submission import Found

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------------------------------- wire


def test_wire_round_trip_keeps_types_and_bytes():
    value = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "t": (1, 2.5, None, True, "x"),
        "l": [np.int32(3), np.zeros((0, 4), np.int64)],
        "nested": {"b": np.array([True, False])},
    }
    back = wire.decode(wire.encode(value))
    assert back["t"] == (1, 2.5, None, True, "x") and isinstance(back["l"], list)
    np.testing.assert_array_equal(back["a"], value["a"])
    assert back["a"].dtype == np.float32 and back["l"][1].shape == (0, 4)
    assert wire.digest(value) == wire.digest(back)


def test_wire_never_builds_objects():
    class Evil:
        def __reduce__(self):  # what pickle would run
            raise AssertionError("never called")

    back = wire.decode(wire.encode({"x": Evil(), "o": np.array([object()], dtype=object)}))
    assert back["x"] == wire.Opaque("Evil") and isinstance(back["o"], wire.Opaque)
    for bad in (
        {"a": ["|O", [1], "AAAAAAAAAAA="]},  # object arrays are refused
        {"a": ["<f4", [3], "AAAAAA=="]},  # bytes that do not fill the shape
        {"z": 1},  # unknown tag
        {"t": [1], "l": [2]},  # two tags
    ):
        with pytest.raises(wire.WireError):
            wire.decode(json.dumps(bad).encode())
    with pytest.raises(wire.WireError):
        wire.decode(b"\xff not json")


# ----------------------------------------------------------------------------------- worker

STUDENT = """
import os
import sys
import time

import jax.numpy as jnp


def double(x):
    return 2 * x


def wrong_type(x):
    return object()


def bad_value(x):
    raise ValueError("no such pooling")


def to_do(x):
    raise NotImplementedError("to_do: write me")


def quits(x):
    sys.exit(3)


def dies(x):
    os._exit(3)


def hangs(x):
    while True:
        time.sleep(0.1)


def branchy(x):
    if x.sum() > 0:  # a Python `if` on a traced value
        return x
    return -x


def xla_flags(x):
    return os.environ.get("XLA_FLAGS", "")


def stop_reading(x):  # the worker's loop never reads the grader's next request
    import m2l_nlp.grading.checks.wire as wire

    wire.receive = lambda fd: time.sleep(1e9)


def claim_a_huge_reply(x):  # a header that promises 64 MiB, then nothing
    os.write(int(sys.argv[2]), (64 << 20).to_bytes(8, "big"))
    time.sleep(1e9)


def limits(x):
    import resource

    return [resource.getrlimit(getattr(resource, n)) for n in ("RLIMIT_AS", "RLIMIT_NPROC")]


def escape(x):  # a double fork out of the worker's session, then a new pid every 10 ms
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            while True:
                if os.fork() != 0:
                    os._exit(0)
                time.sleep(0.01)
        os._exit(0)
    return 1
"""


@pytest.fixture(scope="module")
def student_file(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("student")
    (folder / "practical_x.py").write_text(STUDENT)
    return folder


def _worker(folder: Path, env: dict[str, str] | None = None, **options) -> Worker:
    worker = Worker(folder, None, env=env, **options)
    worker.limit, worker.deadline = 60.0, time.monotonic() + 60
    worker.request({"op": "load", "path": str(folder / "practical_x.py"), "name": "practical_x"})
    return worker


def test_worker_runs_student_code_and_returns_plain_data(student_file):
    worker = _worker(student_file)
    try:
        ns = RemoteNamespace(worker)
        np.testing.assert_array_equal(ns.double(np.arange(3)), [0, 2, 4])
        assert isinstance(ns.wrong_type(1), wire.Opaque)
        assert "def double" in ns.source("double")
        with pytest.raises(ValueError, match="no such pooling") as caught:
            ns.bad_value(1)  # a check's `except ValueError` sees it
        assert isinstance(caught.value, StudentError)
        assert caught.value.frames[-1].filename.endswith("practical_x.py")
        with pytest.raises(NotImplementedError):
            ns.to_do(1)
        with pytest.raises(CheckFailure, match="has no `missing`"):
            ns.missing(1)
        with pytest.raises(StudentError) as caught:
            jitted(ns.branchy)(np.ones(3))
        status, message = outcome(caught.value, {str(student_file / "practical_x.py")})
        assert status == "failed" and "jnp.where" in message and "practical_x.py, line" in message
        with pytest.raises(StudentError) as caught:
            ns.quits(1)  # SystemExit is caught there, reported as an error
        assert caught.value.kind == "SystemExit"
        with pytest.raises(WorkerLost, match="exit status 3"):
            ns.dies(1)
    finally:
        worker.kill()


@pytest.mark.parametrize(
    ("grader_flags", "level"),
    [
        ("--xla_force_host_platform_device_count=1", "0"),
        ("--xla_backend_optimization_level=2", "2"),
    ],
)
def test_worker_compiles_as_the_graded_tests_do_unless_told_otherwise(
    student_file, monkeypatch, grader_flags, level
):
    """Reference and student code compile at XLA's quick level, as under pytest (half the
    grading time); the grader's own XLA_FLAGS are kept, and a level set there wins."""
    monkeypatch.setenv("XLA_FLAGS", grader_flags)
    worker = _worker(student_file)
    try:
        flags = RemoteNamespace(worker).xla_flags(0).split()
    finally:
        worker.kill()
    assert grader_flags in flags
    assert [f for f in flags if "optimization_level" in f] == [
        f"--xla_backend_optimization_level={level}"
    ]


def test_worker_runs_student_code_on_the_cpu_beside_an_accelerator(tmp_path, monkeypatch):
    """As the grader's checks, a worker in a process with a GPU (pretended here: the worker's
    main loop runs in this process, on pipes) runs the student's code on the CPU."""
    import os
    import sys

    import jax

    from m2l_nlp.grading.trusted import worker

    (tmp_path / "practical_d.py").write_text(
        "import jax\n\n\ndef device(x):\n    return str(jax.config.jax_default_device)\n"
    )
    monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
    requests_in, requests_out = os.pipe()
    replies_in, replies_out = os.pipe()
    path = str(tmp_path / "practical_d.py")
    wire.send(requests_out, {"op": "load", "path": path, "name": "practical_d"})
    wire.send(requests_out, {"op": "call", "name": "device", "args": [0], "kwargs": {}})
    os.close(requests_out)
    precision = jax.config.jax_default_matmul_precision
    try:
        assert worker.main([str(requests_in), str(replies_out)]) == 0
    finally:
        jax.config.update("jax_default_matmul_precision", precision)
        sys.modules.pop("practical_d", None)
        os.close(requests_in)
        os.close(replies_out)
    replies = [wire.receive(replies_in), wire.receive(replies_in)]
    os.close(replies_in)
    assert replies == [{"ok": None}, {"ok": str(jax.devices("cpu")[0])}]


def test_only_the_reference_worker_keeps_its_programs_in_a_folder_of_its_own(
    student_file, tmp_path, monkeypatch
):
    """The reference's worker compiles each program of a grading run once (its second
    compile of the same program is read back) from a folder that only the grader's user may
    open; a student's worker is given no such folder and writes nothing there."""
    from m2l_nlp.grading.trusted import grader as trusted

    env = trusted._reference_programs(tmp_path)
    folder = Path(env["JAX_COMPILATION_CACHE_DIR"])
    assert folder.parent == tmp_path and folder.stat().st_mode & 0o777 == 0o700
    for kept, extra in ((False, None), (True, env)):  # a student's worker, the reference's
        worker = _worker(student_file, extra)
        try:
            np.testing.assert_array_equal(jitted(RemoteNamespace(worker).double)(np.ones(2)), 2)
        finally:
            worker.kill()
        assert bool(list(folder.iterdir())) == kept

    started = []

    class Started(Exception):
        pass

    def start(folder, practical, user, home=None, env=None, budget=None):
        started.append(env or {})
        raise Started

    monkeypatch.setattr(trusted, "_start", start)
    with pytest.raises(Started):  # the reference's worker: a folder of its own
        trusted.reference_pass(load_exercises(), "practical2_transformers", ROOT, tmp_path)
    with pytest.raises(Started):  # a student's worker: none
        found = Found("", "practical2_transformers.py")
        run = trusted.PhaseRun(tmp_path, None, {})
        trusted.grade_practical(load_exercises(), "practical2_transformers", found, run)
    assert started[0]["JAX_COMPILATION_CACHE_DIR"].startswith(str(tmp_path))
    assert "JAX_COMPILATION_CACHE_DIR" not in started[1]


def test_worker_that_hangs_is_stopped_at_its_deadline(student_file):
    worker = _worker(student_file)
    worker.limit, worker.deadline = 1.0, time.monotonic() + 1.0
    start = time.monotonic()
    with pytest.raises(WorkerStopped):
        RemoteNamespace(worker).hangs(1)
    assert time.monotonic() - start < 10
    assert worker.process.poll() is not None  # killed


def test_a_worker_that_stops_reading_is_stopped_at_the_deadline_of_a_write(student_file):
    """A request larger than the pipe's buffer, to a worker that no longer reads: the
    write waits for the deadline, not for ever; every later request says the same."""
    worker = _worker(student_file)
    ns = RemoteNamespace(worker)
    ns.stop_reading(0)
    worker.limit, worker.deadline = 1.0, time.monotonic() + 1.0
    start = time.monotonic()
    with pytest.raises(WorkerStopped):
        ns.double(np.zeros(1 << 20, np.float32))  # 4 MiB: far more than a pipe holds
    assert time.monotonic() - start < 10 and worker.process.poll() is not None
    with pytest.raises(WorkerStopped):  # not OSError (a closed pipe): the stop is said again
        ns.double(1)
    assert not issubclass(WorkerStopped, Exception)  # a check's `except Exception` lets it by


def test_a_reply_over_the_limit_ends_the_worker_unread(student_file):
    worker = _worker(student_file)
    start = time.monotonic()
    with pytest.raises(WorkerLost, match="over the limit"):
        RemoteNamespace(worker).claim_a_huge_reply(0)
    assert time.monotonic() - start < 10 and worker.process.poll() is not None


ESCAPE = """
import json, subprocess, sys, time
from pathlib import Path
from m2l_nlp.grading.trusted.remote import RemoteNamespace, Worker
from m2l_nlp.grading.trusted.remote import become_subreaper, kill_descendants

assert become_subreaper()
bystander = subprocess.Popen(["sleep", "60"])  # ours, and kept
worker = Worker(Path(sys.argv[1]), None, env={"M2L_TEST_TAG": sys.argv[2]})
worker.limit, worker.deadline = 60.0, time.monotonic() + 60
worker.request({"op": "load", "path": sys.argv[1] + "/practical_x.py", "name": "practical_x"})
RemoteNamespace(worker).escape(0)
worker.kill()  # its session: the escaped processes are not in it
time.sleep(0.3)
killed = kill_descendants(keep={bystander.pid})
print(json.dumps({"killed": killed, "bystander": bystander.poll()}))
bystander.kill()
"""


def _tagged(tag: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        try:
            if (
                entry.name.isdigit()
                and f"M2L_TEST_TAG={tag}".encode() in (entry / "environ").read_bytes()
            ):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def test_processes_that_escape_the_worker_are_killed_and_nothing_else(student_file):
    """A double fork out of the worker's session, with a new pid every 10 ms, is still
    found (the grader adopts orphans) and killed; a process of the grader's that is not
    student code (``keep``) lives on."""
    import subprocess
    import sys
    import uuid

    tag = uuid.uuid4().hex
    run = subprocess.run(
        [sys.executable, "-c", ESCAPE, str(student_file), tag],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["killed"] >= 1 and report["bystander"] is None
    time.sleep(0.2)
    assert _tagged(tag) == []


def test_student_workers_run_with_bounded_memory_and_processes(student_file):
    """Soft and hard limits alike, set before the interpreter starts: student code cannot
    raise them again; and its OOM score makes it the kernel's first choice."""
    from m2l_nlp.grading.trusted import limits as worker_limits

    worker = _worker(
        student_file,
        limits=worker_limits.STUDENT_LIMITS,
        oom_score=worker_limits.STUDENT_OOM_SCORE,
    )
    try:
        memory, processes = RemoteNamespace(worker).limits(0)
        oom = Path(f"/proc/{worker.process.pid}/oom_score_adj").read_text().strip()
    finally:
        worker.kill()
    assert memory == (worker_limits.STUDENT_LIMITS["RLIMIT_AS"],) * 2
    assert processes == (worker_limits.STUDENT_LIMITS["RLIMIT_NPROC"],) * 2
    assert oom == str(worker_limits.STUDENT_OOM_SCORE)


def test_a_worker_that_dies_at_import_costs_its_practical_only(tmp_path):
    from m2l_nlp.grading.trusted import grader as trusted

    (tmp_path / "practical2_transformers.py").write_text("import os\nos._exit(7)\n")
    found = Found("import os\nos._exit(7)\n", "practical2_transformers.py")
    run = trusted.PhaseRun(tmp_path, None, {})
    results = trusted.grade_practical(load_exercises(), "practical2_transformers", found, run)
    assert {r.status for r in results} == {"error"}
    assert "ended (exit status 7)" in results[0].checks[0].message


def test_a_grader_whose_student_user_may_not_run_python_says_so_before_grading(
    tmp_path, monkeypatch, capsys
):
    """Root grading as a user who may not run this Python: one line, before the reference's
    minutes of checks, and each results file says the submission could not be graded."""
    from m2l_nlp.grading.trusted import grader as trusted
    from m2l_nlp.grading.trusted import remote

    def reference_pass(*args, **kwargs):
        raise AssertionError("the reference's checks ran before the student's user was tried")

    if os.geteuid() != 0:
        pytest.skip("the grader runs student code as another user only when it is root")
    monkeypatch.delenv("M2L_GRADER_USER", raising=False)
    from m2l_nlp.grading.trusted import isolation

    monkeypatch.setattr(isolation, "pool", lambda names: [(65534, 65534)])
    monkeypatch.setattr(trusted, "reference_pass", reference_pass)
    private = tmp_path / "private"  # root may go in, user 65534 may not
    private.mkdir(mode=0o700)
    (private / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(private / "python"))
    (tmp_path / "submission").mkdir()
    results = tmp_path / "results.json"
    with pytest.raises(remote.WorkerUnavailable) as raised:  # main() says it in one line
        trusted.grade([(tmp_path / "submission", results)], log=lambda line: None)
    assert str(raised.value).startswith("user 65534 cannot start"), raised.value
    assert "M2L_GRADER_USER=root" in str(raised.value)
    assert json.loads(results.read_text())["score"] == 0


def test_a_worker_that_cannot_start_is_named_before_grading(tmp_path, monkeypatch):
    from m2l_nlp.grading.trusted import remote

    monkeypatch.setattr(remote.sys, "executable", "/bin/false")  # runs, then exits 1
    with pytest.raises(remote.WorkerUnavailable, match="cannot start .*exit status 1"):
        remote.check_workers_start(tmp_path, None, 10.0)


# ---------------------------------------------------------------------------- expected values


def test_recorded_answers_replay_and_an_unrecorded_question_fails_in_words():
    class Reference:
        @staticmethod
        def square(x):
            return np.asarray(x) ** 2

    recorder = expected.Recorder(Reference())
    first = recorder.square(np.arange(3.0))
    replay = expected.Replay(recorder.records)
    np.testing.assert_array_equal(replay.square(np.arange(3.0)), first)
    with pytest.raises(expected.NotRecorded, match="no expected value was recorded"):
        replay.square(np.arange(4.0))
    assert outcome(expected.NotRecorded("x"), set())[0] == "failed"


def test_handout_records_round_trip_through_a_file(tmp_path):
    recorder = expected.Recorder(np, stub_lines=('raise NotImplementedError("f: x")',))
    recorder.add(np.float32(1), np.float32(2))
    path = expected.save(recorder, "practical_x", tmp_path)
    assert path.name == "practical_x.json.gz"
    replay = expected.load("practical_x", tmp_path)
    assert replay.stub_lines == ('raise NotImplementedError("f: x")',)
    assert replay.add(np.float32(1), np.float32(2)) == 3
    with pytest.raises(FileNotFoundError, match="make handout"):
        expected.load("practical_y", tmp_path)


# -------------------------------------------------------------------- what student code reads


def test_no_module_of_the_library_defines_what_an_exercise_asks_for():
    """The installed package is readable by the student's process: none of its modules may
    define an exercise's function or class (the checks ask the reference's process instead,
    and the library takes the components from solutions/ or exercises/)."""
    import ast

    from m2l_nlp.grading.checks.catalog import load_exercises

    targets = {t for ex in load_exercises().values() for t in ex.targets}
    found = []
    for path in sorted((ROOT / "m2l_nlp").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            defined = isinstance(node, (ast.FunctionDef, ast.ClassDef))
            if defined and node.name.lstrip("_") in targets:
                found.append(f"{path.relative_to(ROOT)}: {node.name}")
    assert targets and found == []


def test_what_student_code_left_in_the_shared_folders_is_removed_and_nothing_else(tmp_path):
    """Its files and folders made since the grading began go; older ones, and those of other
    users, stay (here: the test's own user stands for the student's)."""
    import os

    from m2l_nlp.grading.trusted.cleanup import remove_files_of

    (tmp_path / "old.txt").write_text("before the grading")
    time.sleep(0.05)
    since = time.time()
    shared = tmp_path
    (shared / "left.bin").write_bytes(b"x" * 10)
    (shared / "tree" / "deep").mkdir(parents=True)
    (shared / "tree" / "deep" / "f").write_text("x")
    (shared / "link").symlink_to("/etc/hostname")
    assert remove_files_of(os.getuid(), since, (str(shared),)).removed == 5
    assert sorted(p.name for p in shared.iterdir()) == ["old.txt"]
    assert Path("/etc/hostname").exists()


# ------------------------------------------------------------------ bounds of a submission


def test_a_worker_starts_isolated_with_its_limits_before_any_planted_file_runs(tmp_path):
    """``PYTHONPATH``, ``PYTHONSTARTUP``, a ``sitecustomize.py``, a ``usercustomize.py`` and a
    ``.pth`` file planted where the student's user can write never run in the worker: it
    starts isolated, with its limits already set."""
    from m2l_nlp.grading.trusted import limits as worker_limits

    marker = tmp_path / "ran"
    planted = (
        "import pathlib, resource\n"
        f"pathlib.Path({str(marker)!r}).write_text('planted code ran')\n"
        "resource.setrlimit(resource.RLIMIT_AS, (-1, -1))\n"
    )
    home = tmp_path / "home"
    site = home / ".local" / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}"
    for folder in (tmp_path / "path", site / "site-packages"):
        folder.mkdir(parents=True)
        for name in ("sitecustomize.py", "usercustomize.py"):
            (folder / name).write_text(planted)
        (folder / "planted.pth").write_text(f"import os; open({str(marker)!r}, 'w')\n")
    (tmp_path / "student" / "practical_x.py").parent.mkdir()
    (tmp_path / "student" / "practical_x.py").write_text(STUDENT)
    (tmp_path / "student" / "sitecustomize.py").write_text(planted)  # the working folder
    env = {
        "HOME": str(home),
        "PYTHONPATH": str(tmp_path / "path"),
        "PYTHONSTARTUP": str(tmp_path / "path" / "sitecustomize.py"),
        "PYTHONUSERBASE": str(home / ".local"),
    }
    worker = _worker(tmp_path / "student", env, limits=worker_limits.STUDENT_LIMITS)
    try:
        memory, _ = RemoteNamespace(worker).limits(0)
    finally:
        worker.kill()
    assert memory == (worker_limits.STUDENT_LIMITS["RLIMIT_AS"],) * 2
    assert not marker.exists()


def test_a_submission_out_of_time_is_stopped_whatever_each_deadline_says(student_file):
    from m2l_nlp.grading.trusted.limits import TimeBudget
    from m2l_nlp.grading.trusted.remote import OutOfTime

    worker = _worker(student_file)
    worker.budget = TimeBudget(1.0)  # the exercise's own deadline is a minute away
    start = time.monotonic()
    with pytest.raises(OutOfTime, match="time"):
        RemoteNamespace(worker).hangs(0)
    assert time.monotonic() - start < 10
    assert worker.process.poll() is not None


def test_the_reference_answering_does_not_count_against_the_submission_time():
    from m2l_nlp.grading.trusted.limits import TimeBudget

    budget = TimeBudget(5.0)
    before = budget.deadline
    budget.pause(2.5)
    assert budget.deadline == before + 2.5 and budget.left() > 5.0


def test_replies_are_bounded_in_shape_before_any_computation():
    """Bytes do not bound shapes: a zero-size (2**30, 0) array is 0 bytes, and its mean over
    the last axis 8 GiB."""
    for fine in (np.zeros((30000, 1)), [np.zeros((1, 30000)), np.zeros((3, 0))], {"a": 1}):
        wire.check_sizes(wire.decode(wire.encode(fine)))
    for huge in (
        np.zeros((2**30, 0)),
        np.zeros((0, 2**23)),
        [np.zeros((1 << 21,), np.int8)] * 5,  # under the limit each, over it together
        list(range(wire.MAX_ITEMS + 1)),
    ):
        with pytest.raises(wire.TooLarge):
            wire.check_sizes(wire.decode(wire.encode(huge)))


def test_a_reply_of_a_huge_shape_fails_its_check_in_words(tmp_path):
    (tmp_path / "practical_x.py").write_text(
        "import numpy as np\n\ndef empty(x):\n    return np.zeros((2**30, 0), np.float32)\n"
    )
    worker = _worker(tmp_path)
    try:
        with pytest.raises(CheckFailure, match=r"shape \(1073741824, 0\)"):
            RemoteNamespace(worker).empty(0)
        assert RemoteNamespace(worker).source("empty")  # the worker goes on
    finally:
        worker.kill()


def test_the_memory_watch_stops_processes_that_together_hold_too_much(tmp_path):
    """Four processes of 60 MB each, under any one process's limit, over a 150 MB total."""
    import subprocess
    import sys

    from m2l_nlp.grading.trusted.limits import MemoryWatch, memory_of

    hog = "import time\nx = bytearray(60 << 20)\nprint(1, flush=True)\ntime.sleep(60)\n"
    procs = [
        subprocess.Popen([sys.executable, "-c", hog], stdout=subprocess.PIPE) for _ in range(4)
    ]
    for proc in procs:
        proc.stdout.readline()

    def kill():
        for proc in procs:
            proc.kill()

    pids = lambda: {p.pid for p in procs if p.poll() is None}  # noqa: E731
    try:
        assert sum(memory_of(pid) for pid in pids()) > 200 << 20
        with MemoryWatch(150 << 20, pids, kill, interval=0.05) as watch:
            deadline = time.monotonic() + 10
            while pids() and time.monotonic() < deadline:
                time.sleep(0.05)
        assert watch.reset() > 150 << 20 and watch.reset() is None
        assert all(p.wait(5) is not None for p in procs)
    finally:
        kill()


def test_what_student_code_prints_is_escaped_before_the_log(capsys):
    from m2l_nlp.grading.trusted.grader import safe_log, safe_text

    forged = "ok\x1b[2K\r\x1b[1Atotal 180 / 180\u202e\ud800 \x00end"
    text = safe_text(forged)
    assert "\x1b" not in text and "\r" not in text and "\ud800" not in text
    assert "\\u001b" in text and "\\ud800" in text and "\\u202e" in text
    hidden = "\u061c\u00ad\u180e\ufff9\u2028\u2029\U000e0041"  # found by an attack
    assert safe_text(hidden) == "\\u061c\\u00ad\\u180e\\ufff9\\u2028\\u2029\\U000e0041"
    assert safe_text("é 日本\n\t") == "é 日本\n\t"
    assert safe_text("x" * 50, 10) == "x" * 10 + " [... 40 more characters]"
    safe_log(print)(forged)
    assert "\x1b" not in capsys.readouterr().out

    def broken(text):
        raise OSError("stdout closed")

    safe_log(broken)("a logging failure costs nothing")


def test_a_tree_thousands_of_levels_deep_is_removed_without_recursion(tmp_path):
    from m2l_nlp.grading.trusted.cleanup import remove_path

    fd = os.open(tmp_path, os.O_RDONLY)
    for _ in range(3000):  # deeper than any path: made level by level through descriptors
        os.mkdir("d", dir_fd=fd)
        inner = os.open("d", os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
    with open(os.open("f", os.O_WRONLY | os.O_CREAT, dir_fd=fd), "w") as handle:
        handle.write("x")
    os.close(fd)
    done = remove_path(tmp_path / "d")
    assert done.left == [] and done.removed == 3001
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(os.geteuid() != 0, reason="made as another user, which needs root")
def test_system_v_ipc_objects_of_the_student_user_are_removed_and_no_others():
    import subprocess
    import sys

    from m2l_nlp.grading.trusted.cleanup import remove_ipc_of

    make = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "IPC_PRIVATE, IPC_CREAT = 0, 0o1000\n"
        "print(libc.shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0o666),"
        " libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o666),"
        " libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o666))\n"
    )
    nobody = 65534
    python = "/usr/bin/python3"  # one that every user may run (this one may be under /root)
    if not os.access(python, os.X_OK):
        pytest.skip("no /usr/bin/python3 for the student's user")
    made = subprocess.run(
        [python, "-I", "-c", make],
        user=nobody,
        group=nobody,
        extra_groups=[],
        capture_output=True,
        text=True,
        cwd="/",
    )
    ids = [int(i) for i in made.stdout.split()]
    assert len(ids) == 3 and min(ids) >= 0, made.stderr
    mine = subprocess.run(
        [sys.executable, "-I", "-c", make], capture_output=True, text=True, check=True
    ).stdout.split()
    try:
        done = remove_ipc_of(nobody)
        assert done.removed >= 3 and done.left == []
        for kind, ident in zip(("shm", "sem", "msg"), ids, strict=True):
            listed = Path(f"/proc/sysvipc/{kind}").read_text().split("\n")[1:]
            assert all(row.split()[1] != str(ident) for row in listed if row.split())
        for kind, ident in zip(("shm", "sem", "msg"), mine, strict=True):
            listed = Path(f"/proc/sysvipc/{kind}").read_text()
            assert any(row.split()[1:2] == [ident] for row in listed.split("\n")[1:])
    finally:
        import ctypes

        libc = ctypes.CDLL(None)
        libc.shmctl(int(mine[0]), 0, None)
        libc.semctl(int(mine[1]), 0, 0)
        libc.msgctl(int(mine[2]), 0, None)


STAGES = (
    "find_practicals",
    "_write_practical",
    "_start",
    "run_check",
    "blame_earlier",
    "results_json",
    "score_table",
    "kill_descendants",
    "remove_path",
    "write_json_atomic",
)


@pytest.mark.slow
def test_a_failure_in_any_stage_costs_its_own_submission_only(tmp_path, monkeypatch, capsys):
    """One batch: submission i meets a failure injected into stage i (reading it, writing its
    file, starting its worker, a check, the blame notes, its results, its score table, its
    cleanup, writing its results file); each gets its results file (but the one whose writing
    failed), and the honest one after them all its points."""
    from m2l_nlp.grading.trusted import grader

    monkeypatch.setenv("M2L_GRADER_USER", "root")  # student code as this user: no other here
    # time limits are tested elsewhere: here a loaded machine must not stop the honest one
    monkeypatch.setattr(grader, "MIN_LIMIT_S", 300.0)
    monkeypatch.setattr(grader, "LOAD_LIMIT_S", 300.0)
    current = [-1]
    grade_one = grader._grade_one

    def tracked(batch, number, submission, seed):
        current[0] = number
        return grade_one(batch, number, submission, seed)

    monkeypatch.setattr(grader, "_grade_one", tracked)
    for index, stage in enumerate(STAGES):
        original = getattr(grader, stage)

        def failing(*args, _original=original, _index=index, _stage=stage, **kwargs):
            if current[0] == _index:
                raise RuntimeError(f"injected into {_stage}")
            return _original(*args, **kwargs)

        monkeypatch.setattr(grader, stage, failing)
    jobs = []
    for index in range(len(STAGES) + 1):
        folder = tmp_path / f"s{index}"
        folder.mkdir()
        kind = "solutions" if index == len(STAGES) else "exercises"
        (folder / "practical1_baselines.py").write_text(
            (ROOT / kind / "practical1_baselines.py").read_text()
        )
        jobs.append((folder, tmp_path / f"r{index}.json"))
    grader.grade(jobs, root=ROOT)
    log = capsys.readouterr().out
    for index, stage in enumerate(STAGES):
        path = jobs[index][1]
        if stage == "write_json_atomic":
            assert not path.exists() and f"could not write {path}" in log
            continue
        data = json.loads(path.read_text())
        assert "score" in data and data["extra_data"]["seed"] > 0, stage
        # said in the log, or (a check's own error) in that check's result
        assert f"injected into {stage}" in log + json.dumps(data), stage
    honest = json.loads(jobs[-1][1].read_text())
    p1 = [t for t in honest["tests"] if t["tags"][0] == "practical1_baselines"]
    lost = [t.get("output", "") for t in p1 if t["score"] < t["max_score"]]
    assert honest["score"] == sum(t["max_score"] for t in p1) > 0, (lost, log[-3000:])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("m2l-")] == []


def test_every_folder_the_student_user_may_write_to_is_found(tmp_path):
    from m2l_nlp.grading.trusted.cleanup import writable_folders

    for name, mode in (("open", 0o1777), ("closed", 0o755), ("closed/inner", 0o777)):
        (tmp_path / name).mkdir()
        (tmp_path / name).chmod(mode)
    (tmp_path / "open" / "nested").mkdir()
    (tmp_path / "open" / "nested").chmod(0o777)
    found = writable_folders(65534, 65534, top=str(tmp_path))
    mine = sorted(
        Path(f).relative_to(tmp_path).as_posix() for f in found if f.startswith(str(tmp_path))
    )
    assert mine == ["closed/inner", "open", "open/nested"]


def test_the_memory_watch_waits_while_the_reference_starts_again():
    import subprocess

    from m2l_nlp.grading.trusted.limits import MemoryWatch

    hog = subprocess.Popen(
        [sys.executable, "-c", "import time\nx = bytearray(60 << 20)\ntime.sleep(60)\n"]
    )
    try:
        time.sleep(0.5)
        watch = MemoryWatch(10 << 20, lambda: {hog.pid}, hog.kill, interval=0.05)
        watch.paused = True
        with watch:
            time.sleep(0.4)
            assert hog.poll() is None and watch.tripped is None
            watch.paused = False
            hog.wait(10)
        assert watch.tripped is not None
    finally:
        hog.kill()
        hog.wait()


def test_memory_the_kernel_holds_for_the_student_counts_against_the_budget(tmp_path):
    """A detached System V segment and a file in an in-memory folder belong to no process,
    yet they are memory: the watch counts both, and of the folder's growth only the student
    user's files (another process's file there is not the submission's)."""
    import subprocess

    from m2l_nlp.grading.trusted.limits import MemoryWatch, TmpfsGrowth, detached_shared_memory

    nobody, python = 65534, "/usr/bin/python3"
    if not os.access(python, os.X_OK):
        pytest.skip("no /usr/bin/python3 for the student's user")
    make = (
        "import ctypes\nlibc = ctypes.CDLL(None)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "i = libc.shmget(0, 8 << 20, 0o1000 | 0o600)\n"
        "p = ctypes.c_void_p(libc.shmat(i, None, 0))\n"
        "ctypes.memset(p, 1, 8 << 20)\nlibc.shmdt(p)\nprint(i)\n"
    )
    before = detached_shared_memory(nobody)
    made = subprocess.run(
        [python, "-I", "-c", make],
        user=nobody,
        group=nobody,
        extra_groups=[],
        capture_output=True,
        text=True,
        cwd="/",
    )
    ident = int(made.stdout)
    try:
        assert detached_shared_memory(nobody) - before >= 8 << 20
    finally:
        import ctypes

        ctypes.CDLL(None).shmctl(ident, 0, None)
    assert detached_shared_memory(nobody) == before

    growth = TmpfsGrowth((nobody, nobody))
    if "/dev/shm" not in growth.mounts:
        pytest.skip("no writable tmpfs /dev/shm here")
    theirs = Path("/dev/shm") / f"m2l-test-{os.getpid()}-theirs"  # another process's file
    planted = Path("/dev/shm") / f"m2l-test-{os.getpid()}"  # the student's
    write = f"open({str(planted)!r}, 'wb').write(b'1' * (4 << 20))"
    # the student's, deleted while it holds it open: no walk sees it, the growth does
    held = (
        f"import os, time\nfd = os.open({str(planted)!r} + '-held', os.O_CREAT | os.O_RDWR)\n"
        f"os.unlink({str(planted)!r} + '-held')\nos.write(fd, b'1' * (4 << 20))\n"
        "print(1, flush=True)\ntime.sleep(60)\n"
    )
    # 4 MB files, counted to within 1 MB: other processes' files may come and go meanwhile
    kw = {"user": nobody, "group": nobody, "extra_groups": [], "cwd": "/"}
    opened = Path("/dev/shm") / f"m2l-test-{os.getpid()}-open"
    deepest = Path("/dev/shm") / f"m2l-test-{os.getpid()}-deep"
    deep = (  # a path longer than PATH_MAX: reached only folder by folder
        f"import os\nd = os.open('/dev/shm', os.O_RDONLY)\n"
        f"for name in [{deepest.name!r}] + ['d' * 250] * 20:\n"
        "    os.mkdir(name, dir_fd=d)\n    d = os.open(name, os.O_RDONLY, dir_fd=d)\n"
        "f = os.open('f', os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=d)\n"
        "os.write(f, b'1' * (4 << 20))\n"
    )

    def watched() -> int | None:
        with MemoryWatch(
            2 << 20,
            set,
            lambda: None,
            interval=0.05,
            outside=lambda pids, exact: (
                detached_shared_memory(nobody)
                + (growth.grown_by_student() if exact else growth.grown())
            ),
        ) as watch:
            deadline = time.monotonic() + 2
            while watch.tripped is None and time.monotonic() < deadline:
                time.sleep(0.05)
        return watch.reset()

    holder = None
    try:
        theirs.write_bytes(b"\1" * (4 << 20))
        assert growth.grown() >= 4 << 20
        assert growth.grown_by_student() < 1 << 20
        assert watched() is None  # the machine's growth alone stops nobody
        subprocess.run([python, "-I", "-c", write], check=True, **kw)
        assert growth.grown_by_student() >= 3 << 20
        assert watched() >= 3 << 20
        planted.unlink()
        assert growth.grown_by_student() < 1 << 20
        holder = subprocess.Popen([python, "-I", "-c", held], stdout=subprocess.PIPE, **kw)
        holder.stdout.readline()
        assert growth.grown_by_student() >= 3 << 20
        assert watched() >= 3 << 20
        theirs.unlink()  # another process's file gone: the student's share stays
        assert growth.grown_by_student() >= 3 << 20
        holder.kill()
        holder.wait()
        assert growth.grown_by_student() < 1 << 20
        # another user's file that the student may write, and the student's too deep to walk
        opened.touch()
        opened.chmod(0o666)
        append = f"open({str(opened)!r}, 'ab').write(b'1' * (4 << 20))"
        subprocess.run([python, "-I", "-c", append], check=True, **kw)
        assert growth.grown_by_student() >= 3 << 20
        opened.unlink()
        subprocess.run([python, "-I", "-c", deep], check=True, **kw)
        assert growth.grown_by_student() >= 3 << 20
        shutil.rmtree(deepest)
        growth.reset()
        assert growth.grown() < 1 << 20
    finally:
        if holder is not None:
            holder.kill()
            holder.wait()
        for path in (planted, theirs, opened):
            path.unlink(missing_ok=True)
        shutil.rmtree(deepest, ignore_errors=True)


def test_memory_only_files_count_once_and_the_reference_time_credited_is_bounded():
    """Pages written into a memfd that is never mapped are in no process's size; a
    submission that slows the reference gets at most its allowance back."""
    import subprocess
    import sys

    from m2l_nlp.grading.trusted.limits import TimeBudget, memory_files_of

    code = (
        "import os, sys, time\nfd = os.memfd_create('m')\nos.write(fd, b'1' * (8 << 20))\n"
        "pid = os.fork()\nprint(1, flush=True)\ntime.sleep(30)\n"  # two holders, one file
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE)
    try:
        holder.stdout.readline()
        children = Path(f"/proc/{holder.pid}/task/{holder.pid}/children").read_text().split()
        pids = {holder.pid, *map(int, children)}
        assert len(pids) == 2
        assert 8 << 20 <= memory_files_of(pids) < 9 << 20
        assert memory_files_of({os.getpid()}) == 0
    finally:
        for child in children:
            os.kill(int(child), 9)
        holder.kill()
        holder.wait()
    budget = TimeBudget(10, allowance=5)
    before = budget.deadline
    budget.pause(3)
    budget.pause(3)
    assert budget.deadline - before == 5 and budget.allowance == 0


def test_nothing_the_launcher_starts_can_make_a_kernel_key():
    """Keyrings outlive their user's processes and their owner can shut root out of them:
    every process started through the launcher (student code's, and what it starts) is
    refused add_key and keyctl, while its other system calls go on."""
    import platform

    from m2l_nlp.grading.trusted.limits import launch_command

    add_key = {"x86_64": 248, "aarch64": 217}.get(platform.machine())
    if add_key is None:
        pytest.skip("the filter knows keyring calls on x86_64 and aarch64 only")
    # `python -m code` runs what it reads: here, as a student's module would, and in a child
    probe = (
        "import ctypes, os, subprocess, sys\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"made = libc.syscall({add_key}, b'user', b'm2l-t', b'x', ctypes.c_size_t(1), "
        "ctypes.c_long(-4))\n"
        "print('made', made, os.strerror(ctypes.get_errno()) if made < 0 else '')\n"
        "print('child', subprocess.run([sys.executable, '-c', 'import os; "
        "print(os.getpid() > 0)'], capture_output=True, text=True).stdout.strip())\n"
    )
    done = subprocess.run(
        launch_command("code", [], None, None),
        input=probe,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert "made -1 Operation not permitted" in done.stdout, done.stdout + done.stderr
    assert "child True" in done.stdout, done.stdout + done.stderr


def test_a_phase_memory_group_bounds_the_kernel_memory_its_processes_hold():
    """Unix socket buffers are in no process's memory, so no watch sees them: the phase's
    memory cgroup, joined by the launcher before exec, counts them and stops the process."""
    from m2l_nlp.grading.trusted.limits import MemoryGroup, launch_command

    parent = MemoryGroup.parent()
    if os.geteuid() != 0 or isinstance(parent, str):
        pytest.skip(f"needs root and a memory cgroup ({parent})")
    group = MemoryGroup.make(parent, f"{os.getpid()}-test", 64 << 20)
    fill = (  # 200 MB in flight between socket pairs, a line said every 16 MB
        "import socket\n"
        "pairs, held = [], 0\n"
        "while held < 200 << 20:\n"
        "    a, b = socket.socketpair()\n"
        "    a.setblocking(False)\n"
        "    try:\n"
        "        while True:\n"
        "            held += a.send(bytes(65536))\n"
        "    except BlockingIOError:\n"
        "        pairs.append((a, b))\n"
        "    if len(pairs) % 64 == 0:\n"
        "        print('held', held >> 20, flush=True)\n"
        "\n"  # the console ends a block at an empty line
        "print('all of it', flush=True)\n"
    )
    try:
        done = subprocess.run(
            launch_command("code", [], None, None, group=group),
            input=fill,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert "all of it" not in done.stdout and done.returncode != 0, done.stdout[-500:]
        assert group.oom_kills() >= 1
    finally:
        assert group.remove() is None
    assert not group.path.exists()


def test_the_student_users_keyrings_are_emptied():
    """A key in the persistent keyring outlives its processes; cleanup empties it."""
    import subprocess

    from m2l_nlp.grading.trusted.cleanup import remove_keys_of

    nobody, python = 65534, "/usr/bin/python3"
    if not os.access(python, os.X_OK) or os.geteuid() != 0:
        pytest.skip("needs root and a /usr/bin/python3 for the student's user")
    code = (
        "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall.restype = ctypes.c_long\nL = ctypes.c_long\n"
        "ring = libc.syscall(250, 22, L(-1), L(-2))\n"
        "if sys.argv[1] == 'add':\n"
        "    print(libc.syscall(248, b'user', b'm2l-test', b'x', ctypes.c_size_t(1), L(ring)))\n"
        "else:\n"
        "    print(libc.syscall(250, 10, L(ring), b'user', b'm2l-test', L(0)))\n"
    )

    def as_nobody(what: str) -> int:
        done = subprocess.run(
            [python, "-I", "-c", code, what],
            user=nobody,
            group=nobody,
            extra_groups=[],
            cwd="/",
            capture_output=True,
            text=True,
        )
        return int(done.stdout)

    if os.uname().machine != "x86_64" or as_nobody("add") <= 0:
        pytest.skip("no keyctl here (x86_64 numbers; a seccomp profile may refuse it)")
    assert as_nobody("find") > 0  # the key outlived the process that added it
    assert remove_keys_of((nobody, nobody), python).left == []
    assert as_nobody("find") < 0


# ------------------------------------------------------- the grader's own process (round 3)


def test_a_grader_past_its_own_memory_bound_ends_with_its_exit_status():
    """The bound is on the grader's own memory: a process that grows past it calls
    ``over`` once (the grader's ends the process; its supervisor goes on)."""
    code = (
        "import os, time\n"
        "from m2l_nlp.grading.trusted.limits import bound_own_memory\n"
        "bound_own_memory(300 << 20, lambda held: os._exit(75), interval=0.05)\n"
        "kept = [bytearray(8 << 20) for _ in range(64)]  # 512 MB, touched\n"
        "time.sleep(5)\n"
        "os._exit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == 75


def test_a_killed_graders_scratch_is_removed_by_the_next_and_only_that(tmp_path):
    from m2l_nlp.grading.trusted import grader as trusted

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"{trusted.SCRATCH_PREFIX}dead"
    (dead / "submission-0").mkdir(parents=True)
    (dead / "submission-0" / "practical1_baselines.py").write_text("# a student's\n")
    (dead / trusted.MARKER).write_text(f"{gone.pid} {123456789}\n")
    alive = tmp_path / f"{trusted.SCRATCH_PREFIX}alive"
    alive.mkdir()
    me = os.getpid()
    (alive / trusted.MARKER).write_text(f"{me} {trusted._process_start(me)}\n")
    linked = tmp_path / f"{trusted.SCRATCH_PREFIX}linked"  # a marker that is a link: kept
    linked.mkdir()
    (linked / trusted.MARKER).symlink_to(dead / trusted.MARKER)
    unmarked = tmp_path / f"{trusted.SCRATCH_PREFIX}unmarked"
    unmarked.mkdir()
    said = []
    assert trusted.remove_abandoned_scratch(said.append, str(tmp_path)) == 1
    assert not dead.exists() and alive.exists() and linked.exists() and unmarked.exists()
    assert len(said) == 1 and str(dead) in said[0]


def test_the_phases_run_every_visible_check_before_any_hidden_one():
    from m2l_nlp.grading.trusted import grader as trusted

    exercises = load_exercises(ROOT, hidden=True)
    practicals = list(dict.fromkeys(ex.practical for ex in exercises.values()))
    phases = trusted.phases(exercises, practicals)
    kinds = [p.hidden for p in phases]
    assert kinds == sorted(kinds) and True in kinds and False in kinds
    assert all(
        ex.hidden == p.hidden and ex.practical == p.practical for p in phases for ex in p.exercises
    )
    assert sum(len(p.exercises) for p in phases) == len(exercises)


@pytest.mark.slow
def test_a_grader_killed_mid_submission_costs_that_submission_only(tmp_path):
    """As the kernel's OOM killer would: the grader is killed while it grades the first of
    two submissions; that one's results say it could not be graded, and a fresh grader
    grades the second in full."""
    import signal

    batch = tmp_path / "batch"
    batch.mkdir(mode=0o700)
    pairs = []
    for name in ("first", "second"):
        (batch / name).mkdir()
        shutil.copy2(ROOT / "solutions" / "practical1_baselines.py", batch / name)
        pairs += [str(batch / name), str(batch / f"{name}.json")]
    env = {**os.environ, "M2L_GRADER_USER": "root", "M2L_ROOT": str(ROOT)}
    run = subprocess.Popen(
        [sys.executable, "-m", "m2l_nlp.grading.trusted", "--seed", "5", *pairs],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = []
    killed = False
    for line in run.stdout:
        log.append(line)
        if line.startswith("== submission 1 of 2") and not killed:
            children = [  # this batch's grader only: other tests grade beside this one
                int(p)
                for p in os.listdir("/proc")
                if p.isdigit() and _parent(p) == run.pid and b"--grader-state" in _cmdline(p)
            ]
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            killed = bool(children)
    assert run.wait(timeout=900) == 0, "".join(log)[-3000:]
    assert killed
    first = json.loads((batch / "first.json").read_text())
    second = json.loads((batch / "second.json").read_text())
    assert first["score"] == 0 and "could not grade this submission" in first["output"]
    assert second["score"] == sum(
        t["max_score"] for t in second["tests"] if t["tags"][0] == "practical1_baselines"
    )
    assert any("the rest in a fresh grader" in line for line in log), "".join(log)


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rfind(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


SANDBOX_ATTACK = """
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
made = 0
for i in range(100_000):
    try:
        os.close(os.open(f"/tmp/f{i}", os.O_CREAT | os.O_WRONLY, 0o600))
        made += 1
    except OSError:
        break
libc.syscall(248, b"user", b"m2l-sandbox-5d2c", b"kept", ctypes.c_size_t(4), ctypes.c_long(-4))
queue = libc.mq_open(b"/m2l-sandbox-5d2c", 0o100 | 2, 0o666, None)
segment = libc.shmget(0x5D2D, 1 << 20, 0o1000 | 0o666)
print(made, queue >= 0, segment >= 0)
"""

SANDBOX_SPY = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
key = libc.syscall(250, 10, ctypes.c_long(-4), b"user", b"m2l-sandbox-5d2c", 0)
queue = libc.mq_open(b"/m2l-sandbox-5d2c", 0, 0, None)
files = sum(n.startswith("f") for n in os.listdir("/tmp"))
print(files, key >= 0, queue >= 0, libc.shmget(0x5D2D, 0, 0) >= 0)
"""


def test_a_sandbox_bounds_inodes_and_its_kernel_objects_end_with_it():
    """Where bubblewrap starts (root, the kernel's user namespaces), a phase's files are
    bounded in number, and nothing it made (files, keys, queues, System V segments) is
    seen by the next phase's sandbox."""
    from m2l_nlp.grading.trusted import isolation

    if os.geteuid() != 0:
        pytest.skip("the grader makes sandboxes only as root")
    users = isolation.pool()
    tmp_path = Path(tempfile.mkdtemp(prefix="m2l-sandbox-test-", dir="/tmp"))  # as the grader's
    tmp_path.chmod(0o755)
    python = "/usr/bin/python3"  # the standard library only; any user may run it
    why_not = isolation.Isolation.probe(users[0], tmp_path, python)
    if why_not is not None:
        shutil.rmtree(tmp_path)
        pytest.skip(f"no sandbox on this machine: {why_not}")
    said = []
    places = isolation.Isolation(users, tmp_path, said.append, sandbox=True)

    def run(code: str) -> list[str]:
        place = places.open(time.time())
        try:
            done = subprocess.run(
                place.command([python, "-I", "-c", code], tmp_path),
                user=place.user[0],
                group=place.user[1],
                extra_groups=[],
                cwd=tmp_path,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            return done.stdout.split()
        finally:
            assert places.close(place).left == []

    try:
        made, queue, segment = run(SANDBOX_ATTACK)
        assert int(made) < isolation.TMPFS_INODES and queue == segment == "True"
        assert run(SANDBOX_SPY) == ["0", "False", "False", "False"]
        assert not list(tmp_path.glob("sandbox-*")) and said == []
    finally:
        shutil.rmtree(tmp_path)


def test_the_exact_count_of_memory_outside_processes_runs_at_most_once_a_second():
    """While the quick count is over the budget and the exact one under it (another user's
    files in /dev/shm, say), the exact count (a walk of the in-memory folders) is asked at
    most once a second, not at every look; nobody is stopped."""
    from m2l_nlp.grading.trusted.limits import MemoryWatch

    asked = []

    def outside(pids, exact):
        if exact:
            asked.append(time.monotonic())
            return 0
        return 10 << 20  # the machine's growth: over the budget

    killed = []
    with MemoryWatch(1 << 20, set, lambda: killed.append(1), interval=0.02, outside=outside):
        time.sleep(2.5)
    assert 2 <= len(asked) <= 4 and not killed
    assert all(b - a >= 0.99 for a, b in zip(asked, asked[1:], strict=False))


def test_a_pool_user_whose_leftovers_stay_is_retired_and_an_empty_pool_says_so(
    tmp_path, monkeypatch
):
    """The users path: a phase's user whose keyring could not be cleared is never handed
    out again (logged); once every user is retired, no place is left, in words."""
    from m2l_nlp.grading.trusted import isolation
    from m2l_nlp.grading.trusted.cleanup import Cleaned

    if os.geteuid() != 0:
        pytest.skip("the pool's homes are given to its users by root")
    monkeypatch.setattr(isolation, "remove_files_of", lambda *a: Cleaned())
    monkeypatch.setattr(isolation, "remove_ipc_of", lambda *a: Cleaned())
    stuck = {(65534, 65534)}
    monkeypatch.setattr(
        isolation,
        "remove_keys_of",
        lambda user: Cleaned(0, ["keyrings: 1 could not be cleared"] if user in stuck else []),
    )
    said = []
    places = isolation.Isolation([(65534, 65534), (65533, 65533)], tmp_path, said.append)
    first = places.open(time.time())
    assert first.user == (65534, 65534) and Path(first.home).stat().st_uid == 65534
    assert places.close(first).left and places.users == [(65533, 65533)]
    assert any("user 65534 is retired" in line for line in said)
    second = places.open(time.time())
    assert second.user == (65533, 65533) and places.close(second).left == []
    assert places.open(time.time()).user == (65533, 65533)  # a clean user is used again
    stuck.add((65533, 65533))
    places.close(places.open(time.time()))
    with pytest.raises(isolation.NoPlaceLeft, match="every user of the pool"):
        places.open(time.time())
    # a keyring left unwritable by an earlier grading: that user is retired before any phase
    again = isolation.Isolation([(65534, 65534), (65532, 65532)], tmp_path, said.append)
    again.retire_unclean()
    assert again.users == [(65532, 65532)] and again.retired == [(65534, 65534)]
    assert "its keyrings cannot be emptied" in said[-1]
