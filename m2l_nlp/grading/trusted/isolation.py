"""Where one phase of a submission runs: a fresh sandbox made by bubblewrap where the machine
allows it, else a fresh user of a pool.

A *phase* is one practical's visible checks, or its hidden ones (:mod:`.grader` runs every
visible phase of a submission before any hidden one). Each phase gets a :class:`Place`:

- **bubblewrap** (``bwrap``, Debian's and Ubuntu's package): every worker of the phase starts
  as ``bwrap --unshare-all ...``, run as the student's user, so it has new user, PID, IPC,
  mount, network, UTS and cgroup namespaces; the file system is bound read-only, and
  ``/tmp`` (its HOME too) and ``/dev/shm`` are folders of one tmpfs that root mounts for the
  phase with ``size=`` and ``nr_inodes=`` (bwrap's own ``--tmpfs`` bounds neither). Keyrings,
  message queues and System V objects end with the namespaces, files with the unmount.
- **users** (where the kernel refuses namespaces to that user, as a container may): each
  phase runs as a user of the pool that ``setup.sh`` creates (``m2l-student``,
  ``m2l-student-1`` ...) whose objects were all removed. Cleanup, as root, removes that user's
  files in every folder it may write to, its System V objects, POSIX queues and keyrings;
  a user whose leftovers could not all be removed is retired (logged), never given to
  another submission.

On both paths student code cannot make kernel keys at all (:data:`.limits.DENY_KEYRINGS`),
and a phase's processes are held in a memory cgroup of their own (:class:`.limits.MemoryGroup`)
where the machine gives the grader one.

Which path is taken is probed once per grading (:meth:`Isolation.probe`), from nothing a
student controls.
"""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path

from m2l_nlp.grading.trusted.cleanup import (
    Cleaned,
    remove_files_of,
    remove_ipc_of,
    remove_keys_of,
    remove_path,
    run_as,
)
from m2l_nlp.grading.trusted.limits import MemoryGroup

POOL_USER = "m2l-student"  # setup.sh makes it and POOL_USER-1 ... POOL_USER-<POOL_SIZE - 1>
POOL_SIZE = 8  # six phases per submission (three practicals, visible and hidden), and spares
FALLBACK_USER = "nobody"
# A phase's private tmpfs (its /tmp, HOME and /dev/shm): bytes and files. Its bytes are
# memory, counted in the submission's budget too (Place.used); its inodes are kernel
# memory that nothing else bounds.
TMPFS_BYTES = 512 << 20
TMPFS_INODES = 16_384
BWRAP = "bwrap"
_MNT_DETACH = 2


class NoPlaceLeft(Exception):
    """Every user of the pool is retired: no fresh place for the next phase."""


@dataclasses.dataclass
class Place:
    """One phase's place. ``user``: who its processes run as; ``home``: their HOME as they
    see it; ``mount``: the sandbox's tmpfs (None on the users path)."""

    user: tuple[int, int]
    home: str
    mount: Path | None = None
    started: float = 0.0
    group: MemoryGroup | None = None  # the phase's memory cgroup, where the machine has one

    def command(self, command: list[str], cwd: Path) -> list[str]:
        """``command`` run inside the sandbox (as it is, for a user of the pool)."""
        if self.mount is None:
            return command
        return sandbox_command(self.mount, cwd, command)

    def used(self) -> int:
        """Bytes in the sandbox's tmpfs (memory no process's size shows)."""
        if self.mount is None:
            return 0
        try:
            st = os.statvfs(self.mount)
        except OSError:
            return 0
        # once unmounted (the phase ending while the memory watch looks), the folder is on
        # the machine's own disk, whose usage is nobody's submission
        if st.f_blocks * st.f_frsize != TMPFS_BYTES or st.f_files != TMPFS_INODES:
            return 0
        return (st.f_blocks - st.f_bfree) * st.f_frsize


# The machine's own folders a sandbox sees, read-only: programs, libraries, configuration and
# the kernel's views. Nothing else of the machine is there (no /home, /root, /srv, /opt, /var,
# /mnt, nor wherever a course's checkout lies, with its solutions in its git history).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")


