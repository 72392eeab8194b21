"""Tests of m2l_nlp.grading.trusted.limits: the launcher, the memory watch, the phase's memory
group and the time budget."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest


def test_the_reference_answering_does_not_count_against_the_submission_time():
    from m2l_nlp.grading.trusted.limits import TimeBudget

    budget = TimeBudget(5.0)
    before = budget.deadline
    budget.pause(2.5)
    assert budget.deadline == before + 2.5 and budget.left() > 5.0


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


def test_memory_the_kernel_holds_for_the_student_counts_against_the_budget(tmp_path, as_nobody):
    """A detached System V segment and a file in an in-memory folder belong to no process,
    yet they are memory: the watch counts both, and of the folder's growth only the student
    user's files (another process's file there is not the submission's)."""
    import subprocess

    from m2l_nlp.grading.trusted.limits import MemoryWatch, TmpfsGrowth, detached_shared_memory

    nobody, python = 65534, "/usr/bin/python3"  # as_nobody's user and Python
    make = (
        "import ctypes\nlibc = ctypes.CDLL(None)\n"
        "libc.shmat.restype = ctypes.c_void_p\n"
        "i = libc.shmget(0, 8 << 20, 0o1000 | 0o600)\n"
        "p = ctypes.c_void_p(libc.shmat(i, None, 0))\n"
        "ctypes.memset(p, 1, 8 << 20)\nlibc.shmdt(p)\nprint(i)\n"
    )
    before = detached_shared_memory(nobody)
    ident = int(as_nobody(make).stdout)
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


def test_the_memory_group_path_is_probed_before_a_phase_relies_on_it(tmp_path):
    """A group is made and a launched process joins it, or the probe says why not in a line
    (here: a parent folder that is no cgroup at all, where nothing can be made)."""
    from m2l_nlp.grading.trusted.limits import MemoryGroup

    missing = (tmp_path / "no-such-cgroup", False)
    assert "a group cannot be made under" in MemoryGroup.probe(missing, 64 << 20)
    parent = MemoryGroup.parent()
    if os.geteuid() != 0 or isinstance(parent, str):
        pytest.skip(f"needs root and a memory cgroup ({parent})")
    assert MemoryGroup.probe(parent, 256 << 20) is None
    assert not list(parent[0].glob(f"m2l-phase-{os.getpid()}-probe"))  # removed after


def test_nothing_the_launcher_starts_can_call_through_another_architecture():
    """On x86_64, ``int 0x80`` reaches i386's system calls, numbered otherwise (add_key is
    286 there): the filter refuses every call of an architecture that is not the machine's."""
    import platform

    from m2l_nlp.grading.trusted.limits import launch_command

    if platform.machine() != "x86_64":
        pytest.skip("int 0x80 is x86_64's door to i386's calls")
    # mov eax, 20 (i386's getpid); int 0x80; ret: the pid, or -1 (-EPERM) when refused
    probe = (
        "import ctypes, mmap, os\n"
        "page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)\n"
        "page.write(bytes.fromhex('b814000000cd80c3'))\n"
        "address = ctypes.addressof(ctypes.c_char.from_buffer(page))\n"
        "said = ctypes.CFUNCTYPE(ctypes.c_int)(address)()\n"
        "print('i386 getpid', 'refused' if said == -1 else 'allowed' if said == os.getpid() "
        "else said)\n"
    )
    run = lambda command: subprocess.run(  # noqa: E731
        command, input=probe, capture_output=True, text=True, timeout=120
    )
    assert "i386 getpid allowed" in run([sys.executable, "-m", "code"]).stdout  # the door
    done = run(launch_command("code", [], None, None))
    assert "i386 getpid refused" in done.stdout, done.stdout + done.stderr


def test_the_graders_own_memory_watch_calls_once_past_its_bound():
    from m2l_nlp.grading.trusted.limits import bound_own_memory, memory_of

    called = []
    bound_own_memory(memory_of(os.getpid()) // 2, called.append, interval=0.01)
    deadline = time.monotonic() + 5
    while not called and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.05)
    assert len(called) == 1 and called[0] > 0  # once, with what it held


def test_an_oom_score_is_set_or_the_reason_given():
    from m2l_nlp.grading.trusted.limits import set_oom_score

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        assert set_oom_score(child.pid, 1000) is None  # raising it needs no privilege
        with open(f"/proc/{child.pid}/oom_score_adj") as handle:
            assert handle.read().strip() == "1000"
        lowered = set_oom_score(child.pid, -1000)
        assert lowered is None or "CAP_SYS_RESOURCE" in lowered  # (a container may drop it)
    finally:
        child.kill()
        child.wait()


def test_processes_in_this_ipc_namespace_are_not_listed_as_others():
    from m2l_nlp.grading.trusted.limits import current_limits, ipc_namespaces

    assert ipc_namespaces([os.getpid(), os.getppid()]) == {}
    assert all(soft <= hard or hard == -1 for soft, hard in current_limits().values())


def test_a_groups_limit_is_read_from_its_version_and_gone_graders_groups_are_removed(tmp_path):
    """Read on plain folders laid out as cgroups are (no root needed): the limit from the
    file of each cgroup version; the groups of graders that are gone removed, ours and
    what is not a group kept, one that cannot go named."""
    from m2l_nlp.grading.trusted.limits import GROUP_PREFIX, MemoryGroup

    for v2, name in ((True, "memory.max"), (False, "memory.limit_in_bytes")):
        group = tmp_path / f"v{2 if v2 else 1}"
        group.mkdir()
        (group / name).write_text("67108864\n")
        assert MemoryGroup(group, v2).limit == 64 << 20

    gone = subprocess.Popen(["true"])
    gone.wait()  # its pid names no process now
    parent = tmp_path / "parent"
    for name in (f"{gone.pid}-a", f"{gone.pid}-b", f"{os.getpid()}-a"):
        (parent / f"{GROUP_PREFIX}{name}").mkdir(parents=True)
    (parent / f"{GROUP_PREFIX}{gone.pid}-b" / "held").write_text("")  # it cannot be removed
    (parent / "other").mkdir()
    left = MemoryGroup.remove_abandoned((parent, True))
    assert len(left) == 1 and f"{GROUP_PREFIX}{gone.pid}-b" in left[0]
    assert sorted(p.name for p in parent.iterdir()) == sorted(
        [f"{GROUP_PREFIX}{gone.pid}-b", f"{GROUP_PREFIX}{os.getpid()}-a", "other"]
    )
