"""What a submission's processes leave behind, removed before the next submission starts: files
and folders in every folder its user may write to, and System V IPC objects (shared memory,
semaphores, message queues; POSIX queues and shared memory are files in ``/dev/mqueue`` and
``/dev/shm``).

Removal is iterative and bounded: a folder is emptied by moving its sub-folders up beside it
and deleting its files, so a tree thousands of levels deep costs neither recursion nor more
than two open descriptors. Nothing here raises: what could not be removed is counted in the
returned :class:`Cleaned` and logged by the grader.
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import os
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Iterable

# Looked at on every machine; :func:`writable_folders` adds the ones this machine has.
SHARED_FOLDERS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock", "/var/lock")
MAX_ENTRIES = 500_000  # per cleanup: what one submission can make within its limits
MAX_SECONDS = 60.0
_SKIP = ("/proc", "/sys")


@dataclasses.dataclass
class Cleaned:
    """What a cleanup removed, and what it had to leave (with why)."""

    removed: int = 0
    left: list[str] = dataclasses.field(default_factory=list)

    def add(self, other: Cleaned) -> Cleaned:
        self.removed += other.removed
        self.left += other.left
        return self


class _Bound:
    def __init__(self, entries: int, seconds: float):
        self.entries, self.until = entries, time.monotonic() + seconds

    def spend(self) -> bool:
        self.entries -= 1
        return self.entries >= 0 and time.monotonic() < self.until


def remove_tree(
    parent: int, name: str, uid: int | None = None, bound: _Bound | None = None
) -> Cleaned:
    """Remove ``name`` under the folder descriptor ``parent`` and everything in it (only what
    ``uid`` owns, when given), never following a link. Iterative: each sub-folder is moved
    up into ``parent`` under a fresh name and emptied in its turn."""
    bound = bound or _Bound(MAX_ENTRIES, MAX_SECONDS)
    done = Cleaned()
    token = secrets.token_hex(6)
    pending, moved = [name], 0
    while pending:
        current = pending.pop()
        try:
            st = os.stat(current, dir_fd=parent, follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISDIR(st.st_mode):
            _unlink(current, parent, done)
            continue
        try:
            fd = os.open(current, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent)
        except OSError as err:
            done.left.append(f"{current}: {err.strerror}")
            continue
        try:
            while True:  # entries deleted while listing may hide others: list again
                progress = False
                with os.scandir(fd) as entries:
                    for entry in entries:
                        if not bound.spend():
                            done.left.append(
                                f"{current}: over {MAX_ENTRIES} entries or {MAX_SECONDS:g} s"
                            )
                            return done
                        try:
                            inner = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if uid is not None and inner.st_uid != uid:
                            continue
                        if stat.S_ISDIR(inner.st_mode):
                            moved += 1
                            up = f".m2l-removing-{token}-{moved}"
                            try:
                                os.rename(entry.name, up, src_dir_fd=fd, dst_dir_fd=parent)
                            except OSError as err:
                                done.left.append(f"{entry.name}: {err.strerror}")
                                continue
                            pending.append(up)
                        elif not _unlink(entry.name, fd, done):
                            continue
                        progress = True
                if not progress:
                    break
        finally:
            os.close(fd)
        try:
            os.rmdir(current, dir_fd=parent)
            done.removed += 1
        except OSError as err:  # it still holds another user's files
            done.left.append(f"{current}: {err.strerror}")
    return done


def _unlink(name: str, parent: int, done: Cleaned) -> bool:
    try:
        os.unlink(name, dir_fd=parent)
    except OSError as err:
        done.left.append(f"{name}: {err.strerror}")
        return False
    done.removed += 1
    return True


def remove_path(path: str | os.PathLike) -> Cleaned:
    """Remove the folder (or file) ``path`` and all it holds, whoever owns it."""
    head, name = os.path.split(os.path.abspath(path))
    try:
        parent = os.open(head, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as err:
        return Cleaned(0, [f"{head}: {err.strerror}"])
    try:
        return remove_tree(parent, name)
    finally:
        os.close(parent)


def remove_files_of(uid: int, since: float, folders: Iterable[str] = SHARED_FOLDERS) -> Cleaned:
    """Remove what user ``uid`` made in ``folders`` since ``since`` (a time.time()), after
    its processes are gone: in a batch, a submission's files (on disk or, in /dev/shm, in
    memory) must neither fill the machine nor be read by the next. Only the folders' own
    entries are looked at, and the inside of those the user made (other users' trees are
    never walked); through folder descriptors, never following a link."""
    done = Cleaned()
    bound = _Bound(MAX_ENTRIES, MAX_SECONDS)
    for top in dict.fromkeys(os.path.realpath(f) for f in folders):
        try:
            top_fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            with os.scandir(top_fd) as entries:
                names = []
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    # a file system that keeps whole seconds (mqueue) gives a file made in
                    # the phase's first second an earlier time than `since`
                    coarse = st.st_ctime_ns % 1_000_000_000 == 0
                    made = st.st_ctime >= (math.floor(since) if coarse else since)
                    if st.st_uid == uid and made:
                        names.append(entry.name)
            for name in names:
                done.add(remove_tree(top_fd, name, uid, bound))
        except OSError as err:
            done.left.append(f"{top}: {err.strerror}")
        finally:
            os.close(top_fd)
    return done


def writable_folders(
    uid: int, gid: int, depth: int = 3, most: int = 20_000, top: str = "/"
) -> list[str]:
    """Every folder (to ``depth`` levels below ``top``) that user ``uid`` (group ``gid``) may
    write to, besides :data:`SHARED_FOLDERS`: where its processes could leave a file for
    the next submission to read. Looked up once per grading, before any student code runs."""
    found = [f for f in SHARED_FOLDERS if os.path.isdir(f)]
    todo, seen = [(top, 0)], 0
    while todo and seen < most:
        path, level = todo.pop()
        try:
            entries = list(os.scandir(path))
        except OSError:
            continue
        for entry in entries:
            seen += 1
            full = entry.path
            if full in _SKIP:
                continue
            try:
                st = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat.S_ISDIR(st.st_mode):
                continue
            mode = st.st_mode
            if (
                mode & stat.S_IWOTH
                or (st.st_uid == uid and mode & stat.S_IWUSR)
                or (st.st_gid == gid and mode & stat.S_IWGRP)
            ):
                found.append(full)
            if level + 1 < depth:  # a shared folder may hold others (/tmp/.X11-unix, say)
                todo.append((full, level + 1))
    return list(dict.fromkeys(found))


# System V IPC: /proc/sysvipc/<kind> lists each object with its id and owner.
_IPC_RMID = 0


def remove_ipc_of(uid: int) -> Cleaned:
    """Remove the System V shared memory segments, semaphore sets and message queues that
    user ``uid`` owns or created."""
    done = Cleaned()
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError as err:
        return Cleaned(0, [f"System V IPC: {err}"])
    removers = {
        "shm": lambda i: libc.shmctl(i, _IPC_RMID, None),
        "sem": lambda i: libc.semctl(i, 0, _IPC_RMID),
        "msg": lambda i: libc.msgctl(i, _IPC_RMID, None),
    }
    for kind, remove in removers.items():
        for ident in _ipc_ids(kind, uid):
            if remove(ident) == 0:
                done.removed += 1
            else:
                done.left.append(f"System V {kind} {ident}: {os.strerror(ctypes.get_errno())}")
    return done


def _ipc_ids(kind: str, uid: int) -> list[int]:
    try:
        with open(f"/proc/sysvipc/{kind}", encoding="ascii") as handle:
            header = handle.readline().split()
            rows = [line.split() for line in handle]
    except OSError:
        return []
    column = {"shm": "shmid", "sem": "semid", "msg": "msqid"}[kind]
    try:
        ident, owner, creator = (header.index(c) for c in (column, "uid", "cuid"))
    except ValueError:
        return []
    ids = []
    for row in rows:
        try:
            if uid in (int(row[owner]), int(row[creator])):
                ids.append(int(row[ident]))
        except (ValueError, IndexError):
            continue
    return ids


def run_as(
    user: tuple[int, int], command: list[str], timeout: float = 30
) -> subprocess.CompletedProcess:
    """Run ``command`` as ``user`` (uid, gid; no other groups) from ``/``, its output kept."""
    return subprocess.run(
        command,
        user=user[0],
        group=user[1],
        extra_groups=[],
        cwd="/",
        capture_output=True,
        text=True,
        timeout=timeout,
    )


# Run as the student's user: its user, user-session and persistent keyrings outlive its
# processes (days, for the persistent one), so a submission could leave data there for the
# next one. keyctl has no libc wrapper in the standard library: the syscall by number.
_CLEAR_KEYS = """
import ctypes, platform, sys
nr = {"x86_64": 250, "aarch64": 219, "ppc64le": 280, "s390x": 280}.get(platform.machine())
if nr is None:
    print(0, 0)  # no keyctl number known for this machine
    sys.exit(0)
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
CLEAR, GET_PERSISTENT, USER, USER_SESSION, PROCESS = 7, 22, -4, -5, -2
rings = [USER, USER_SESSION]
persistent = libc.syscall(nr, GET_PERSISTENT, ctypes.c_long(-1), ctypes.c_long(PROCESS))
if persistent > 0:
    rings.append(persistent)
