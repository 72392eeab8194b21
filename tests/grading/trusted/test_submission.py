"""Reading a submission as the root grader does: the student controls every byte of it (file
types, links, names, notebook JSON), so nothing is followed, nothing outside it is read, and a
bad file costs its own practical only."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from m2l_nlp.grading.trusted import submission
from m2l_nlp.grading.trusted.submission import (
    Found,
    NotebookError,
    SubmissionError,
    find_practicals,
    module_from_notebook,
)

ROOT = Path(__file__).resolve().parents[3]
GOOD = "def f():\n    return 1\n"  # the other practical's file, graded in every case


def _notebook(*sources: object, **extra: object) -> str:
    cells = [{"cell_type": "code", "metadata": {}, "source": s, "outputs": []} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, **extra})


def _submission(tmp_path: Path) -> Path:
    """A submission folder whose p1 is a good .py file; the tests put p2 in it."""
    folder = tmp_path / "submission"
    folder.mkdir()
    (folder / "p1.py").write_text(GOOD)
    return folder


def _refused(found: Found, *words: str) -> None:
    assert found.text is None and found.problem and "\n" not in found.problem
    for word in words:
        assert word in found.problem


def _p1_graded(found: dict[str, Found]) -> None:
    assert found["p1"] == Found(GOOD, "p1.py")


@pytest.fixture
def opened(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names passed to ``os.open`` while the test runs."""
    names: list[str] = []
    real_open = os.open

    def spy(path, flags, mode=0o777, *, dir_fd=None):
        names.append(os.fsdecode(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(os, "open", spy)
    return names


# -------------------------------------------------------------------------------- notebooks


def test_notebook_becomes_a_module_of_definitions_only():
    def cell(source, **metadata):
        return {"cell_type": "code", "metadata": metadata, "source": source, "outputs": []}

    setup_cell = ROOT / "m2l_nlp" / "authoring" / "setup_cell.py"
    setup_first_line = setup_cell.read_text().splitlines()[0]
    notebook = {
        "cells": [
            cell(f"{setup_first_line}\nimport subprocess\nsubprocess.run(['pip'])"),
            cell("from __future__ import annotations\nimport math\nRATE = 0.1\n"),
            {"cell_type": "markdown", "metadata": {}, "source": "# title"},
            cell(["@staticmethod\n", "def f(x):\n", "    return math.sqrt(x)\n", "f(4)\n"]),
            cell('check("f", f)\n'),  # metadata dropped by an editor: still not kept
            cell("train(model)\n", active="ipynb"),
            cell("!pip install x\n%time f(2)\nclass C:\n    pass\n"),
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    source = module_from_notebook(json.dumps(notebook), "practical_x.ipynb")
    assert source.startswith("from __future__ import annotations\n")
    for kept in ("import math", "RATE = 0.1", "@staticmethod\ndef f(x):", "class C:"):
        assert kept in source
    for dropped in ("subprocess", "f(4)", "check(", "train(", "pip", "%time"):
        assert dropped not in source
    compile(source, "practical_x.py", "exec")


def test_characters_that_split_lines_for_str_but_not_for_python_keep_calls_out():
    # str.splitlines splits at \x1c (and form feeds, U+2028, ...), Python does not: the
    # line numbers of the parsed cell must pick the lines Python means.
    source = module_from_notebook(_notebook('S = "a\x1cb"\ntrain()\ndef g():\n    pass\n'))
    assert "train()" not in source and "def g():" in source
    compile(source, "p.py", "exec")


def test_a_notebook_as_bytes_is_read_as_utf8_with_bad_bytes_replaced():
    data = b'{"cells": [{"cell_type": "code", "source": "S = \'caf\xc3\xa9 \xff\'"}]}'
    assert module_from_notebook(data) == "S = 'caf\u00e9 \ufffd'\n\n"
    lone_surrogate = _notebook("S = '\udc80'\n")  # valid JSON, but no UTF-8 file holds it
    assert module_from_notebook(lone_surrogate) == "S = '\ufffd'\n\n"


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("{", "Expecting"),
        ("[" * 100_000, "nested too deeply"),
        (json.dumps({"cells": {"0": "A = 1"}}), "no list of cells"),
        (json.dumps([1, 2]), "no list of cells"),
        (json.dumps({"cells": ["A = 1"]}), "cell 1 is not a JSON object"),
        (
            json.dumps({"cells": [{"cell_type": "code", "metadata": [1], "source": "A = 1"}]}),
            "metadata of cell 1",
        ),
        (_notebook(7), "source of cell 1 is not text"),
        (_notebook(["A = 1\n", 2]), "source of cell 1 is not text"),
        (_notebook("A = 1\n", "B = 2\0\n"), "cell 2 holds a NUL byte"),
        (_notebook("X = " + "-" * 100_000 + "1\n"), "cell 1 is too large or nested too deeply"),
    ],
)
def test_a_hostile_notebook_is_one_line_for_its_practical_only(tmp_path, text, why):
    folder = _submission(tmp_path)
    (folder / "p2.ipynb").write_text(text)
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    assert found["p2"].name == "p2.ipynb"
    _refused(found["p2"], "p2.ipynb is not a readable notebook: ", why)
    with pytest.raises(NotebookError, match=f"^p2.ipynb is not a readable notebook: .*{why}"):
        module_from_notebook(text, "p2.ipynb")


# ------------------------------------------------------------------------ one file per practical


def test_find_practicals_prefers_py_files_then_exercises_then_notebooks(tmp_path):
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "p1.py").write_text("A = 1\n")
    (tmp_path / "p1.py").write_text("A = 2\n")
    (tmp_path / "p1.ipynb").write_text(_notebook("A = 3"))
    (tmp_path / "exercises" / "p2.py").write_text("B = 1\n")
    (tmp_path / "p2.ipynb").write_text(_notebook("B = 2"))
    (tmp_path / "Copy of p3.ipynb").write_text(_notebook("C = 3"))
    found = find_practicals(tmp_path, ["p1", "p2", "p3", "p4"])
    assert found["p1"] == Found(
        "A = 2\n",
        "p1.py",
        notes=("also found exercises/p1.py (not graded)", "also found p1.ipynb (not graded)"),
    )
    assert found["p2"] == Found("B = 1\n", "exercises/p2.py", notes=found["p2"].notes)
    assert found["p2"].notes == ("also found p2.ipynb (not graded)",)
    assert found["p3"] == Found("C = 3\n\n", "Copy of p3.ipynb")
    assert found["p4"] == Found(None)


def test_the_notebook_named_exactly_wins_over_its_copies(tmp_path):
    folder = _submission(tmp_path)
    (folder / "Copy of p2.ipynb").write_text(_notebook("B = 1"))
    (folder / "p2.ipynb").write_text(_notebook("B = 2"))
    (folder / "old").mkdir()
    (folder / "old" / "p2.ipynb").write_text(_notebook("B = 3"))
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    assert found["p2"].text == "B = 2\n\n" and found["p2"].name == "p2.ipynb"
    assert found["p2"].notes == (
        "also found Copy of p2.ipynb (not graded)",
        "also found old/p2.ipynb (not graded)",
    )


def test_of_several_copies_the_first_by_name_is_graded_and_the_choice_said(tmp_path):
    folder = _submission(tmp_path)
    (folder / "Copy of p2 (1).ipynb").write_text(_notebook("B = 1"))
    (folder / "Copy of p2.ipynb").write_text(_notebook("B = 2"))
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    assert found["p2"].text == "B = 1\n\n" and found["p2"].name == "Copy of p2 (1).ipynb"
    assert found["p2"].notes == (
        "graded Copy of p2 (1).ipynb, the first by name of the 2 notebooks at the top "
        "that match p2",
        "also found Copy of p2.ipynb (not graded)",
    )


def test_a_notebook_in_a_sub_folder_counts_when_the_top_has_none(tmp_path):
    folder = _submission(tmp_path)
    (folder / "notebooks").mkdir()
    (folder / "notebooks" / "p2.ipynb").write_text(_notebook("B = 1"))
    (folder / ".ipynb_checkpoints").mkdir()  # Jupyter's, not the student's
    (folder / ".ipynb_checkpoints" / "p2-checkpoint.ipynb").write_text(_notebook("B = 0"))
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    assert found["p2"] == Found("B = 1\n\n", "notebooks/p2.ipynb")


def test_a_solved_notebook_is_never_graded(tmp_path):
    folder = _submission(tmp_path)
    (folder / "p2_solved.ipynb").write_text(_notebook("B = 1"))
    (folder / "Copy of p1_solved.ipynb").write_text(_notebook("A = 1"))
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    assert found["p2"].text is None and found["p2"].name is None and not found["p2"].problem
    assert found["p2"].notes == ("p2_solved.ipynb is a solved notebook: never graded",)


def test_a_name_in_a_message_is_one_printable_line(tmp_path):
    folder = _submission(tmp_path)
    (folder / "Copy of p2\n\x1b[2J.ipynb").write_text("{")
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    assert found["p2"].name == "Copy of p2\\n\\x1b[2J.ipynb"
    _refused(found["p2"], "Copy of p2\\n\\x1b[2J.ipynb is not a readable notebook")


# -------------------------------------------------------------------- links and special files


def test_a_symlinked_practical_file_is_refused(tmp_path, opened):
    folder = _submission(tmp_path)
    (folder / "mine").mkdir()
    (folder / "mine" / "p2.py").write_text("B = 1\n")
    (folder / "p2.py").symlink_to("mine/p2.py")
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    assert found["p2"].name == "p2.py"
    _refused(found["p2"], "p2.py is a symbolic link: hand in the file itself, not a link")
    assert "p2.py" not in opened


def test_a_symlinked_exercises_folder_is_refused_though_its_target_holds_the_file(tmp_path):
    folder = _submission(tmp_path)
    source = tmp_path / "source" / "solutions"
    source.mkdir(parents=True)
    (source / "p2.py").write_text("B = 'the reference'\n")
    (folder / "exercises").symlink_to("../source/solutions", target_is_directory=True)
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    assert found["p2"].name == "exercises"
    _refused(found["p2"], "exercises is a symbolic link: hand in the folder itself")
    assert "the reference" not in repr(found)


def test_a_link_to_a_root_only_file_is_never_read(tmp_path, opened):
    secret = tmp_path / "shadow"
    secret.write_text("ROOT ONLY SECRET\n")
    secret.chmod(0o600)
    folder = _submission(tmp_path)
    (folder / "p2.py").symlink_to(secret)
    (folder / "Copy of p2.ipynb").symlink_to(secret)
    (folder / "elsewhere").symlink_to(tmp_path, target_is_directory=True)  # never walked
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    _refused(found["p2"], "p2.py is a symbolic link")
    assert found["p2"].notes == ("also found Copy of p2.ipynb (not read)",)
    assert "SECRET" not in repr(found)
    assert not {"p2.py", "Copy of p2.ipynb", "elsewhere", str(secret)} & set(opened)


def test_a_hard_link_is_refused(tmp_path):
    folder = _submission(tmp_path)
    (tmp_path / "outside.py").write_text("B = 1\n")
    os.link(tmp_path / "outside.py", folder / "p2.py")
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    _refused(found["p2"], "p2.py is a hard link (a file with 2 names)")


@pytest.mark.timeout(10)
def test_a_fifo_is_refused_without_waiting_on_it(tmp_path, opened):
    folder = _submission(tmp_path)
    os.mkfifo(folder / "p2.py")
    os.mkfifo(folder / "other")  # not a candidate: listed, never opened
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    _refused(found["p2"], "p2.py is a named pipe (FIFO), not a file")
    assert not {"p2.py", "other"} & set(opened)


def test_a_file_over_the_size_cap_is_refused_unread(tmp_path, opened):
    folder = _submission(tmp_path)
    with open(folder / "p2.py", "wb") as sparse:  # no disk blocks: only st_size is large
        sparse.truncate(submission.MAX_FILE_BYTES + 1)
    found = find_practicals(folder, ["p1", "p2"])
    _p1_graded(found)
    _refused(found["p2"], "p2.py is 20,971,521 bytes, over the limit of 20 MiB for one file")
    assert "p2.py" not in opened


# ----------------------------------------------------------------------- the whole submission


def test_too_many_entries_is_a_submission_error(tmp_path, monkeypatch):
    monkeypatch.setattr(submission, "MAX_ENTRIES", 50)
    folder = _submission(tmp_path)
    (folder / ".git").mkdir()  # a hidden folder is one entry, never looked into
    for number in range(60):
        (folder / ".git" / f"object{number}").write_text("")
    for number in range(48):
        (folder / f"f{number}.txt").write_text("")
    assert find_practicals(folder, ["p1"]) == {"p1": Found(GOOD, "p1.py")}
    (folder / "f48.txt").write_text("")
    with pytest.raises(SubmissionError, match="more than 50 files and folders"):
        find_practicals(folder, ["p1", "p2"])


def test_large_files_that_are_not_read_cost_nothing(tmp_path):
    folder = _submission(tmp_path)
    for number in range(6):  # sparse: six times 19 MiB of st_size, no disk blocks
        with open(folder / f"data{number}.bin", "wb") as sparse:
            sparse.truncate(19 * 2**20)
    assert find_practicals(folder, ["p1"])["p1"].text == GOOD


def test_folders_nested_too_deep_are_a_submission_error(tmp_path):
    folder = _submission(tmp_path)
    (folder / "/".join(["d"] * (submission.MAX_DEPTH + 1))).mkdir(parents=True)
    with pytest.raises(SubmissionError, match="nested more than"):
        find_practicals(folder, ["p1", "p2"])


def test_the_submission_folder_a_link_or_a_file_is_a_submission_error(tmp_path):
    folder = _submission(tmp_path)
    (tmp_path / "link").symlink_to(folder, target_is_directory=True)
    with pytest.raises(SubmissionError, match="is a symbolic link"):
        find_practicals(tmp_path / "link", ["p1", "p2"])
    with pytest.raises(SubmissionError, match="not a folder"):
        find_practicals(folder / "p1.py", ["p1", "p2"])


def test_a_notebook_that_would_take_gigabytes_to_parse_costs_the_grader_nothing(tmp_path):
    """Parsing 1.5 million tiny statements takes about 3 GB: the grader reads a notebook in a
    bounded process of its own, so it refuses that practical and stays small itself."""
    import resource

    folder = _submission(tmp_path)
    cell = {"cell_type": "code", "metadata": {}, "source": "a;" * 1_500_000}
    (folder / "p2.ipynb").write_text(json.dumps({"cells": [cell]}))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    found = find_practicals(folder, ["p1", "p2"])
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert found["p2"].text is None and "too large or nested" in found["p2"].problem
    assert found["p1"].text == GOOD and grown_mib < 100


def test_statements_that_share_a_long_line_are_copied_once():
    """`x = "...100k..."; a0 = 1; a1 = 1; ...` kept each statement with its whole line: the
    module grew as the line times the statements. Now linear in the cell."""
    line = 'x = "' + "A" * 100_000 + '"; ' + "; ".join(f"a{i} = {i}" for i in range(300))
    text = json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": line}]})
    module = submission.module_from_notebook(text)
    assert len(module) < 2 * len(line) and "a299 = 299" in module


def test_the_notebook_readers_reply_is_bounded_whatever_comes_in():
    """A module larger than the reply's bound is refused in one line by the reading process,
    so the grader never reads more than that bound from it."""
    big = "x = '" + "A" * (submission.MAX_REPLY_BYTES + 10) + "'\n"
    text = json.dumps({"cells": [{"cell_type": "code", "metadata": {}, "source": big}]})
    with pytest.raises(submission.NotebookError, match="too large"):
        submission.module_from_notebook_bounded(text.encode(), "big.ipynb")


def test_the_grader_reads_no_more_of_the_readers_reply_than_its_bound(monkeypatch):
    """The reading process's own bound aside, the grader reads at most ``MAX_REPLY_BYTES``
    and one byte of its reply, in chunks, and refuses a longer one in one line (it read
    the whole reply, then parsed it: as large as the process could make it)."""
    monkeypatch.setattr(submission, "MAX_REPLY_BYTES", 4096)  # the grader's: not the reader's
    read = []
    real_read = os.read

    def spy(fd, size):
        read.append(len(data := real_read(fd, size)))
        return data

    monkeypatch.setattr(os, "read", spy)
    text = _notebook("x = '" + "A" * 200_000 + "'\n")
    too_large = r"^p2.ipynb is not a readable notebook: it is too large \(its module is over"
    with pytest.raises(NotebookError, match=too_large):
        submission.module_from_notebook_bounded(text.encode(), "p2.ipynb")
    assert sum(read) <= 4097


def test_a_reader_that_never_replies_is_stopped_at_the_deadline(monkeypatch, tmp_path):
    """Neither a reader that stops reading its input nor one that never writes holds the
    grader past ``NOTEBOOK_SECONDS``."""
    import time

    silent = tmp_path / "silent.py"
    silent.write_text("import time\ntime.sleep(60)\n")
    monkeypatch.setattr(submission, "__file__", str(silent))
    monkeypatch.setattr(submission, "NOTEBOOK_SECONDS", 0.5)
    start = time.monotonic()
    with pytest.raises(NotebookError, match=r"^p2.ipynb is not a readable notebook: .* 0.5 s$"):
        submission.module_from_notebook_bounded(b" " * 2**20, "p2.ipynb")  # over the pipe
    assert time.monotonic() - start < 5


_STATEMENTS = "; ".join(f"a{i} = {i}" for i in range(300))


@pytest.mark.parametrize(
    ("source", "last"),
    [
        ('x = "' + "A" * 50_000 + '"; ' + _STATEMENTS, "a299 = 299"),
        ("import os; " * 200 + "; ".join(f"import m{i}" for i in range(300)), "import m299"),
        ('x = """\n' + "A" * 50_000 + '\n"""; ' + _STATEMENTS, "a299 = 299"),
        ("@d\n" * 1_000 + "def f(): pass\n" + _STATEMENTS + "\nclass C: pass", "class C"),
    ],
    ids=["long-line", "imports", "multi-line-string", "decorators"],
)
def test_the_module_is_linear_in_the_notebook(source, last):
    """Statements that share a line (a long one, or the last of a long statement) are kept
    with their lines once: the module is no larger than the notebook, whatever its shape."""
    text = _notebook(source, source)  # two cells: each is kept, once
    module = module_from_notebook(text)
    assert len(module) <= len(text) and module.count(last) == 2
    compile(module, "p.py", "exec")
