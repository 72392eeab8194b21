"""Find a student's practical files in a submission folder, or rebuild them from notebooks.

A submission holds, for each practical, ``<practical>.py`` at its top, or
``exercises/<practical>.py``, or a notebook whose file name contains the practical's name
(``practical2_transformers.ipynb`` as Colab downloads it, ``Copy of ...`` included).
From a notebook only what a module needs is kept: imports, functions, classes and constant
assignments of its code cells (never the setup cell, the ``check`` calls, the training cells
or shell lines); like a ``.py`` file's, they run when the worker imports them, as the
student. The grader reads a notebook in a process of its own, bounded in memory and time
(:func:`module_from_notebook_bounded`): parsing tiny statements costs about 1 GB per MB.

The grader reads the submission as root and the student controls every byte of it, names and
file types included (DESIGN.md, "Grading"). So the folder is walked through descriptors
without following any link, and a file is read only through a descriptor opened with
``O_NOFOLLOW`` under its walked parent, checked again on that descriptor (a regular file with
one name, on the submission's file system, under the size cap). A practical whose file (or a
folder on its path) is a link or a special file is refused: it gets a one-line problem and
scores 0, the other practicals are graded as usual.
"""

from __future__ import annotations

import ast
import dataclasses
import errno
import functools
import json
import os
import re
import selectors
import stat
import subprocess
import sys
import time
from pathlib import Path

# The notebooks' setup cell.
SETUP_CELL = Path(__file__).parents[2] / "authoring" / "setup_cell.py"

MAX_FILE_BYTES = 20 * 2**20  # one practical's file or notebook (st_size, before reading it)
MAX_ENTRIES = 2_000  # files, folders and anything else walked in the whole submission
MAX_DEPTH = 16  # folders inside folders; also bounds the descriptors held open while walking
MAX_NOTES = 5  # other candidates named in a practical's notes; the rest are counted

_MIB = 2**20
_NAME_CHARS = 200  # a name in a message is cut to this many characters
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: should a FIFO appear in place of a checked file, opening it does not block.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_READ_CHUNK = 2**20

_SURROGATE = re.compile("[\ud800-\udfff]")
_KEPT = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


class SubmissionError(Exception):
    """The submission as a whole cannot be read; the message says what to hand in."""


class NotebookError(ValueError):
    """A notebook cannot be read; the message is one line that names it and says why."""


@dataclasses.dataclass(frozen=True)
class Found:
    """What the submission holds for one practical."""

    text: str | None  # the module source to grade; None if absent or refused
    name: str | None = None  # the graded (or refused) file, relative to the submission
    problem: str = ""  # one line when refused or unreadable (then text is None): scores 0
    notes: tuple[str, ...] = ()  # e.g. "also found Copy of p2.ipynb (not graded)"


class _Refused(Exception):
    """One practical's file cannot be graded; the message is its one-line problem."""


# ------------------------------------------------------------------------------- notebooks


@functools.lru_cache(maxsize=1)
def _setup_first_line() -> str:
    return SETUP_CELL.read_text(encoding="utf-8").splitlines()[0]


def _lines(source: str) -> list[str]:
    """The lines as Python numbers them: ``str.splitlines`` would also split at form feeds,
    \\x1c, U+2028 and others, and the node line numbers would then pick the wrong lines."""
    return source.replace("\r\n", "\n").replace("\r", "\n").split("\n")


def _constant(node: ast.AST) -> bool:
    value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
    if value is None:
        return False
    try:
        ast.literal_eval(value)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        return False
    return True


def _cell_code(source: str) -> str | None:
    """The definitions in one notebook cell, or None if it holds none (or does not parse:
    then the whole cell is kept, so that the syntax error is reported where it is)."""
    lines = [line for line in _lines(source) if not line.lstrip().startswith(("!", "%"))]
    text = "\n".join(lines)
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return text
    kept = [node for node in tree.body if isinstance(node, _KEPT) or _constant(node)]
    if not kept:
        return None
    # Each line once, however many statements share it (`a = 1; b = 2; ...` on one long
    # line would otherwise be copied once per statement): linear in the cell's size.
    spans: list[list[int]] = []
    for first, last in sorted((_first_line(node), node.end_lineno) for node in kept):
        if spans and first <= spans[-1][1]:
            spans[-1][1] = max(spans[-1][1], last)
        else:
            spans.append([first, last])
    return "\n".join("\n".join(lines[first - 1 : last]) for first, last in spans)


