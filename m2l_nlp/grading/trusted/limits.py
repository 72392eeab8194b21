"""What a submission may take: each student process's limits, set before its interpreter
starts; one memory budget for all of a submission's processes together; one time budget.

Student code never runs before its limits are set: a worker is started through a launcher
(``python -I -S -c``, the standard library only) that refuses it kernel keys, lowers its
resource limits and raises its OOM score, then ``exec``s the worker in isolated mode (no user
site, no ``PYTHON*`` variables, no current folder on the path), so a ``usercustomize.py`` or
``.pth`` file that an earlier worker planted is never read.
"""

from __future__ import annotations

import json
import math
import os
import resource
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

# One student process's limits: address space (JAX on the CPU runs in well under 2 GiB),
# processes and threads of its user, bytes in one file, no core files.
STUDENT_LIMITS = {
    "RLIMIT_AS": 4 << 30,
    "RLIMIT_NPROC": 512,
    "RLIMIT_FSIZE": 64 << 20,
    "RLIMIT_CORE": 0,
}
STUDENT_OOM_SCORE = 1000  # the kernel's OOM killer takes student code first...
REFERENCE_OOM_SCORE = -900  # ...then the reference's processes (needs CAP_SYS_RESOURCE)...
GRADER_OOM_SCORE = -1000  # ...and never the grader, which bounds its own memory instead
GRADER_MEMORY = 1 << 30  # the root grader's own bound (its reference workers apart)
GROUP_MARGIN = 256 << 20  # a phase's memory cgroup: past the budget by this, or a quarter

# Kernel keyrings are the one object a student's user can make that root cannot remove (its
# permissions can shut root out, and a user's keyrings outlive its processes): student code
# may not make any. A seccomp filter, inherited through exec, answers add_key, request_key
# and keyctl with EPERM. Where the kernel refuses the filter, the keyring cleanup remains.
DENY_KEYRINGS = """\
import ctypes as _ct, struct as _st
def _deny_keyrings():
    arch, numbers = {
        "x86_64": (0xC000003E, (248, 249, 250)),  # add_key, request_key, keyctl
        "aarch64": (0xC00000B7, (217, 218, 219)),
    }.get(__import__("platform").machine(), (None, ()))
    if arch is None:
        return "no keyring syscall numbers are known for this machine"
    load, jump_eq, jump_ge, ret = 0x20, 0x15, 0x35, 0x06
    deny, allow = 0x00050000 | 1, 0x7FFF0000  # SECCOMP_RET_ERRNO | EPERM, SECCOMP_RET_ALLOW
    # seccomp_data: the syscall's number at offset 0, its architecture at offset 4. Another
    # architecture's calls (i386's int 0x80 from x86_64 code) have numbers of their own:
    # refused whole, as no worker makes them.
    tests = [(jump_ge, 0x40000000)] if arch == 0xC000003E else []  # x86_64's x32 calls
    tests += [(jump_eq, n) for n in numbers]
    program = [(load, 0, 0, 4), (jump_eq, 1, 0, arch), (ret, 0, 0, deny), (load, 0, 0, 0)]
    for i, (op, k) in enumerate(tests):  # a match jumps to the last instruction: deny
        program.append((op, len(tests) - i, 0, k))
    program += [(ret, 0, 0, allow), (ret, 0, 0, deny)]
    code = b"".join(_st.pack("HBBI", *step) for step in program)
    buffer = _ct.create_string_buffer(code, len(code))
    class Program(_ct.Structure):
        _fields_ = [("len", _ct.c_ushort), ("filter", _ct.c_void_p)]
    prog = Program(len(program), _ct.addressof(buffer))
    libc = _ct.CDLL(None, use_errno=True)
    # PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with SECCOMP_MODE_FILTER
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, _ct.byref(prog), 0, 0) != 0:
        return __import__("os").strerror(_ct.get_errno())
    return None
"""

