"""m2l_nlp.grading.classroom.batch: a class graded by the trusted grader, resumable; its
export unpacked safely; what a regrade changes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
import zipfile

import pytest

from m2l_nlp.grading.classroom import batch
from m2l_nlp.grading.classroom.batch import (
    class_folder,
    plan,
    score_changes,
    submissions_in,
    unpack,
)
from m2l_nlp.grading.classroom.exports import ExportError, Submission
from m2l_nlp.grading.classroom.gradebook import Gradebook
from m2l_nlp.impl import repo_root

P1 = "practical1_baselines"


def _zip(path, members: dict[str, bytes], links: tuple[str, ...] = ()):
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
        for name in links:
            info = zipfile.ZipInfo(name)
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(info, "/etc/passwd")
    return path


def test_a_zip_is_unpacked_without_links_or_paths_that_leave_it(tmp_path):
    archive = _zip(
        tmp_path / "e.zip",
        {"export/submission_1/practical1_baselines.py": b"x = 1\n", "export/empty/": b""},
        links=("export/submission_1/link.py",),
    )
    folder = unpack(archive, tmp_path / "out")
    assert (folder / "export/submission_1/practical1_baselines.py").read_bytes() == b"x = 1\n"
    assert not os.path.lexists(folder / "export/submission_1/link.py")
    for bad in ("../evil.py", "/etc/evil.py", "a/../../evil.py"):
        with pytest.raises(ExportError, match="leaves the export"):
            unpack(_zip(tmp_path / "bad.zip", {bad: b"1"}), tmp_path / f"o{len(bad)}")
    assert not (tmp_path / "evil.py").exists()


def test_a_zip_larger_than_it_may_be_is_refused_as_it_is_read(tmp_path, monkeypatch):
    monkeypatch.setattr(batch, "MAX_FILE_BYTES", 1000)
    with pytest.raises(ExportError, match="too large"):
        unpack(_zip(tmp_path / "big.zip", {"a.py": b"0" * 5000}), tmp_path / "out")
    monkeypatch.setattr(batch, "MAX_MEMBERS", 2)
    with pytest.raises(ExportError, match="over 2 files"):
        unpack(_zip(tmp_path / "many.zip", {f"{i}.py": b"" for i in range(3)}), tmp_path / "o2")


def test_the_submissions_of_an_export_or_of_a_plain_folder(export, tmp_path):
    assert class_folder(export, tmp_path) == export
    assert [s.id for s in submissions_in(export)][:2] == ["submission_101", "submission_102"]
    archive = tmp_path / "export.zip"
    shutil.make_archive(str(archive.with_suffix("")), "zip", export.parent, export.name)
    folder = class_folder(archive, tmp_path / "work")
    assert folder.name == export.name and len(submissions_in(folder)) == 4
    assert class_folder(archive, tmp_path / "work") == folder  # a resumed run unpacks again
    plain = tmp_path / "plain"
    for name in ("bob", "alice", ".hidden"):
        (plain / name).mkdir(parents=True)
    assert [s.id for s in submissions_in(plain)] == ["alice", "bob"]
    with pytest.raises(ExportError, match="holds no submission folders"):
        submissions_in(tmp_path / "plain" / "bob")


def test_a_run_resumes_with_its_seed_and_a_regrade_reuses_the_last_seed(tmp_path):
    book = Gradebook(tmp_path / "b.sqlite")
    subs = [Submission(f"s{i}", (), "") for i in range(3)]
    first = plan(book, subs, regrade=False)
    assert not first.resumed and len(first.todo) == 3 and first.seed > 0
    book.record(first.run, subs[0], {"score": 1, "tests": []})
    again = plan(book, subs, regrade=False)  # stopped midway: the same run goes on
    assert (again.run, again.seed, again.resumed) == (first.run, first.seed, True)
    assert [s.id for s in again.todo] == ["s1", "s2"]
    book.finish_run(first.run)
    late = plan(book, [*subs, Submission("s3", (), "")], regrade=False)
    assert late.run != first.run and [s.id for s in late.todo] == ["s1", "s2", "s3"]
    book.finish_run(late.run)
    regrade = plan(book, subs, regrade=True)
    assert regrade.seed == late.seed and len(regrade.todo) == 3
    book.close()


def test_a_run_records_what_graded_it_and_resumes_only_with_the_same(tmp_path, monkeypatch):
    """The course's commit (``+changes`` past it) and the hash of the grading code and the
    reference; a run stopped midway resumes only where both grade as they did."""
    course = tmp_path / "course"
    (course / "solutions").mkdir(parents=True)
    (course / "solutions" / f"{P1}.py").write_text("ANSWER = 1\n")
    monkeypatch.setenv("M2L_ROOT", str(course))
    assert batch.grading_version()[0] is None  # not a git checkout: no commit to name
    git = ["git", "-C", str(course), "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "course"], check=True)
    head = subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True)
    book = Gradebook(tmp_path / "b.sqlite")
    subs = [Submission(f"s{i}", (), "") for i in range(2)]
    first = plan(book, subs, regrade=False)
    commit, bundle = book.run_version(first.run)
    assert commit == head.stdout.strip() and len(bundle) == 64
    book.record(first.run, subs[0], {"score": 1, "tests": []})
    assert plan(book, subs, regrade=False).resumed  # stopped; nothing changed
    (course / "solutions" / f"{P1}.py").write_text("ANSWER = 2\n")  # a fixed reference
    changed = plan(book, subs, regrade=False)
    assert not changed.resumed and changed.run != first.run
    assert [s.id for s in changed.todo] == ["s1"]  # what was graded stays graded
    commit, other = book.run_version(changed.run)
    assert commit == head.stdout.strip() + "+changes" and other != bundle
    book.close()


def test_who_gains_and_who_loses_per_exercise():
    before = {"a": {"tfidf": 10, "multi_hot": 5}, "b": {"tfidf": 10}, "gone": {"tfidf": 1}}
    after = {"a": {"tfidf": 10, "multi_hot": 10}, "b": {"tfidf": 7.5}, "new": {"tfidf": 3}}
    assert score_changes(before, after) == {"multi_hot": [("a", 5)], "tfidf": [("b", -2.5)]}


def test_an_id_that_is_not_a_folders_name_is_a_row_never_a_path(tmp_path, monkeypatch):
    """Metadata ids such as ``../x`` or ``a/../b`` (a tampered export): neither read as
    another's folder nor written outside the work folder."""
    folder = tmp_path / "export"
    (folder / "submission_1").mkdir(parents=True)
    (folder / "submission_metadata.yml").write_text(
        "submission_1: {}\n'../../escape': {}\n'submission_2/../submission_1': {}\n'.': {}\n"
    )
    graded = []
    monkeypatch.setattr(batch, "_run_grader", lambda job, pairs, *rest: graded.extend(pairs))
    book = Gradebook(tmp_path / "b.sqlite")
    batch.grade_class(folder, book, tmp_path / "work", local=True, say=lambda line: None)
    assert [s.id for s, _, _ in graded] == ["submission_1"]
    errors = {r.submission: r.error for r in book.latest()}
    assert errors == dict.fromkeys(
        ["../../escape", "submission_2/../submission_1", "."], "its id is not a folder's name"
    )
    assert not (tmp_path / "escape.json").exists()
    book.close()