def _first_line(node: ast.AST) -> int:
    """The statement's first line, its decorators included."""
    decorators = getattr(node, "decorator_list", [])
    return min([node.lineno, *(d.lineno for d in decorators)])


def _cell_source(cell: dict, number: int) -> str:
    source = cell.get("source", "")
    if isinstance(source, list) and all(isinstance(part, str) for part in source):
        source = "".join(source)
    if not isinstance(source, str):
        raise _Refused(f"the source of cell {number} is not text")
    # JSON's "\udc80" is a lone surrogate: no UTF-8 file holds it, and ast.parse refuses it.
    source = _SURROGATE.sub("\ufffd", source)
    if "\0" in source:  # ast.parse refuses it, as ValueError or SyntaxError by version
        raise _Refused(f"cell {number} holds a NUL byte")
    return source


def module_from_notebook(text: str | bytes, name: str = "the notebook") -> str:
    """The Python module that the definitions in a notebook (its JSON ``text``; bytes are
    read as UTF-8, a bad byte replaced) make up.

    Raises :class:`NotebookError`, in one line that starts with ``name``, for anything that
    is not a notebook as Jupyter writes it (bad JSON, deep nesting, cells or metadata of the
    wrong type, NUL bytes, code too deeply nested to parse)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", errors="replace")
    try:
        return _module(text)
    except _Refused as err:
        reason = str(err)
    except RecursionError:
        reason = "it is nested too deeply"
    except MemoryError:
        reason = "it is too large or too deeply nested to read"
    except ValueError as err:  # bad JSON, or an integer of too many digits
        reason = _one_line(str(err))
    raise NotebookError(f"{name} is not a readable notebook: {reason}")


NOTEBOOK_MEMORY = 1 << 30  # the address space of the process that reads one notebook
MAX_REPLY_BYTES = MAX_FILE_BYTES + (1 << 20)  # its reply: a status line, then the module
NOTEBOOK_SECONDS = 60.0


def module_from_notebook_bounded(data: bytes, name: str) -> str:
    """:func:`module_from_notebook` in a process of its own (this file run in isolated mode:
    nothing but the standard library), with at most ``NOTEBOOK_MEMORY`` of address space and
    ``NOTEBOOK_SECONDS``. Of its reply the grader reads at most ``MAX_REPLY_BYTES``, in chunks.
    Raises :class:`NotebookError` for a notebook it cannot read."""
    too_large = f"{name} is not a readable notebook: it is too large or too deeply nested to read"
    deadline = time.monotonic() + NOTEBOOK_SECONDS
    with subprocess.Popen(
        [sys.executable, "-I", __file__, name],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # a traceback when it runs out of memory: never read
    ) as process:
        try:
            reply = _exchange(process, data, deadline)
            if reply is None:
                raise NotebookError(_too_large_reply(name))
            code = process.wait(max(deadline - time.monotonic(), 0.0))
        except subprocess.TimeoutExpired:
            raise NotebookError(f"{too_large} in {NOTEBOOK_SECONDS:g} s") from None
        finally:
            if process.poll() is None:
                process.kill()
    # Exit status 0: the whole reply was written; anything else ran out of memory.
    if code != 0 or not reply.startswith((b"ok\n", b"error\n")):
        raise NotebookError(too_large)
    status = bytes(reply[: reply.index(b"\n")])
    del reply[: len(status) + 1]  # from the front of a bytearray: nothing is copied
    text = reply.decode("utf-8", errors="replace")
    if status == b"error":
        raise NotebookError(text)
    return text


def _too_large_reply(name: str) -> str:
    return (
        f"{name} is not a readable notebook: it is too large "
        f"(its module is over {MAX_REPLY_BYTES // _MIB} MiB)"
    )


def _exchange(process: subprocess.Popen, data: bytes, deadline: float) -> bytearray | None:
    """Write ``data`` to the process's input while reading its output until it ends: what
    it wrote, or None past ``MAX_REPLY_BYTES`` (never more is read). One loop waits on both,
    so that neither a full pipe nor a silent process outlasts ``deadline``: then it raises
    :class:`subprocess.TimeoutExpired`."""
    assert process.stdin is not None and process.stdout is not None
    reply, todo = bytearray(), memoryview(data)
    os.set_blocking(process.stdin.fileno(), False)
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdin, selectors.EVENT_WRITE)
        selector.register(process.stdout, selectors.EVENT_READ)
        while selector.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise subprocess.TimeoutExpired(process.args, NOTEBOOK_SECONDS)
            for key, _ in selector.select(left):
                if key.fileobj is process.stdout:
                    chunk = os.read(key.fd, min(_READ_CHUNK, MAX_REPLY_BYTES + 1 - len(reply)))
                    if not chunk:
                        selector.unregister(key.fileobj)
                    reply += chunk
                    if len(reply) > MAX_REPLY_BYTES:
                        return None
                    continue
                try:
                    todo = todo[os.write(key.fd, todo[:_READ_CHUNK]) :]
                except BlockingIOError:
                    continue
                except BrokenPipeError:  # it stopped reading (out of memory): its reply says
                    todo = todo[:0]
                if not todo:
                    selector.unregister(key.fileobj)
                    process.stdin.close()
    return reply


def _module(text: str) -> str:
    notebook = json.loads(text)
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise _Refused("it has no list of cells")
    future, body = [], []
    for number, cell in enumerate(cells, start=1):
        if not isinstance(cell, dict):
            raise _Refused(f"cell {number} is not a JSON object")
        if cell.get("cell_type") != "code":
            continue
        metadata = cell.get("metadata")
        metadata = {} if metadata is None else metadata
        if not isinstance(metadata, dict):
            raise _Refused(f"the metadata of cell {number} is not a JSON object")
        source = _cell_source(cell, number)
        if metadata.get("active") == "ipynb":
            continue  # notebook-only cells: checks, plots, training
        if source.startswith(_setup_first_line()):
            continue
        try:
            code = _cell_code(source)
        except (RecursionError, MemoryError):  # the parser's stack or memory, not the syntax
            raise _Refused(f"cell {number} is too large or nested too deeply to parse") from None
        if code is None:
            continue
        for line in code.split("\n"):
            (future if line.startswith("from __future__ import") else body).append(line)
        body.append("")
    return "\n".join([*dict.fromkeys(future), *body]) + "\n"


# ------------------------------------------------------------------------ the folder's tree


def _one_line(text: str) -> str:
    """``text`` as one printable line of at most ``_NAME_CHARS`` characters: names and
    messages are the student's bytes, and end up in the grader's log and results."""
    shown = "".join(
        c if c.isprintable() and not 0xD800 <= ord(c) <= 0xDFFF else ascii(c)[1:-1] for c in text
    )
    return shown if len(shown) <= _NAME_CHARS else shown[: _NAME_CHARS - 3] + "..."


def _shown(parts: tuple[str, ...]) -> str:
    return _one_line("/".join(parts))


@dataclasses.dataclass(frozen=True)
class _Entry:
    """One name in the submission, as ``lstat`` saw it (a link is never followed)."""

    parts: tuple[str, ...]
    mode: int
    size: int
    nlink: int
    dev: int
    ino: int

    @classmethod
    def of(cls, parts: tuple[str, ...], st: os.stat_result) -> _Entry:
        return cls(parts, st.st_mode, st.st_size, st.st_nlink, st.st_dev, st.st_ino)

    @property
    def name(self) -> str:
        return _shown(self.parts)

    def is_dir(self) -> bool:
        return stat.S_ISDIR(self.mode)

    def is_file(self) -> bool:
        return stat.S_ISREG(self.mode)


def _kind(mode: int) -> str | None:
    """What an entry that is neither a regular file nor a folder is, in words."""
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return None
    return "not a plain file"


class _Tree:
    """The submission walked once through descriptors; its folder stays open for reading."""

    def __init__(self, folder: Path) -> None:
        self.entries: dict[tuple[str, ...], _Entry] = {}
        self.unwalked: dict[tuple[str, ...], str] = {}  # folders not walked, and why
        try:
            st = os.lstat(folder)
        except OSError as err:
            raise SubmissionError(
                f"the submission folder cannot be read ({err.strerror})"
            ) from None
        if stat.S_ISLNK(st.st_mode):
            raise SubmissionError("the submission folder is a symbolic link, not a folder")
        if not stat.S_ISDIR(st.st_mode):
            raise SubmissionError("the submission is not a folder")
        try:
            self.fd = os.open(folder, _DIR_FLAGS)
        except OSError as err:
            raise SubmissionError(
                f"the submission folder cannot be read ({err.strerror})"
            ) from None
        try:
            root = os.fstat(self.fd)
            if (root.st_dev, root.st_ino) != (st.st_dev, st.st_ino):
                raise SubmissionError("the submission folder changed while being read")
            self.dev = root.st_dev
            self._walk(self.fd, ())
        except BaseException:
            os.close(self.fd)
            raise

    def close(self) -> None:
        os.close(self.fd)

    def _walk(self, fd: int, parts: tuple[str, ...]) -> None:
        folders = []
        with os.scandir(fd) as listing:  # a listing of the descriptor: nothing is resolved
            for item in listing:
                if len(self.entries) >= MAX_ENTRIES:
                    raise SubmissionError(
                        f"the submission holds more than {MAX_ENTRIES} files and folders: "
                        "hand in only the practicals' .py files or notebooks"
                    )
                try:
                    st = os.stat(item.name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue  # gone since it was listed: as if it had never been there
                entry = _Entry.of((*parts, item.name), st)
                self.entries[entry.parts] = entry
                # Files are only listed here: what is read is a practical's candidate, each
                # under MAX_FILE_BYTES, so other large (or sparse) files cost nothing.
                if entry.is_dir() and not _hidden(item.name):
                    folders.append(entry)  # a hidden one (.git, .venv) is never looked into
        for folder in folders:
            if len(folder.parts) > MAX_DEPTH:
                raise SubmissionError(
                    f"the submission has folders nested more than {MAX_DEPTH} deep: "
                    "hand in only the practicals' .py files or notebooks"
                )
            try:
                sub = self._open(fd, folder, _DIR_FLAGS)
            except (OSError, _Refused) as err:
                self.unwalked[folder.parts] = _reason(folder, err)
                continue
            try:
                self._walk(sub, folder.parts)
            finally:
                os.close(sub)

    def _open(self, parent: int, entry: _Entry, flags: int) -> int:
        """A descriptor of ``entry`` opened under its walked ``parent``, checked to be the
        very file or folder the walk saw (a link put in its place is not opened)."""
        fd = os.open(entry.parts[-1], flags, dir_fd=parent)
        try:
            now = _Entry.of(entry.parts, os.fstat(fd))
            if (now.dev, now.ino, stat.S_IFMT(now.mode)) != (
                entry.dev,
                entry.ino,
                stat.S_IFMT(entry.mode),
            ):
                raise _Refused(f"{entry.name} changed while the submission was read")
            problem = self.problem(now, folder=now.is_dir())
            if problem:
                raise _Refused(problem)
        except BaseException:
            os.close(fd)
            raise
        return fd

    def problem(self, entry: _Entry, folder: bool = False) -> str:
        """Why ``entry`` cannot be read as a practical's file (or, with ``folder``, a folder
        on its path); "" if it can."""
        thing = "folder" if folder else "file"
        kind = _kind(entry.mode)
        if kind == "a symbolic link":
            return f"{entry.name} is a symbolic link: hand in the {thing} itself, not a link"
        if kind is not None:
            return f"{entry.name} is {kind}, not a {thing}: hand in the {thing} itself"
        if entry.dev != self.dev:  # a mount point: another file system, not the submission
            return f"{entry.name} is on another file system: hand in the {thing} itself"
        if entry.parts in self.unwalked:
            return self.unwalked[entry.parts]
        if entry.is_file() and entry.nlink != 1:
            return (
                f"{entry.name} is a hard link (a file with {entry.nlink} names): "
                "hand in a copy of its own"
            )
        if entry.is_file() and entry.size > MAX_FILE_BYTES:
            return f"{entry.name} is {entry.size:,} bytes, over {_file_limit()}"
        return ""

    def read(self, parts: tuple[str, ...]) -> bytes:
        """The bytes of the regular file at ``parts``, opened folder by folder from the
        submission's own descriptor, never through a link; raises :class:`_Refused`."""
        opened: list[int] = []
        try:
            fd = self.fd
            for depth in range(1, len(parts)):
                fd = self._open(fd, self.entries[parts[:depth]], _DIR_FLAGS)
                opened.append(fd)
            entry = self.entries[parts]
            fd = self._open(fd, entry, _FILE_FLAGS)
            opened.append(fd)
            chunks, size = [], 0
            while size <= MAX_FILE_BYTES:  # at most the cap and one byte: it may have grown
                chunk = os.read(fd, min(_READ_CHUNK, MAX_FILE_BYTES + 1 - size))
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
            if size > MAX_FILE_BYTES:
                raise _Refused(f"{entry.name} grew while being read, over {_file_limit()}")
            return b"".join(chunks)
        except OSError as err:
            raise _Refused(_reason(self.entries[parts], err)) from None
        finally:
            for fd in reversed(opened):
                os.close(fd)


