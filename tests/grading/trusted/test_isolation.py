"""Tests of m2l_nlp.grading.trusted.isolation: sandboxes and the pool of users."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

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
# a user namespace of its own (CLONE_NEWUSER), where it could mount a tmpfs nothing bounds
print(libc.unshare(0x10000000) == 0)
"""


def _in_sandbox(place, args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    """``args`` run in ``place``'s sandbox as its user, as the grader starts a worker."""
    return subprocess.run(
        place.command(args, cwd),
        user=place.user[0],
        group=place.user[1],
        extra_groups=[],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )


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
            done = _in_sandbox(place, [python, "-I", "-c", code], tmp_path)
            assert done.returncode == 0, done.stderr
            return done.stdout.split()
        finally:
            assert places.close(place).left == []

    try:
        made, queue, segment = run(SANDBOX_ATTACK)
        assert int(made) < isolation.TMPFS_INODES and queue == segment == "True"
        nested = "False" if isolation.newer_options() else "True"  # bwrap 0.6 cannot refuse it
        assert run(SANDBOX_SPY) == ["0", "False", "False", "False", nested]
        assert not list(tmp_path.glob("sandbox-*")) and said == []
    finally:
        shutil.rmtree(tmp_path)


SANDBOX_READER = """
import os, sys
seen = []
for path in sys.argv[1:]:
    try:
        with open(path) as handle:
            seen.append(handle.read(40).strip())
    except OSError as err:
        seen.append(type(err).__name__)
try:
    open("/planted-5d2c", "w")
    seen.append("wrote /")
except OSError as err:
    seen.append(type(err).__name__)
print("|".join(seen))
"""


def test_a_sandbox_sees_the_system_and_its_python_not_the_machines_other_files():
    """A world-readable file outside the system's folders (a course's checkout, with its
    solutions in git, say), and the course's own folder beside its library: not there.
    The system's files are, and nothing can be written outside /tmp and /dev/shm."""
    from m2l_nlp.grading.trusted import isolation

    if os.geteuid() != 0:
        pytest.skip("the grader makes sandboxes only as root")
    users = isolation.pool()
    tmp_path = Path(tempfile.mkdtemp(prefix="m2l-sandbox-test-", dir="/tmp"))
    tmp_path.chmod(0o755)
    planted = Path(tempfile.mkdtemp(prefix="m2l-planted-", dir="/opt"))
    python = "/usr/bin/python3"
    why_not = isolation.Isolation.probe(users[0], tmp_path, python)
    if why_not is not None:
        shutil.rmtree(tmp_path)
        shutil.rmtree(planted)
        pytest.skip(f"no sandbox on this machine: {why_not}")
    try:
        planted.chmod(0o755)
        (planted / "solutions.py").write_text("ANSWER = 42\n")
        (planted / "solutions.py").chmod(0o644)
        course = Path(isolation.__file__).resolve().parents[3]  # the course's folder
        places = isolation.Isolation(users, tmp_path, [].append, sandbox=True)
        place = places.open(time.time())
        try:
            paths = [
                str(planted / "solutions.py"),
                str(course / "pyproject.toml"),
                "/etc/os-release",
            ]
            done = _in_sandbox(place, [python, "-I", "-c", SANDBOX_READER, *paths], tmp_path)
        finally:
            places.close(place)
        assert done.returncode == 0, done.stderr
        planted_file, course_file, system_file, root = done.stdout.strip().split("|")
        assert planted_file == course_file == "FileNotFoundError", done.stdout
        assert system_file.startswith(("PRETTY_NAME", "NAME")) and root == "OSError", done.stdout
        assert (planted / "solutions.py").read_text() == "ANSWER = 42\n"
    finally:
        shutil.rmtree(tmp_path)
        shutil.rmtree(planted)


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


def test_a_sandbox_counts_its_own_tmpfs_and_nothing_once_it_is_unmounted(tmp_path):
    """The memory watch reads a sandbox's tmpfs while the phase may be ending: once unmounted,
    its folder is on the machine's disk, whose usage is no submission's."""
    from m2l_nlp.grading.trusted.isolation import Place, mount_tmpfs, unmount

    if os.geteuid() != 0:
        pytest.skip("root mounts a sandbox's tmpfs")
    mount = tmp_path / "sandbox"
    mount.mkdir()
    mount_tmpfs(mount, (65534, 65534))
    place = Place((65534, 65534), "/tmp", mount)
    try:
        (mount / "tmp" / "held").write_bytes(bytes(3 << 20))
        assert 3 << 20 <= place.used() < 4 << 20
    finally:
        unmount(mount)
    assert place.used() == 0


def test_local_trials_run_student_code_as_oneself_and_a_missing_user_is_named(monkeypatch):
    from m2l_nlp.grading.trusted.isolation import student_users

    monkeypatch.setenv("M2L_GRADER_USER", "root")
    assert student_users() is None
    if os.geteuid() == 0:
        monkeypatch.setenv("M2L_GRADER_USER", "m2l-nobody-of-this-name")
        with pytest.raises(LookupError, match="no user m2l-nobody-of-this-name"):
            student_users()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_the_mounts_under_a_folder_are_found_deepest_first(tmp_path):
    from m2l_nlp.grading.trusted.isolation import mounts_under

    inner = tmp_path / "a" / "b c"
    inner.mkdir(parents=True)
    mounted = []
    try:
        for point in (tmp_path / "a", inner):
            if subprocess.run(["mount", "-t", "tmpfs", "none", str(point)]).returncode:
                pytest.skip("this machine refuses a tmpfs mount")
            mounted.append(point)
            inner.mkdir(parents=True, exist_ok=True)  # the outer mount hid it
        assert mounts_under(tmp_path) == [inner, tmp_path / "a"]
        assert mounts_under(inner) == [inner]
    finally:
        for point in reversed(mounted):
            subprocess.run(["umount", str(point)], check=True)


def test_message_queues_are_shown_on_dev_mqueue_or_why_not_is_said():
    """The users path removes a phase's POSIX queues as files of /dev/mqueue: the file system
    is mounted there (root), or one line says why it cannot be."""
    from m2l_nlp.grading.trusted.isolation import show_message_queues

    said = show_message_queues()
    with open("/proc/self/mounts", encoding="utf-8") as handle:
        mounted = any(line.split()[1:3] == ["/dev/mqueue", "mqueue"] for line in handle)
    if said:
        assert said.startswith("POSIX message queues cannot be seen here (") and not mounted
        assert "\n" not in said
    else:
        assert mounted
        assert show_message_queues() == ""  # already there: nothing done twice