def test_graders_side_by_side_share_the_class_and_each_result_is_recorded_once(
    tmp_path, monkeypatch
):
    """--jobs 3 over 7 submissions: three graders (here stand-ins that write results), each
    its share, the same seed; every submission recorded once."""
    stand_in = tmp_path / "grader.py"
    stand_in.write_text(
        "import json, os, sys\n"
        "seed, pairs = sys.argv[1], sys.argv[2:]\n"
        "for results in pairs[1::2]:\n"
        "    test = {'name': 'multi_hot', 'score': 1.0, 'max_score': 1.0, 'tags': ['p', 'm']}\n"
        "    json.dump({'score': 1.0, 'tests': [test], 'extra_data': {'pid': os.getpid(),\n"
        "               'seed': seed}}, open(results, 'w'))\n"
    )
    monkeypatch.setattr(
        batch,
        "grader_command",
        lambda seed, pairs: (
            [sys.executable, str(stand_in), str(seed)] + [str(p) for pair in pairs for p in pair]
        ),
    )
    monkeypatch.setattr(batch, "jobs_allowed", lambda jobs, asked, local, work: jobs)
    students = tmp_path / "class"
    for i in range(7):
        (students / f"s{i}").mkdir(parents=True)
    book = Gradebook(tmp_path / "b.sqlite")
    said = []
    job = batch.grade_class(students, book, tmp_path / "work", local=True, say=said.append, jobs=3)
    results = tmp_path / "work" / f"run-{job.run}" / "results"
    written = [json.loads(p.read_text())["extra_data"] for p in sorted(results.iterdir())]
    assert len(written) == 7 and {w["seed"] for w in written} == {str(job.seed)}
    assert len({w["pid"] for w in written}) == 3  # three graders, each its share
    assert sorted(book.scores()) == [f"s{i}" for i in range(7)]
    assert "3 graders side by side" in "\n".join(said)
    logs = sorted(p.name for p in (tmp_path / "work" / f"run-{job.run}").glob("grader*.log"))
    assert logs == ["grader-2.log", "grader-3.log", "grader.log"]
    book.close()