def _file_limit() -> str:
    return f"the limit of {MAX_FILE_BYTES // _MIB} MiB for one file"


def _reason(entry: _Entry, err: Exception) -> str:
    if isinstance(err, _Refused):
        return str(err)
    if isinstance(err, OSError) and err.errno == errno.ELOOP:  # became a link since the walk
        thing = "folder" if entry.is_dir() else "file"
        return f"{entry.name} is a symbolic link: hand in the {thing} itself, not a link"
    strerror = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
    return f"{entry.name} cannot be read ({_one_line(strerror)})"


# ------------------------------------------------------------------------------ candidates


@dataclasses.dataclass(frozen=True)
class _Candidate:
    parts: tuple[str, ...]  # the file, or the folder on its path that stops it
    problem: str = ""  # why it cannot be read; "" if it can


def _is_notebook_of(parts: tuple[str, ...], practical: str) -> bool:
    """A notebook of ``practical`` that may be graded (never a solved one, nor a hidden one)."""
    name = parts[-1]
    return (
        name.endswith(".ipynb")
        and practical in name
        and "_solved" not in name
        and not any(_hidden(part) for part in parts)
    )


def _hidden(name: str) -> bool:
    """Not the student's own work: ``.git``, ``.ipynb_checkpoints``, macOS's ``._`` files and
    ``__MACOSX`` folder in a zip."""
    return name.startswith(".") or name == "__MACOSX"


