"""Tests of m2l_nlp.grading.trusted.grader: phases, a failure costs its own submission only, the
grader's own memory bound and its scratch (end to end: tests/e2e/, the autograder on Gradescope)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.trusted.submission import Found

ROOT = Path(__file__).resolve().parents[3]


def test_a_worker_that_dies_at_import_costs_its_practical_only(tmp_path):
    from m2l_nlp.grading.trusted import grader as trusted

    (tmp_path / "practical2_transformers.py").write_text("import os\nos._exit(7)\n")
    found = Found("import os\nos._exit(7)\n", "practical2_transformers.py")
    run = trusted.PhaseRun(tmp_path, None, {})
    results = trusted.grade_practical(load_exercises(), "practical2_transformers", found, run)
    assert {r.status for r in results} == {"error"}
    assert "ended (exit status 7)" in results[0].checks[0].message


def test_a_grader_whose_student_user_may_not_run_python_says_so_before_grading(
    tmp_path, monkeypatch, capsys
):
    """Root grading as a user who may not run this Python: one line, before the reference's
    minutes of checks, and each results file says the submission could not be graded."""
    from m2l_nlp.grading.trusted import grader as trusted
    from m2l_nlp.grading.trusted import remote

    def reference_pass(*args, **kwargs):
        raise AssertionError("the reference's checks ran before the student's user was tried")

    if os.geteuid() != 0:
        pytest.skip("the grader runs student code as another user only when it is root")
    monkeypatch.delenv("M2L_GRADER_USER", raising=False)
    from m2l_nlp.grading.trusted import isolation

    monkeypatch.setattr(isolation, "pool", lambda names: [(65534, 65534)])
    monkeypatch.setattr(trusted, "reference_pass", reference_pass)
    private = tmp_path / "private"  # root may go in, user 65534 may not
    private.mkdir(mode=0o700)
    (private / "python").symlink_to(sys.executable)
    monkeypatch.setattr(sys, "executable", str(private / "python"))
    (tmp_path / "submission").mkdir()
    results = tmp_path / "results.json"
    with pytest.raises(remote.WorkerUnavailable) as raised:  # main() says it in one line
        trusted.grade([(tmp_path / "submission", results)], log=lambda line: None)
    assert str(raised.value).startswith("user 65534 cannot start"), raised.value
    assert "M2L_GRADER_USER=root" in str(raised.value)
    assert json.loads(results.read_text())["score"] == 0


def test_what_student_code_prints_is_escaped_before_the_log(capsys):
    from m2l_nlp.grading.trusted.grader import safe_log, safe_text

    forged = "ok\x1b[2K\r\x1b[1Atotal 180 / 180\u202e\ud800 \x00end"
    text = safe_text(forged)
    assert "\x1b" not in text and "\r" not in text and "\ud800" not in text
    assert "\\u001b" in text and "\\ud800" in text and "\\u202e" in text
    hidden = "\u061c\u00ad\u180e\ufff9\u2028\u2029\U000e0041"  # found by an attack
    assert safe_text(hidden) == "\\u061c\\u00ad\\u180e\\ufff9\\u2028\\u2029\\U000e0041"
    assert safe_text("é 日本\n\t") == "é 日本\n\t"
    assert safe_text("x" * 50, 10) == "x" * 10 + " [... 40 more characters]"
    safe_log(print)(forged)
    assert "\x1b" not in capsys.readouterr().out

    def broken(text):
        raise OSError("stdout closed")

    safe_log(broken)("a logging failure costs nothing")


STAGES = (
    "find_practicals",
    "_write_practical",
    "_start",
    "run_check",
    "blame_earlier",
    "results_json",
    "score_table",
    "kill_descendants",
    "remove_path",
    "write_json_atomic",
)


@pytest.mark.slow
def test_a_failure_in_any_stage_costs_its_own_submission_only(tmp_path, monkeypatch, capsys):
    """One batch: submission i meets a failure injected into stage i (reading it, writing its
    file, starting its worker, a check, the blame notes, its results, its score table, its
    cleanup, writing its results file); each gets its results file (but the one whose writing
    failed), and the honest one after them all its points."""
    from m2l_nlp.grading.trusted import grader

    monkeypatch.setenv("M2L_GRADER_USER", "root")  # student code as this user: no other here
    # time limits are tested elsewhere: here a loaded machine must not stop the honest one
    monkeypatch.setattr(grader, "MIN_LIMIT_S", 300.0)
    monkeypatch.setattr(grader, "LOAD_LIMIT_S", 300.0)
    current = [-1]
    grade_one = grader._grade_one

    def tracked(batch, number, submission, seed):
        current[0] = number
        return grade_one(batch, number, submission, seed)

    monkeypatch.setattr(grader, "_grade_one", tracked)
    for index, stage in enumerate(STAGES):
        original = getattr(grader, stage)

        def failing(*args, _original=original, _index=index, _stage=stage, **kwargs):
            if current[0] == _index:
                raise RuntimeError(f"injected into {_stage}")
            return _original(*args, **kwargs)

        monkeypatch.setattr(grader, stage, failing)
    jobs = []
    for index in range(len(STAGES) + 1):
        folder = tmp_path / f"s{index}"
        folder.mkdir()
        kind = "solutions" if index == len(STAGES) else "exercises"
        (folder / "practical1_baselines.py").write_text(
            (ROOT / kind / "practical1_baselines.py").read_text()
        )
        jobs.append((folder, tmp_path / f"r{index}.json"))
    grader.grade(jobs, root=ROOT)
    log = capsys.readouterr().out
    for index, stage in enumerate(STAGES):
        path = jobs[index][1]
        if stage == "write_json_atomic":
            assert not path.exists() and f"could not write {path}" in log
            continue
        data = json.loads(path.read_text())
        assert "score" in data and data["extra_data"]["seed"] > 0, stage
        # said in the log, or (a check's own error) in that check's result
        assert f"injected into {stage}" in log + json.dumps(data), stage
    # practical 1 only: the other practicals' references were never run
    assert "practical1_baselines: the reference passed" in log
    assert "practical2_transformers: the reference" not in log
    honest = json.loads(jobs[-1][1].read_text())
    p1 = [t for t in honest["tests"] if t["tags"][0] == "practical1_baselines"]
    lost = [t.get("output", "") for t in p1 if t["score"] < t["max_score"]]
    assert honest["score"] == sum(t["max_score"] for t in p1) > 0, (lost, log[-3000:])
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith("m2l-")] == []


def test_a_grader_past_its_own_memory_bound_ends_with_its_exit_status():
    """The bound is on the grader's own memory: a process that grows past it calls
    ``over`` once (the grader's ends the process; its supervisor goes on)."""
    code = (
        "import os, time\n"
        "from m2l_nlp.grading.trusted.limits import bound_own_memory\n"
        "bound_own_memory(300 << 20, lambda held: os._exit(75), interval=0.05)\n"
        "kept = [bytearray(8 << 20) for _ in range(64)]  # 512 MB, touched\n"
        "time.sleep(5)\n"
        "os._exit(0)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], timeout=60)
    assert done.returncode == 75


def test_a_killed_graders_scratch_is_removed_by_the_next_and_only_that(tmp_path):
    from m2l_nlp.grading.trusted import grader as trusted

    gone = subprocess.Popen(["true"])
    gone.wait()
    dead = tmp_path / f"{trusted.SCRATCH_PREFIX}dead"
    (dead / "submission-0").mkdir(parents=True)
    (dead / "submission-0" / "practical1_baselines.py").write_text("# a student's\n")
    (dead / trusted.MARKER).write_text(f"{gone.pid} {123456789}\n")
    alive = tmp_path / f"{trusted.SCRATCH_PREFIX}alive"
    alive.mkdir()
    me = os.getpid()
    (alive / trusted.MARKER).write_text(f"{me} {trusted._process_start(me)}\n")
    linked = tmp_path / f"{trusted.SCRATCH_PREFIX}linked"  # a marker that is a link: kept
    linked.mkdir()
    (linked / trusted.MARKER).symlink_to(dead / trusted.MARKER)
    unmarked = tmp_path / f"{trusted.SCRATCH_PREFIX}unmarked"
    unmarked.mkdir()
    said = []
    assert trusted.remove_abandoned_scratch(said.append, str(tmp_path)) == 1
    assert not dead.exists() and alive.exists() and linked.exists() and unmarked.exists()
    assert len(said) == 1 and str(dead) in said[0]


def test_the_phases_run_every_visible_check_before_any_hidden_one():
    from m2l_nlp.grading.trusted import grader as trusted

    exercises = load_exercises(ROOT, hidden=True)
    practicals = list(dict.fromkeys(ex.practical for ex in exercises.values()))
    phases = trusted.phases(exercises, practicals)
    kinds = [p.hidden for p in phases]
    assert kinds == sorted(kinds) and True in kinds and False in kinds
    assert all(
        ex.hidden == p.hidden and ex.practical == p.practical for p in phases for ex in p.exercises
    )
    assert sum(len(p.exercises) for p in phases) == len(exercises)


@pytest.mark.slow
def test_a_reference_that_fails_when_first_needed_stops_the_batch_from_there(
    tmp_path, monkeypatch, capsys
):
    """Practical 2's reference is run when the second submission first has practical 2: it
    fails there, so that submission and every later one say so (the batch stops: no grade
    would be right); the first keeps its grade."""
    from m2l_nlp.grading.trusted import grader

    monkeypatch.setenv("M2L_GRADER_USER", "root")
    original = grader.reference_pass

    def broken_for_practical2(exercises, practical, *args, **kwargs):
        if practical == "practical2_transformers":
            raise grader.GraderBroken("practical2_transformers: scaled_dot_product failed")
        return original(exercises, practical, *args, **kwargs)

    monkeypatch.setattr(grader, "reference_pass", broken_for_practical2)
    jobs = []
    for index, practical in enumerate(["practical1_baselines", "practical2_transformers"] * 2):
        folder = tmp_path / f"s{index}"
        folder.mkdir()
        shutil.copy2(ROOT / "exercises" / f"{practical}.py", folder)
        jobs.append((folder, tmp_path / f"r{index}.json"))
    with pytest.raises(grader.GraderBroken):
        grader.grade(jobs, root=ROOT)
    first = json.loads(jobs[0][1].read_text())
    assert first["tests"] and "could not grade" not in first["output"]
    for _, path in jobs[1:]:
        said = json.loads(path.read_text())["output"]
        assert "could not grade: your instructor has the details" in said, said
        assert "scaled_dot_product" not in said  # the reference's words: the log's only
    assert "error: practical2_transformers: scaled_dot_product failed" in capsys.readouterr().out


def test_a_grader_killed_mid_submission_costs_that_submission_only(tmp_path):
    """As the kernel's OOM killer would: the grader is killed while it grades the first of
    two submissions; that one's results say it could not be graded, and a fresh grader
    grades the second in full."""
    import signal

    batch = tmp_path / "batch"
    batch.mkdir(mode=0o700)
    pairs = []
    for name in ("first", "second"):
        (batch / name).mkdir()
        shutil.copy2(ROOT / "solutions" / "practical1_baselines.py", batch / name)
        pairs += [str(batch / name), str(batch / f"{name}.json")]
    env = {**os.environ, "M2L_GRADER_USER": "root", "M2L_ROOT": str(ROOT)}
    run = subprocess.Popen(
        [sys.executable, "-m", "m2l_nlp.grading.trusted", "--seed", "5", *pairs],
        env=env,
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = []
    killed = False
    for line in run.stdout:
        log.append(line)
        if line.startswith("== submission 1 of 2") and not killed:
            children = [  # this batch's grader only: other tests grade beside this one
                int(p)
                for p in os.listdir("/proc")
                if p.isdigit() and _parent(p) == run.pid and b"--grader-state" in _cmdline(p)
            ]
            for pid in children:
                os.kill(pid, signal.SIGKILL)
            killed = bool(children)
    assert run.wait(timeout=900) == 0, "".join(log)[-3000:]
    assert killed
    first = json.loads((batch / "first.json").read_text())
    second = json.loads((batch / "second.json").read_text())
    assert first["score"] == 0 and "could not grade this submission" in first["output"]
    assert second["score"] == sum(
        t["max_score"] for t in second["tests"] if t["tags"][0] == "practical1_baselines"
    )
    assert any("the rest in a fresh grader" in line for line in log), "".join(log)


def _parent(pid: str) -> int:
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
        return int(stat[stat.rfind(b")") + 2 :].split()[1])
    except (OSError, ValueError, IndexError):
        return 0


def _cmdline(pid: str) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as handle:
            return handle.read()
    except OSError:
        return b""


def test_a_submissions_time_is_what_its_exercises_allow_at_most_the_settings():
    from m2l_nlp.grading.trusted.grader import LOAD_LIMIT_S, submission_seconds

    allowed = 10 + 20 + 2 * LOAD_LIMIT_S  # each exercise's limit and an import per practical
    assert submission_seconds(10_000, {"a": 10.0, "b": 20.0}, 2) == allowed
    assert submission_seconds(40, {"a": 10.0, "b": 20.0}, 2) == 40


def test_what_a_user_can_open_is_asked_as_that_user(as_nobody, monkeypatch):
    import tempfile

    from m2l_nlp.grading.trusted.grader import readable_by

    # the system's Python, which every user may run (a Python under root's home may be shut)
    monkeypatch.setattr(sys, "executable", as_nobody.python)
    base = Path(tempfile.mkdtemp())  # not under pytest's folders, which only root may enter
    try:
        base.chmod(0o755)
        (base / "open").write_text("x")
        (base / "open").chmod(0o644)
        (base / "shut").write_text("x")
        (base / "shut").chmod(0o600)
        nobody = (as_nobody.user, as_nobody.user)
        assert readable_by(nobody, [base / "open", base / "shut"]) == [str(base / "open")]
        assert readable_by(nobody, [base], mode="w") == []
    finally:
        shutil.rmtree(base)


def test_the_references_pass_answers_in_its_own_process_and_sets_each_exercises_time(tmp_path):
    """The reference runs the checks of the exercises given (one here) in a worker that then
    answers the checks' questions; each exercise gets ``factor`` times the reference's time,
    never under the floor. Without solutions/ the grader says what it needs."""
    import numpy as np

    from m2l_nlp.grading.checks.runner import reference
    from m2l_nlp.grading.trusted import grader as trusted

    catalog = load_exercises()
    one = {"scaled_dot_product": catalog["scaled_dot_product"]}
    remote, limits = trusted.reference_pass(one, "practical2_transformers", ROOT, tmp_path)
    try:
        assert set(limits) == {"scaled_dot_product"}
        assert limits["scaled_dot_product"] >= trusted.MIN_LIMIT_S
        assert any(
            line.startswith('raise NotImplementedError("scaled') for line in remote.stub_lines
        )
        q = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
        values, weights = remote.scaled_dot_product(q, q, q)
        want, _ = reference("practical2_transformers").scaled_dot_product(q, q, q)
        np.testing.assert_allclose(values, want, rtol=1e-5, atol=1e-6)
        assert np.asarray(weights).shape == (2, 3, 3)
    finally:
        remote.worker.kill()
    with pytest.raises(trusted.GraderBroken, match="is missing: the autograder needs solutions/"):
        trusted.reference_pass(one, "practical2_transformers", tmp_path, tmp_path)