def test_graders_side_by_side_need_the_sandboxes(tmp_path, monkeypatch):
    """With --local or without bubblewrap, one grader: asked for more, refused in words."""
    from m2l_nlp.grading.trusted import isolation

    assert batch.jobs_allowed(4, asked=False, local=True, work=tmp_path) == 1
    with pytest.raises(batch.NotIsolated, match="--jobs 4 needs bubblewrap's sandboxes"):
        batch.jobs_allowed(4, asked=True, local=True, work=tmp_path)
    monkeypatch.setattr(isolation, "student_users", lambda: [(65534, 65534)])
    monkeypatch.setattr(isolation.Isolation, "probe", staticmethod(lambda *a: "bwrap refused"))
    assert batch.jobs_allowed(2, asked=False, local=False, work=tmp_path) == 1
    with pytest.raises(batch.NotIsolated, match=r"\(bwrap refused\).*--jobs 1"):
        batch.jobs_allowed(2, asked=True, local=False, work=tmp_path)
    monkeypatch.setattr(isolation.Isolation, "probe", staticmethod(lambda *a: None))
    assert batch.jobs_allowed(2, asked=True, local=False, work=tmp_path) == 2
    assert batch.jobs_allowed(1, asked=True, local=True, work=tmp_path) == 1
    assert batch.default_jobs() >= 1


def test_grading_as_another_user_is_refused_without_local(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    with pytest.raises(batch.NotIsolated, match="would not be isolated.*--local"):
        batch.check_isolation(local=False)
    batch.check_isolation(local=True)


def _class(folder):
    """Three students' folders with practical 1 only: the reference, a slip, and nothing."""
    source = (repo_root() / "solutions" / f"{P1}.py").read_text()
    for name, text in (
        ("ada", source),
        ("alan", source.replace(".max(present)", ".add(present)")),
        ("edsger", None),
    ):
        (folder / name).mkdir(parents=True)
        if text is not None:
            (folder / name / f"{P1}.py").write_text(text)
    return folder


@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="grades as root, as an instructor's machine does")
def test_a_class_graded_killed_and_resumed_gives_the_rows_of_one_run(tmp_path):
    """`m2l-nlp class grade`, killed once the first results are in, then run again: every
    submission graded once, in one run with one seed."""
    students = _class(tmp_path / "class")
    # --local: student code as root (the sandboxes are the trusted grader's, tested with it);
    # what is tested here is the class's run: its seed, its resume, its rows
    command = [sys.executable, "-m", "m2l_nlp.cli", "class", "grade", str(students), "--local"]
    book_path = tmp_path / "gradebook.sqlite"
    # a session of its own, killed whole, as closing the terminal would
    first = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        line = ""
        deadline = time.monotonic() + 900
        while "graded 1/3" not in line and time.monotonic() < deadline:
            line = first.stdout.readline()
            assert line or first.poll() is None, "the class run ended before a result"
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait()
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "resuming run 1" in done.stdout
    book = Gradebook(book_path)
    rows = {r.submission: r for r in book.latest()}
    assert book.counts()["outcomes"] == 3 and book.counts()["runs"] == 1
    assert rows["ada"].exercises["multi_hot"][0] == 10  # the reference's
    assert rows["alan"].exercises["multi_hot"][0] == 0  # the slip's
    assert rows["ada"].score > rows["alan"].score > rows["edsger"].score == 0
    book.close()


def test_a_regrade_lists_who_gains_and_who_loses_and_a_dry_run_keeps_nothing(
    tmp_path, monkeypatch, capsys
):
    """The grader stood in for by one that writes results (the class's run is what is
    tested: its seed, its rows, the diff), the first run, then a regrade after a check
    changed."""
    from m2l_nlp.cli import main

    students = _class(tmp_path / "class")
    points = {"ada": 10.0, "alan": 0.0, "edsger": 0.0}
    seeds = []

    def grader(job, pairs, here, book, local, say, jobs=1):
        seeds.append(job.seed)
        for submission, _, written in pairs:
            score = points[submission.id]
            test = {
                "name": "multi_hot",
                "score": score,
                "max_score": 10.0,
                "tags": [P1, "multi_hot"],
            }
            written.write_text(json.dumps({"score": score, "tests": [test]}))
            book.record(job.run, submission, json.loads(written.read_text()))

    monkeypatch.setattr(batch, "_run_grader", grader)
    command = ["class", "grade", str(students), "--local"]
    assert main(command) == 0
    points.update(ada=7.5, alan=2.5)  # a check changed
    assert main([*command, "--regrade", "--dry-run"]) == 0
    said = capsys.readouterr().out
    assert "multi_hot: 1 gain (alan +2.5), 1 lose (ada -2.5)" in said
    assert "dry run: the gradebook is as it was" in said
    book = Gradebook(tmp_path / "gradebook.sqlite")
    assert book.counts()["runs"] == 1 and book.scores()["ada"] == {"multi_hot": 10.0}
    book.close()
    points.update(ada=5.0)  # changed again: what the dry run wrote is not taken
    assert main([*command, "--regrade"]) == 0
    book = Gradebook(tmp_path / "gradebook.sqlite")
    assert book.counts()["runs"] == 2 and book.scores()["ada"] == {"multi_hot": 5.0}
    assert book.last_run("grade")[0] == 3  # the dry run's id is not given again
    book.close()
    assert len(set(seeds)) == 1  # every regrade with the first run's seed