def _candidates(tree: _Tree, practical: str) -> list[_Candidate]:
    """The files that could hold ``practical``, best first: ``<practical>.py`` at the top,
    ``exercises/<practical>.py``, the notebook named ``<practical>.ipynb`` at the top, other
    notebooks at the top whose name holds the practical's, then those in sub-folders."""
    found = []
    for parts in ((f"{practical}.py",), ("exercises", f"{practical}.py")):
        folder = tree.entries.get(parts[:-1]) if len(parts) > 1 else None
        if folder is not None and not folder.is_file():
            problem = tree.problem(folder, folder=True)
            if problem:  # a link or a special file in place of the folder: never looked into
                if not found:  # it might hold the file: refused, unless the top's is graded
                    found.append(_Candidate(folder.parts, problem))
                continue
        entry = tree.entries.get(parts)
        if entry is not None and not entry.is_dir():
            found.append(_Candidate(parts, tree.problem(entry)))
    exact = f"{practical}.ipynb"
    notebooks = sorted(
        (entry for entry in tree.entries.values() if _is_notebook_of(entry.parts, practical)),
        key=lambda e: (len(e.parts), e.parts != (exact,), e.parts),
    )
    found += [_Candidate(e.parts, tree.problem(e)) for e in notebooks if not e.is_dir()]
    return found