_LAUNCHER = (
    DENY_KEYRINGS
    + """\
import json, os, resource, sys
spec = json.loads(sys.argv[1])
if spec["group"]:  # as root, before anything else: every later process is counted there
    with open(spec["group"], "w") as handle:
        handle.write(str(os.getpid()))
_deny_keyrings()  # refused: the grader's cleanup of keyrings is what remains
for name, value in spec["limits"].items():
    what = getattr(resource, name)
    hard = resource.getrlimit(what)[1]
    value = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(what, (value, value))
if spec["oom"] is not None:
    with open("/proc/self/oom_score_adj", "w") as handle:
        handle.write(str(spec["oom"]))
if spec["user"]:
    uid, gid = spec["user"]
    os.setgroups([])
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
try:
    os.execvp(sys.argv[2], sys.argv[2:])
except OSError as err:  # this user may not run it: said in the worker's log
    sys.stderr.write(f"cannot run {sys.argv[2]}: {err.strerror}\\n")
    os._exit(126)
"""
)


def launch_command(
    module: str,
    args: Sequence[str],
    limits: dict[str, int] | None,
    oom_score: int | None,
    user: tuple[int, int] | None = None,
    group: MemoryGroup | None = None,
    wrap: Callable[[list[str]], list[str]] | None = None,
) -> list[str]:
    """The command that runs ``python -I -B -m module *args`` (``wrap(command)`` instead,
    a sandbox's, where given) in memory ``group``, with ``limits`` (soft and hard, so that
    the code cannot raise them again) and ``oom_score`` already set, as ``user`` (uid, gid;
    the launcher starts as this process's user, root, and drops to it before exec)."""
    spec = json.dumps(
        {
            "limits": limits or {},
            "oom": oom_score,
            "user": list(user) if user else None,
            "group": group.procs if group else None,
        }
    )
    python = sys.executable
    command = [python, "-I", "-B", "-m", module, *args]
    return [python, "-I", "-S", "-c", _LAUNCHER, spec, *(wrap(command) if wrap else command)]


