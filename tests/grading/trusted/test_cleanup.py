"""Tests of m2l_nlp.grading.trusted.cleanup: what student code leaves is removed, and nothing
else."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


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
    try:
        done = remove_path(tmp_path / "d")
        assert done.left == [] and done.removed == 3001
        assert list(tmp_path.iterdir()) == []
    finally:  # pytest's own clean-up of old temporary folders recurses, and fails on this tree
        subprocess.run(["rm", "-rf", str(tmp_path / "d")], check=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="made as another user, which needs root")
def test_system_v_ipc_objects_of_the_student_user_are_removed_and_no_others(as_nobody):

    from m2l_nlp.grading.trusted.cleanup import remove_ipc_of

    make = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "IPC_PRIVATE, IPC_CREAT = 0, 0o1000\n"
        "print(libc.shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0o666),"
        " libc.semget(IPC_PRIVATE, 1, IPC_CREAT | 0o666),"
        " libc.msgget(IPC_PRIVATE, IPC_CREAT | 0o666))\n"
    )
    nobody = 65534  # as_nobody's user
    made = as_nobody(make)
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


def test_the_student_users_keyrings_are_emptied(as_nobody):
    """A key in the persistent keyring outlives its processes; cleanup empties it."""

    from m2l_nlp.grading.trusted.cleanup import remove_keys_of

    nobody = 65534  # as_nobody's user
    code = (
        "import ctypes, sys\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall.restype = ctypes.c_long\nL = ctypes.c_long\n"
        "ring = libc.syscall(250, 22, L(-1), L(-2))\n"
        "if sys.argv[1] == 'add':\n"
        "    print(libc.syscall(248, b'user', b'm2l-test', b'x', ctypes.c_size_t(1), L(ring)))\n"
        "else:\n"
        "    print(libc.syscall(250, 10, L(ring), b'user', b'm2l-test', L(0)))\n"
    )

    def key(what: str) -> int:
        return int(as_nobody(code, what).stdout)

    if os.uname().machine != "x86_64" or key("add") <= 0:
        pytest.skip("no keyctl here (x86_64 numbers; a seccomp profile may refuse it)")
    assert key("find") > 0  # the key outlived the process that added it
    assert remove_keys_of((nobody, nobody), "/usr/bin/python3").left == []
    assert key("find") < 0