def _notes(practical: str, chosen: _Candidate, others: list[_Candidate]) -> list[str]:
    """The other candidates, named; and how the graded one was chosen among its copies."""
    notes = []
    top = len(chosen.parts) == 1
    copies = [c for c in others if c.parts[-1].endswith(".ipynb") and (len(c.parts) == 1) == top]
    if chosen.parts[-1].endswith(".ipynb") and chosen.parts != (f"{practical}.ipynb",) and copies:
        order = "by name" if top else "by depth, then by name"
        notes.append(
            f"graded {_shown(chosen.parts)}, the first {order} of the {len(copies) + 1} "
            f"notebooks {'at the top' if top else 'in sub-folders'} that match {practical}"
        )
    for other in others[:MAX_NOTES]:
        state = "not read" if other.problem else "not graded"
        notes.append(f"also found {_shown(other.parts)} ({state})")
    if len(others) > MAX_NOTES:
        notes.append(f"and {len(others) - MAX_NOTES} more files that match {practical}")
    return notes


def _solved_notes(tree: _Tree, practical: str) -> list[str]:
    """Said when a practical has nothing to grade but its solved notebook."""
    solved = sorted(
        p
        for p in tree.entries
        if p[-1].endswith(".ipynb") and practical in p[-1] and "_solved" in p[-1]
    )
    return [f"{_shown(p)} is a solved notebook: never graded" for p in solved[:1]]


