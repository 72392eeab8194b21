"""Tests of m2l_nlp.grading.trusted.remote: the worker process that runs student code, its
deadlines, its replies and what it starts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from m2l_nlp.grading.checks import wire
from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.registry import CheckFailure
from m2l_nlp.grading.checks.runner import StudentError, outcome, reference
from m2l_nlp.grading.checks.tools import jitted
from m2l_nlp.grading.trusted.remote import (
    RemoteNamespace,
    Worker,
    WorkerLost,
    WorkerStopped,
)
from m2l_nlp.grading.trusted.submission import Found

ROOT = Path(__file__).resolve().parents[3]


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


def test_a_haiku_build_runs_in_the_worker_on_the_graders_parameters(tmp_path, SOLUTION):
    """``run_haiku`` on a remote namespace sends the build by name, the parameters and the
    key: the worker's module (practical 2's reference, there) gives what it gives here."""
    from m2l_nlp.grading.checks.tools import key_for, normal, perturb, run_haiku
    from m2l_nlp.grading.practicals.practical2.blocks import _ffn

    (tmp_path / "practical_x.py").write_text(SOLUTION)
    ref = reference("practical2_transformers")
    rng = np.random.default_rng(0)
    x = normal(rng, 2, 5, 12)
    params = perturb(run_haiku(_ffn(0.5, True), ref, None, x), rng)
    worker = _worker(tmp_path)
    try:
        ns = RemoteNamespace(worker)
        for build, key in ((_ffn(0.5, False), None), (_ffn(0.5, True), key_for(3))):
            there = ns.run_haiku(build, params, (x,), key=key, jit=True)
            here = run_haiku(build, ref, params, x, key=key)
            np.testing.assert_allclose(there, here, rtol=1e-5, atol=1e-6)
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


SIGNAL_AND_REAP = """
import json, os, time
from m2l_nlp.grading.trusted.remote import reap_orphans, signal_descendants

def state(pid):  # R/S running or sleeping, Z ended and not reaped, None reaped
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None

def spawn():
    return os.posix_spawn("/bin/sleep", ["sleep", "30"], os.environ)

kept, student = spawn(), spawn()
signal_descendants(keep={kept})
time.sleep(0.3)
killed = (state(kept), state(student))
reap_orphans(keep={kept, student})  # a worker's status still to be read: not reaped
time.sleep(0.1)
held = state(student)
reap_orphans(keep={kept})
time.sleep(0.1)
print(json.dumps(dict(killed=killed, held=held, reaped=state(student), kept=state(kept))))
os.kill(kept, 9)
os.waitpid(kept, 0)
"""


def test_student_processes_are_killed_and_reaped_but_the_ones_kept():
    """``signal_descendants`` kills what lies below the grader but ``keep``, without
    reaping; ``reap_orphans`` then reaps the ended ones but those whose status is awaited."""
    run = subprocess.run(
        [sys.executable, "-c", SIGNAL_AND_REAP], capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr[-2000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["killed"][0] in ("S", "R") and report["killed"][1] == "Z", report
    assert report["held"] == "Z" and report["reaped"] is None, report
    assert report["kept"] in ("S", "R"), report


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


def test_a_worker_that_cannot_start_is_named_before_grading(tmp_path, monkeypatch):
    from m2l_nlp.grading.trusted import remote

    monkeypatch.setattr(remote.sys, "executable", "/bin/false")  # runs, then exits 1
    with pytest.raises(remote.WorkerUnavailable, match="cannot start .*exit status 1"):
        remote.check_workers_start(tmp_path, None, 10.0)


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