_PATHS_OF_PYTHON = """
import importlib.util, json, os, sys
spec = importlib.util.find_spec("m2l_nlp")
package = os.path.dirname(spec.origin) if spec is not None and spec.origin else ""
here = os.path.dirname(os.path.abspath(sys.executable))
print(json.dumps([package, sys.prefix, sys.exec_prefix, sys.base_prefix, here, *sys.path]))
"""


@functools.cache
def paths_of(python: str) -> tuple[str, ...]:
    """The course's library (``m2l_nlp/``, first; '' where it has none), the prefixes and
    ``sys.path`` of ``python`` as a worker starts it (``-I``): what its sandbox must hold."""
    try:
        done = subprocess.run(
            [python, "-I", "-c", _PATHS_OF_PYTHON], capture_output=True, text=True, timeout=120
        )
        return tuple(json.loads(done.stdout))
    except (OSError, subprocess.SubprocessError, ValueError):  # then the probe fails, said
        return ("",)


def allowed(cwd: Path, python: str) -> list[str]:
    """The folders a worker needs besides :data:`SYSTEM`, bound read-only where they are (the
    outermost of nested ones): its working folder, its Python and packages, and the course's
    library, ``m2l_nlp/`` alone (never the course's folder nor a folder above it: a checkout
    holds the solutions in its history)."""
    package, *environment = paths_of(python)
    # the course's folder: where the library is not installed into an environment's packages
    course = os.path.dirname(package) if package else ""
    if os.path.basename(course) in ("site-packages", "dist-packages"):
        course = ""
    found = set()
    for path in [str(cwd), *(path for path in (package, *environment) if path)]:
        for form in {os.path.abspath(path), os.path.realpath(path)}:
            above = form == "/" or (course and f"{course}/".startswith(f"{form}/"))
            system = any(form == top or form.startswith(f"{top}/") for top in SYSTEM)
            if not above and not system and os.path.isdir(form):
                found.add(form)
    kept: list[str] = []
    for path in sorted(found, key=len):
        if not any(path.startswith(f"{outer}/") for outer in kept):
            kept.append(path)
    return kept


@functools.cache
def newer_options() -> tuple[str, ...]:
    """What this bwrap can do beyond Ubuntu 22.04's 0.6: ``--disable-userns`` (0.8), so that
    the sandbox makes no user namespace of its own (in which it could mount a tmpfs that no
    bound on the sandbox's own counts)."""
    try:
        done = subprocess.run([BWRAP, "--help"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return ()
    found = "--disable-userns" in done.stdout + done.stderr
    return ("--unshare-user", "--disable-userns") if found else ()  # it needs the first


def sandbox_command(mount: Path, cwd: Path, command: Sequence[str]) -> list[str]:
    """``command`` under bubblewrap: every namespace new; of the machine's files only
    :data:`SYSTEM` and what the worker needs (:func:`allowed`), read-only; the tmpfs
    ``mount``'s folders as ``/tmp`` and ``/dev/shm``."""
    system = []
    for top in SYSTEM:
        if os.path.islink(top):  # /bin -> usr/bin where /usr is merged
            system += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            system += ["--ro-bind", top, top]
    needed = [arg for path in allowed(cwd, command[0]) for arg in ("--ro-bind", path, path)]
    return [
        BWRAP,
        "--unshare-all",  # user, PID, IPC, mount, network, UTS, cgroup
        *newer_options(),
        "--die-with-parent",
        "--new-session",
        *system,
        "--proc", "/proc",
        "--dev", "/dev",
        "--bind", str(mount / "tmp"), "/tmp",
        "--bind", str(mount / "shm"), "/dev/shm",
        "--remount-ro", "/dev",
        *needed,  # after /tmp: an autograder unpacked there is bound back over its tmpfs
        "--remount-ro", "/",
        "--chdir", str(cwd),
        "--",
        *command,
    ]  # fmt: skip


def mount_tmpfs(path: Path, user: tuple[int, int]) -> None:
    """Mount a tmpfs of :data:`TMPFS_BYTES` and :data:`TMPFS_INODES` on ``path`` (root only),
    with ``tmp`` and ``shm`` folders that ``user`` owns."""
    options = f"size={TMPFS_BYTES},nr_inodes={TMPFS_INODES},mode=0755,nosuid,nodev"
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "m2l-sandbox", str(path)],
        capture_output=True,
        text=True,
        timeout=30,
    )
    if done.returncode != 0:
        raise OSError(f"mount -t tmpfs: {done.stderr.strip() or done.returncode}")
    for name in ("tmp", "shm"):
        os.mkdir(path / name, 0o700)
        os.chown(path / name, *user)