def set_oom_score(pid: int, score: int) -> str | None:
    """Set process ``pid``'s OOM score adjustment; None, or why it could not be set."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as handle:
            handle.write(str(score))
    except OSError as err:
        return f"{err.strerror} (lowering it needs CAP_SYS_RESOURCE)"
    return None


def current_limits() -> dict[str, tuple[int, int]]:
    """This process's ``(soft, hard)`` limits of :data:`STUDENT_LIMITS`' kinds."""
    return {name: resource.getrlimit(getattr(resource, name)) for name in STUDENT_LIMITS}


class TimeBudget:
    """One submission's time: its deadline moves on while the reference's process answers
    (that time is not the student's), by at most ``allowance`` seconds in all: a submission
    that slows the reference down (processes left burning the CPU) pays for it, so that the
    grading's wall time stays bounded. Every worker's deadline is capped by it."""

    def __init__(self, seconds: float, allowance: float = math.inf):
        self.seconds = seconds
        self.deadline = time.monotonic() + seconds
        self.allowance = allowance

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def pause(self, took: float) -> None:
        credit = min(took, self.allowance)
        self.allowance -= credit
        self.deadline += credit


_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def memory_of(pid: int) -> int:
    """Bytes of memory process ``pid`` holds: its proportional share (PSS, where the kernel
    says it), so that pages that forked children share with their parent count once."""
    try:
        with open(f"/proc/{pid}/smaps_rollup", "rb") as handle:
            for line in handle:
                if line.startswith(b"Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/statm", "rb") as handle:
            return int(handle.read().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return 0


def memory_files_of(pids: Iterable[int]) -> int:
    """Bytes in the memory-only files (``memfd_create``) that processes ``pids`` hold open,
    each file once: written and never mapped, their pages are in no process's size."""
    seen: dict[tuple[int, int], int] = {}
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            path = f"/proc/{pid}/fd/{fd}"
            try:
                if not os.readlink(path).startswith("/memfd:"):
                    continue
                st = os.stat(path)
            except OSError:
                continue
            seen[(st.st_dev, st.st_ino)] = st.st_blocks * 512
    return sum(seen.values())


def detached_shared_memory(uid: int | None, pid: int | None = None) -> int:
    """Bytes held by the System V shared memory segments that no process has attached (user
    ``uid``'s; every one where None): the kernel keeps them, and no process's memory counts
    them (attached ones are in their processes' PSS). ``pid``: those of that process's IPC
    namespace (a sandbox's, read through ``nsenter``), else this process's."""
    try:
        if pid is None:
            with open("/proc/sysvipc/shm", encoding="ascii") as handle:
                text = handle.read()
        else:
            text = subprocess.run(
                ["nsenter", "--target", str(pid), "--ipc", "cat", "/proc/sysvipc/shm"],
                capture_output=True,
                text=True,
                timeout=10,
            ).stdout
        header, *rows = (line.split() for line in text.splitlines())
        size = header.index("rss") if "rss" in header else header.index("size")
        owner, creator, attached = (header.index(c) for c in ("uid", "cuid", "nattch"))
    except (OSError, ValueError, subprocess.SubprocessError):
        return 0
    total = 0
    for row in rows:
        try:
            mine = uid is None or uid in (int(row[owner]), int(row[creator]))
            if mine and int(row[attached]) == 0:
                total += int(row[size])
        except (ValueError, IndexError):
            continue
    return total


def ipc_namespaces(pids: Iterable[int]) -> dict[str, int]:
    """One process of each IPC namespace that ``pids`` are in, other than this process's."""

    def namespace(pid: int | str) -> str:
        try:
            return os.readlink(f"/proc/{pid}/ns/ipc")
        except OSError:
            return ""

    own, found = namespace("self"), {}
    for pid in pids:
        name = namespace(pid)
        if name and name != own:
            found.setdefault(name, pid)
    return found


class TmpfsGrowth:
    """How much the writable in-memory file systems (``/dev/shm``, a tmpfs ``/tmp``) grew
    since :meth:`reset`: files there are memory that no process's size shows.
    :meth:`grown` is the whole machine's growth, quick; :meth:`grown_by_student` leaves out
    what the files that ``student`` (``(uid, gid)``) may not write grew by: other processes
    on the machine write there too."""

    def __init__(self, student: tuple[int, int] | None = None) -> None:
        self.mounts: list[str] = []
        try:
            with open("/proc/mounts", encoding="utf-8") as handle:
                for line in handle:
                    fields = line.split()
                    if len(fields) > 3 and fields[2] == "tmpfs" and "rw" in fields[3].split(","):
                        self.mounts.append(fields[1])
        except OSError:
            pass
        self.mounts = list(dict.fromkeys(self.mounts))
        self.student = student
        self.reset()

    def used(self) -> int:
        total = 0
        for mount in self.mounts:
            try:
                st = os.statvfs(mount)
            except OSError:
                continue
            total += (st.f_blocks - st.f_bfree) * st.f_frsize
        return total

    def reset(self) -> None:
        self.base, self.others_base = self.used(), self.others()

    def grown(self) -> int:
        return max(0, self.used() - self.base)

    def others(self, most: int = 100_000) -> int | None:
        """Bytes of the files there that the student may not write (each file once); None
        without a student, or past ``most`` entries to look at. Only what can be seen is
        left out: a file deleted while open, or too deep to reach, counts as the student's."""
        if self.student is None:
            return None
        uid, gid = self.student
        sizes: dict[tuple[int, int], int] = {}
        todo, seen = list(self.mounts), 0
        while todo:
            try:
                with os.scandir(todo.pop()) as entries:
                    for entry in entries:
                        seen += 1
                        if seen > most:
                            return None
                        try:
                            st = entry.stat(follow_symlinks=False)
                        except OSError:
                            continue
                        if stat.S_ISDIR(st.st_mode):
                            todo.append(entry.path)
                            continue
                        writable = (
                            st.st_uid == uid
                            or st.st_mode & stat.S_IWOTH
                            or (st.st_gid == gid and st.st_mode & stat.S_IWGRP)
                        )
                        if not writable:
                            sizes[(st.st_dev, st.st_ino)] = st.st_blocks * 512
            except OSError:
                continue
        return sum(sizes.values())

    def grown_by_student(self) -> int:
        """The growth less the growth of the files the student may not write (all of the
        growth where they cannot be counted: too many files, or no student)."""
        used, others = self.used(), self.others()
        if others is None or self.others_base is None:
            return self.grown()
        return max(0, (used - self.base) - (others - self.others_base))


class MemoryWatch:
    """A thread that adds up the memory of a submission's processes (``pids()``) every
    ``interval`` seconds and kills them all when they hold more than ``budget`` bytes
    together: per-process limits cannot make a total. ``tripped``: the total that it
    stopped, until :meth:`reset`. ``outside(pids, exact)``: the bytes the kernel holds for
    them outside any process (System V segments, in-memory files), quickly and perhaps too
    many (``exact`` False), or counted exactly: asked before killing, at most every
    ``exact_every`` seconds (between two, the last exact count stands)."""

    def __init__(
        self, budget: int, pids, kill, interval: float = 0.1, outside=None, exact_every=1.0
    ):
        self.budget, self._pids, self._kill, self.interval = budget, pids, kill, interval
        self._outside = outside
        self.exact_every = exact_every
        self._exact: tuple[float, int] | None = None  # (when, bytes) of the last exact count
        self.tripped: int | None = None
        self.peak = 0
        self.exact_counts = 0
        self.paused = False  # while the reference's own process starts (not the student's)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)

    def __enter__(self) -> MemoryWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def reset(self) -> int | None:
        tripped, self.tripped, self._exact = self.tripped, None, None
        return tripped

    def _exactly(self, pids: set[int]) -> int:
        now = time.monotonic()
        if self._exact is None or now - self._exact[0] >= self.exact_every:
            self._exact = (now, self._outside(pids, True))
            self.exact_counts += 1
        return self._exact[1]

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            if self.paused:
                continue
            try:
                pids = self._pids()
                processes = sum(memory_of(pid) for pid in pids)
                total = processes + (self._outside(pids, False) if self._outside else 0)
                if total > self.budget and self._outside is not None:
                    total = processes + self._exactly(pids)
                self.peak = max(self.peak, total)
                if total > self.budget:
                    self.tripped = total
                    self._kill()
            except Exception:  # noqa: BLE001 - a watch that dies would bound nothing
                continue


def bound_own_memory(bound: int, over: Callable[[int], None], interval: float = 0.2) -> None:
    """Start a thread that calls ``over(bytes)`` once when this process holds more than
    ``bound`` bytes (the root grader's own bound; ``over`` ends the process)."""

    def watch() -> None:
        while True:
            time.sleep(interval)
            held = memory_of(os.getpid())
            if held > bound:
                over(held)
                return

    threading.Thread(target=watch, name="own-memory", daemon=True).start()


CGROUPS = Path("/sys/fs/cgroup")
GROUP_PREFIX = "m2l-phase-"


class MemoryGroup:
    """A memory cgroup of one phase's processes (v1 or v2), made by root. Its limit counts
    what the kernel holds for them, socket buffers and inodes included, besides their pages:
    the bound on what :class:`MemoryWatch` cannot see. Past it, the kernel's OOM killer
    ends a process of the group, never one outside it."""

    def __init__(self, path: Path, v2: bool):
        self.path, self.v2 = path, v2

    @staticmethod
    def parent() -> tuple[Path, bool] | str:
        """``(folder, is_v2)``: where this process (root) may make memory groups, its own
        memory cgroup; else why not, in a line."""
        try:
            lines = Path("/proc/self/cgroup").read_text().splitlines()
        except OSError as err:
            return f"/proc/self/cgroup cannot be read ({err.strerror})"
        for line in lines:
            _, controllers, where = line.split(":", 2)
            if "memory" in controllers.split(","):
                folder = CGROUPS / "memory" / where.lstrip("/")
                if not os.access(folder, os.W_OK):
                    return f"{folder} cannot be written here"
                return folder, False
        for line in lines:
            if line.startswith("0::"):
                folder = CGROUPS / line[3:].lstrip("/")
                try:
                    enabled = (folder / "cgroup.subtree_control").read_text().split()
                except OSError as err:
                    return f"{folder} cannot be read ({err.strerror})"
                if "memory" not in enabled or not os.access(folder, os.W_OK):
                    return f"the memory controller is not given to the groups below {folder}"
                return folder, True
        return "this kernel has no memory cgroup here"

    @classmethod
    def probe(cls, parent: tuple[Path, bool], limit: int) -> str | None:
        """None if a group can be made under ``parent`` and a launched process joins it (a
        machine may show a group it refuses), else why not, in a line."""
        try:
            group = cls.make(parent, f"{os.getpid()}-probe", limit)
        except OSError as err:
            return f"a group cannot be made under {parent[0]} ({err.strerror or err})"
        try:
            done = subprocess.run(
                launch_command("site", [], None, None, group=group),
                capture_output=True,
                text=True,
                timeout=60,
            )
            said = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            return None if done.returncode == 0 else f"a process cannot join one ({said})"
        except (OSError, subprocess.SubprocessError) as err:
            return f"a process cannot join one ({err})"
        finally:
            group.remove()

    @classmethod
    def make(cls, parent: tuple[Path, bool], name: str, limit: int) -> MemoryGroup:
        """A new group ``name`` under ``parent`` (:meth:`parent`) that holds ``limit`` bytes
        at most, swap included (raises OSError)."""
        folder, v2 = parent
        group = cls(folder / f"{GROUP_PREFIX}{name}", v2)
        group.path.mkdir()
        try:
            if v2:
                group._write("memory.max", limit)
                if (group.path / "memory.swap.max").exists():
                    group._write("memory.swap.max", 0)
            else:
                group._write("memory.limit_in_bytes", limit)
                if (group.path / "memory.memsw.limit_in_bytes").exists():
                    group._write("memory.memsw.limit_in_bytes", limit)
        except OSError:
            group.remove()
            raise
        return group

    def _write(self, name: str, value: int) -> None:
        (self.path / name).write_text(str(value))

    @property
    def procs(self) -> str:
        return str(self.path / "cgroup.procs")

    @property
    def limit(self) -> int:
        name = "memory.max" if self.v2 else "memory.limit_in_bytes"
        return int((self.path / name).read_text())

    def oom_kills(self) -> int:
        """How many of its processes the kernel killed for going past the limit."""
        name = "memory.events" if self.v2 else "memory.oom_control"
        try:
            for line in (self.path / name).read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        except (OSError, ValueError):
            pass
        return 0

    def remove(self, wait: float = 5.0) -> str | None:
        """Remove the group (its processes already killed; an exiting one may hold it for a
        moment); None, or why it stays."""
        until = time.monotonic() + wait
        while True:
            try:
                self.path.rmdir()
                return None
            except FileNotFoundError:
                return None
            except OSError as err:
                if time.monotonic() > until:
                    return f"{self.path}: {err.strerror}"
                time.sleep(0.05)

    @staticmethod
    def remove_abandoned(parent: tuple[Path, bool]) -> list[str]:
        """Remove the groups of graders that are gone (named after their pid); returns what
        stays."""
        left = []
        for path in parent[0].glob(f"{GROUP_PREFIX}*"):
            pid = path.name[len(GROUP_PREFIX) :].split("-")[0]
            if pid.isdigit() and not Path(f"/proc/{pid}").exists():
                why = MemoryGroup(path, parent[1]).remove(wait=0)
                if why:
                    left.append(why)
        return left