def _find(tree: _Tree, practical: str) -> Found:
    candidates = _candidates(tree, practical)
    if not candidates:
        return Found(None, notes=tuple(_solved_notes(tree, practical)))
    chosen, others = candidates[0], candidates[1:]
    notes = tuple(_notes(practical, chosen, others))
    name = _shown(chosen.parts)
    try:
        if chosen.problem:
            raise _Refused(chosen.problem)
        data = tree.read(chosen.parts)
        if chosen.parts[-1].endswith(".ipynb"):  # not decoded here: up to 4 bytes a character
            text = module_from_notebook_bounded(data, name)
        else:
            text = data.decode("utf-8", errors="replace")
    except (_Refused, NotebookError) as err:
        return Found(None, name, str(err), notes)
    return Found(text, name, "", notes)


def find_practicals(folder: Path, practicals: list[str]) -> dict[str, Found]:
    """What the submission ``folder`` holds for each practical (see :class:`Found`).

    Raises :class:`SubmissionError` when the submission as a whole cannot be read: the folder
    is a link or not a folder, or it is over a cap (``MAX_ENTRIES`` names, ``MAX_DEPTH``
    nested folders)."""
    tree = _Tree(Path(folder))
    try:
        return {practical: _find(tree, practical) for practical in practicals}
    finally:
        tree.close()


if __name__ == "__main__":  # module_from_notebook_bounded's process: bytes in, reply out
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (NOTEBOOK_MEMORY, NOTEBOOK_MEMORY))
    # The reply: a line "ok" then the module, or a line "error" then the message.
    try:
        status = b"ok\n"
        body = module_from_notebook(sys.stdin.buffer.read(), sys.argv[1])
    except NotebookError as err:
        status, body = b"error\n", str(err)
    reply = body.encode("utf-8", errors="replace")
    if len(status) + len(reply) > MAX_REPLY_BYTES:  # said in a line, not cut by the grader
        status, reply = b"error\n", _too_large_reply(sys.argv[1]).encode(errors="replace")
    sys.stdout.buffer.write(status)
    sys.stdout.buffer.write(reply)