def unmount(path: Path) -> Cleaned:
    """Unmount ``path`` (detached: a process still holding it cannot keep it mounted)."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.umount2(os.fsencode(path), _MNT_DETACH) != 0:
        return Cleaned(0, [f"{path}: unmount: {os.strerror(ctypes.get_errno())}"])
    return Cleaned(1)


def mounts_under(folder: Path) -> list[Path]:
    """The mount points at or below ``folder`` (deepest first)."""
    found = []
    prefix = f"{os.path.abspath(folder)}/"
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            for line in handle:
                fields = line.split()
                point = fields[1].replace("\\040", " ") if len(fields) > 1 else ""
                if point.startswith(prefix) or point == prefix[:-1]:
                    found.append(Path(point))
    except OSError:
        pass
    return sorted(found, key=lambda p: len(p.parts), reverse=True)


def show_message_queues() -> str:
    """Mount the POSIX message queue file system on ``/dev/mqueue`` if it is not (root):
    a queue outlives its maker, and is removed as a file there. Returns "" or why not."""
    try:
        with open("/proc/self/mounts", encoding="utf-8") as handle:
            if any(line.split()[1:3] == ["/dev/mqueue", "mqueue"] for line in handle):
                return ""
        os.makedirs("/dev/mqueue", exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "mqueue", "mqueue", "/dev/mqueue"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.SubprocessError) as err:
        return f"POSIX message queues cannot be seen here ({err})"
    if done.returncode != 0:
        return f"POSIX message queues cannot be seen here ({done.stderr.strip()})"
    return ""


def pool(names: Sequence[str] | None = None) -> list[tuple[int, int]]:
    """``(uid, gid)`` of each user of the pool that exists on this machine (``names``: one
    chosen user instead); ``nobody`` where none does."""
    wanted = list(names) if names else [POOL_USER] + [f"{POOL_USER}-{i}" for i in range(1, 64)]
    found = []
    for name in wanted:
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            continue
        if entry.pw_uid != 0:
            found.append((entry.pw_uid, entry.pw_gid))
    if not found and not names:
        try:
            entry = pwd.getpwnam(FALLBACK_USER)
            found.append((entry.pw_uid, entry.pw_gid))
        except KeyError:
            pass
    return list(dict.fromkeys(found))


def student_users(variable: str = "M2L_GRADER_USER") -> list[tuple[int, int]] | None:
    """The pool to run student code as (``$variable``: one chosen user instead), or None when
    this process is not root or that user is root (local trials). Raises ``LookupError``, in
    words, when none exists."""
    names = [os.environ[variable]] if os.environ.get(variable) else None
    if os.geteuid() != 0 or (names and names[0] == "root"):
        return None
    users = pool(names)
    if not users:
        raise LookupError(
            f"there is no user {names[0] if names else POOL_USER} to run student code as: "
            f"create one (useradd --system {POOL_USER}; the autograder's setup.sh does) or "
            f"set {variable}"
        )
    return users


class Isolation:
    """Hands out one fresh :class:`Place` per phase and ends it (:meth:`close`).

    Args:
        users: the pool, in order (the first also runs the sandboxes).
        scratch: a root-only folder where sandboxes' tmpfs are mounted.
        log: one line per event worth the instructor's eye.
        sandbox: use bubblewrap (see :meth:`probe`).
    """

    def __init__(
        self,
        users: list[tuple[int, int]],
        scratch: Path,
        log: Callable[[str], None],
        sandbox: bool = False,
    ):
        self.users, self.scratch, self.log, self.sandbox = list(users), scratch, log, sandbox
        self.retired: list[tuple[int, int]] = []
        self.shared: list[str] = []  # the folders a pool user may write to (users path)
        self.queues_unseen = ""  # why POSIX message queues cannot be removed (users path)
        # (where to make them, bytes): each phase's memory cgroup, where the machine has them
        self.memory: tuple[tuple[Path, bool], int] | None = None
        self._turn = 0

    @staticmethod
    def probe(user: tuple[int, int], scratch: Path, python: str = sys.executable) -> str | None:
        """None if a bubblewrap sandbox starts here as ``user`` with a root-mounted tmpfs
        and ``python`` (the workers') runs in it, else why not (in a line)."""
        if shutil.which(BWRAP) is None:
            return "bwrap is not installed (apt-get install bubblewrap)"
        mount = Path(tempfile.mkdtemp(prefix="probe-", dir=scratch))
        try:
            mount_tmpfs(mount, user)
        except OSError as err:
            remove_path(mount)
            return f"root cannot mount a tmpfs here ({err})"
        try:
            # the worker's own Python, as a worker starts: it must be found inside
            write = "open('/tmp/probe', 'w').write('ok')"
            done = run_as(user, sandbox_command(mount, scratch, [python, "-I", "-S", "-c", write]))
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            wrote = (mount / "tmp" / "probe").is_file()
            return None if done.returncode == 0 and wrote else f"bwrap refused: {said}"
        except (OSError, subprocess.SubprocessError) as err:
            return f"bwrap could not run: {err}"
        finally:
            unmount(mount)
            remove_path(mount)

    def retire_unclean(self) -> None:
        """Retire, before any phase, the users of the pool whose keyrings cannot be emptied
        (a keyring made unwritable in an earlier grading outlives it): student code must not
        find anything there."""
        for user in list(self.users):
            left = remove_keys_of(user).left
            if left:
                self._retire(user, f"its keyrings cannot be emptied: {left[0]}")

    def _retire(self, user: tuple[int, int], why: str) -> None:
        self.users.remove(user)
        self.retired.append(user)
        self.log(
            f"user {user[0]} is retired for the rest of this grading ({why}); "
            f"{len(self.users)} of the pool left"
        )

    def open(self, started: float) -> Place:
        """A fresh place for one phase (``started``: its time.time(), for the cleanup)."""
        if not self.users:
            raise NoPlaceLeft(
                f"every user of the pool ({len(self.retired)}) was retired: what earlier "
                "submissions left could not be removed"
            )
        self._turn += 1
        group = None
        if self.memory is not None:
            parent, limit = self.memory
            group = MemoryGroup.make(parent, f"{os.getpid()}-{self._turn}", limit)
        if self.sandbox:
            user = self.users[0]
            mount = Path(tempfile.mkdtemp(prefix="sandbox-", dir=self.scratch))
            mount_tmpfs(mount, user)
            return Place(user, "/tmp", mount, started, group)
        user = self.users[(self._turn - 1) % len(self.users)]
        home = Path(tempfile.mkdtemp(prefix="home-", dir=self.scratch))
        os.chown(home, *user)
        return Place(user, str(home), None, started, group)

    def close(self, place: Place) -> Cleaned:
        """End ``place``, its processes already gone: the sandbox's tmpfs unmounted, or the
        pool user's objects removed. A user with leftovers is retired and logged."""
        gone = place.group.remove() if place.group is not None else None
        if gone:  # an empty group costs nothing; said, and removed by the next grader
            self.log(f"cleanup (memory group): {gone}")
        if place.mount is not None:
            done = unmount(place.mount).add(remove_path(place.mount))
            if done.left:  # nothing the sandbox held is reachable once unmounted
                self.log(f"cleanup (sandbox): {len(done.left)} left, e.g. {done.left[0]}")
            return done
        uid = place.user[0]
        done = remove_path(place.home)
        steps = {
            "files": lambda: remove_files_of(uid, place.started, self.shared),
            "IPC objects": lambda: remove_ipc_of(uid),
            "keyrings": lambda: remove_keys_of(place.user),
        }
        for what, step in steps.items():
            try:
                left = step()
            except Exception as err:  # noqa: BLE001 - counted as left: the user is retired
                left = Cleaned(0, [f"{what}: {err!r}"])
            if left.left:
                self.log(f"cleanup ({what}): {len(left.left)} left, e.g. {left.left[0]}")
            done.add(left)
        if self.queues_unseen:  # a queue it made could outlive it, unseen
            done.left.append(self.queues_unseen)
        if done.left and place.user in self.users:
            self._retire(place.user, "what it left could not all be removed")
        return done