cleared = failed = 0
for ring in rings:
    if libc.syscall(nr, CLEAR, ctypes.c_long(ring)) == 0:
        cleared += 1
    elif ctypes.get_errno() == 13:  # EACCES: a ring the user made unwritable, still full
        failed += 1
print(cleared, failed)
"""


def remove_keys_of(user: tuple[int, int], python: str = sys.executable) -> Cleaned:
    """Empty the kernel keyrings of ``user`` (uid, gid) that outlive its processes: its user,
    user-session and persistent keyrings. Where the kernel refuses keyctl (a container's
    seccomp profile), nothing could be kept there, and nothing is left; a keyring the user
    made unwritable (it may change its own rings' permissions) is left, and said."""
    try:
        done = run_as(user, [python, "-I", "-S", "-c", _CLEAR_KEYS])
    except (OSError, subprocess.SubprocessError) as err:
        return Cleaned(0, [f"keyrings: {err}"])
    said = done.stdout.split()
    if done.returncode != 0 or len(said) != 2 or not all(n.isdigit() for n in said):
        return Cleaned(0, [f"keyrings: {done.stdout.strip() or done.stderr.strip()[-200:]}"])
    cleared, failed = map(int, said)
    return Cleaned(cleared, [f"keyrings: {failed} could not be cleared"] if failed else [])
