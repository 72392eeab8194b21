"""Run folders (m2l_nlp.runs): one unit, never deleting the user's files, one run at a time,
and fault injection: a run killed at each write step leaves the old run or the new one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from m2l_nlp.runs import folders as runs
from m2l_nlp.train.metrics import EvalResult
from m2l_nlp.train.progress import BestEpoch, Progress


def write_run(folder: Path, accuracy: float) -> None:
    """What a run writes (a stand-in: the files, not a model)."""
    (folder / "checkpoint").mkdir()
    (folder / "checkpoint" / "params.npz").write_bytes(b"params %f" % accuracy)
    (folder / "metrics.json").write_text(json.dumps({"test_accuracy": accuracy}))


def accuracy_in(folder: Path) -> float:
    return json.loads((folder / "metrics.json").read_text())["test_accuracy"]


def hidden_siblings(out: Path) -> list[str]:
    return sorted(p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


def test_describe_tells_our_runs_from_the_users_files(tmp_path):
    assert runs.describe(tmp_path / "nothing") == "missing"
    (tmp_path / "empty").mkdir()
    assert runs.describe(tmp_path / "empty") == "empty"
    unmarked = tmp_path / "unmarked"  # our file names without run.json: not known as ours
    unmarked.mkdir()
    write_run(unmarked, 0.9)
    (unmarked / "training_curves.png").write_bytes(b"png")
    assert runs.describe(unmarked) == "foreign"
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    assert runs.describe(mine) == "foreign"
    (mine / "metrics.json").write_text("{}")
    assert runs.describe(mine) == "foreign"  # one of our names does not make it ours
    (tmp_path / "file").write_text("x")
    assert runs.describe(tmp_path / "file") == "foreign"
    (tmp_path / "fake").mkdir()
    (tmp_path / "fake" / runs.MARKER).write_text("not json")
    assert runs.describe(tmp_path / "fake") == "foreign"


def test_a_folder_of_the_users_files_is_refused_and_left_alone(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.csv").write_text("mine")
    with pytest.raises(runs.RunFolderError, match="not an m2l-nlp run"):
        with runs.open_run(out, overwrite=True):
            pass
    assert sorted(p.name for p in out.iterdir()) == ["precious.csv"]
    notes = tmp_path / "notes.txt"
    notes.write_text("mine")
    with pytest.raises(runs.RunFolderError, match="is a file, not a folder"):
        with runs.open_run(notes, overwrite=True):
            pass
    # refused before the lock file is made: nothing of ours lands beside the user's files
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "out"]


def test_an_existing_run_is_replaced_only_with_overwrite(tmp_path):
    out = tmp_path / "out"
    with runs.open_run(out) as folder:
        folder.commit(lambda new: write_run(new, 0.5), {"preset": "a"})
    assert accuracy_in(out) == 0.5 and runs.describe(out) == "run"
    with pytest.raises(runs.RunFolderError, match="add --overwrite"):
        with runs.open_run(out):
            pass
    os.chmod(out / "checkpoint", 0o500)  # a read-only part of our old run: still replaced
    with runs.open_run(out, overwrite=True) as folder:
        folder.commit(lambda new: write_run(new, 0.7), {"preset": "a"})
    assert accuracy_in(out) == 0.7
    # nothing else of ours is left behind (filelock 3.0 also removes its lock file)
    assert set(hidden_siblings(out)) <= {".out.lock"}


@pytest.mark.parametrize("overwrite", [False, True])
def test_folders_named_like_ours_but_not_made_here_are_named_and_left_alone(tmp_path, overwrite):
    out = tmp_path / "out"
    with runs.open_run(out) as folder:
        folder.commit(lambda new: write_run(new, 0.5), {"preset": "a"})
    for name in (".out.old", ".out.new-mine", ".out.partial"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "keep.txt").write_text("mine")
    (tmp_path / ".out.new-0123456789ab").mkdir()  # ours, killed before its marker: empty
    with pytest.raises(
        runs.RunFolderError, match=r"\.out\.new-mine/, \.out\.old/, \.out\.partial/"
    ):
        with runs.open_run(out, overwrite=overwrite):
            pass
    for name in (".out.old", ".out.new-mine", ".out.partial"):
        assert (tmp_path / name / "keep.txt").read_text() == "mine"
    assert accuracy_in(out) == 0.5
    for name in (".out.old", ".out.new-mine", ".out.partial"):
        (tmp_path / name / "keep.txt").unlink()  # empty now: a folder of ours a kill left
    with runs.open_run(out, overwrite=True) as folder:
        folder.commit(lambda new: write_run(new, 0.7), {"preset": "a"})
    assert set(hidden_siblings(out)) <= {".out.lock"} and accuracy_in(out) == 0.7


@pytest.mark.parametrize("where", ["notes.txt", "checkpoint/notes.txt"])
def test_overwrite_never_deletes_a_file_the_user_put_into_a_run(tmp_path, where):
    out = tmp_path / "out"
    with runs.open_run(out) as folder:
        folder.commit(lambda new: write_run(new, 0.5), {"preset": "a"})
    (out / where).write_text("mine")
    with pytest.raises(runs.RunFolderError, match=f"not part of its run \\({where}\\)"):
        with runs.open_run(out, overwrite=True):
            pass
    written = json.loads((out / runs.MARKER).read_text())["files"]
    assert written == [runs.MADE, "checkpoint/params.npz", "metrics.json", runs.MARKER]
    assert (out / where).read_text() == "mine" and accuracy_in(out) == 0.5
    (out / where).unlink()
    with runs.open_run(out, overwrite=True) as folder:  # the file appears while it trains
        (out / where).write_text("mine")
        with pytest.raises(runs.RunFolderError, match="with --resume to write this run"):
            folder.commit(lambda new: write_run(new, 0.7), {"preset": "a"})
    assert (out / where).read_text() == "mine" and accuracy_in(out) == 0.5
    assert set(hidden_siblings(out)) <= {".out.lock"}


def test_files_a_run_did_not_list_are_the_users_and_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    write_run(out, 0.5)
    listed = ["checkpoint/params.npz", "metrics.json", runs.MARKER]
    (out / runs.MARKER).write_text(json.dumps({"m2l_nlp_run": True, "files": listed}))
    (out / "checkpoint" / "notes.txt").write_text("mine")
    with pytest.raises(runs.RunFolderError, match=r"\(checkpoint/notes\.txt\)"):
        with runs.open_run(out, overwrite=True):
            pass
    (out / "checkpoint" / "notes.txt").unlink()
    with runs.open_run(out, overwrite=True) as folder:
        folder.commit(lambda new: write_run(new, 0.7), {"preset": "a"})
    assert accuracy_in(out) == 0.7


def test_a_second_run_on_the_same_folder_refuses_at_once(tmp_path):
    out = tmp_path / "out"
    code = (
        "import sys, time\nfrom m2l_nlp.runs import folders as runs\n"
        "with runs.open_run(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(runs.RunFolderError, match="another run is writing to"):
            with runs.open_run(out):
                pass
    finally:
        holder.kill()
        holder.wait()
    with runs.open_run(out):  # the lock goes with its process
        pass


def test_sigterm_removes_the_lock_as_ctrl_c_does(tmp_path):
    """`timeout` ends a run with SIGTERM: its lock used to stay for the next run to take
    over; now the run ends as on Ctrl-C, and removes it."""
    out = tmp_path / "out"
    code = (
        "import sys, time\nfrom m2l_nlp.runs import folders as runs\ntry:\n"
        "    with runs.open_run(sys.argv[1]):\n        print('held', flush=True)\n"
        "        time.sleep(60)\nexcept KeyboardInterrupt:\n    print('interrupted')\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert (tmp_path / ".out.lock").exists()
        holder.terminate()
        assert holder.stdout.read().strip() == "interrupted"
        assert holder.wait(timeout=30) == 0
    finally:
        holder.kill()
        holder.wait()
    assert not (tmp_path / ".out.lock").exists()
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL  # and ours was never touched


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_a_folder_where_no_lock_can_be_made_is_not_called_busy():
    # /proc takes no new files, not even from root (os.access would say root may write)
    with pytest.raises(runs.RunFolderError, match=r"cannot create files in /proc \(.*--out$"):
        with runs.open_run("/proc/m2l-nlp-run"):
            pass


def test_progress_is_kept_and_resumed_only_with_the_same_settings(tmp_path):
    out = tmp_path / "out"
    info = dict(epoch=1, epochs=3, fingerprint={"seed": 0, "lr": 1e-3})
    with runs.open_run(out) as folder:
        folder.save_progress(info, {"w": np.arange(3.0)})
        folder.save_progress(dict(info, epoch=2), {"w": np.arange(4.0)})
        kept = sorted(p.name for p in folder.partial.iterdir())
        assert kept == [runs.MADE, "epoch-2.npz", "progress.json"]
    with pytest.raises(runs.RunFolderError, match="epoch 2 of 3 done"):
        with runs.open_run(out):
            pass
    with runs.open_run(out, resume=True) as folder:
        with pytest.raises(runs.RunFolderError, match="these differ: lr, seed"):
            folder.load_progress({"seed": 1, "lr": 1e-2})
        progress, arrays = folder.load_progress({"seed": 0, "lr": 1e-3})
        assert progress["epoch"] == 2
        np.testing.assert_array_equal(arrays["w"], np.arange(4.0))
    with runs.open_run(out, overwrite=True):  # a new start drops the interrupted run
        pass
    assert not (tmp_path / ".out.partial").exists()
    with pytest.raises(runs.RunFolderError, match="nothing to resume"):
        with runs.open_run(out, resume=True):
            pass


def test_the_loops_progress_resumes_exactly_as_it_was_kept(tmp_path):
    """An epoch's state, history (a loss that was not finite included), best epoch and
    evaluations come back from the folder as the loop left them; the settings are compared
    as JSON reads them back (a tuple is a list there)."""
    settings = runs.fingerprint(seed=0, sizes=(2, 3))
    assert settings == {"seed": 0, "sizes": [2, 3]}
    result = EvalResult(0.75, 0.5, np.array([[3, 1], [0, 4]]), 8)
    done = Progress(
        epoch=2,
        state=[np.arange(3.0), np.ones((2, 2), np.float32)],
        history={"loss": [0.7, float("nan")], "val_accuracy": [0.5, 0.75]},
        best=BestEpoch((0.75, -0.5), 2, [np.full(2, 7.0)], result),
        result=result,
    )
    with runs.open_run(tmp_path / "out") as folder:
        folder.keep_epoch(done, 3, settings)
    with runs.open_run(tmp_path / "out", resume=True) as folder:
        back = folder.resume_from(runs.fingerprint(seed=0, sizes=(2, 3)))
        with pytest.raises(runs.RunFolderError, match="these differ: sizes"):
            folder.resume_from(runs.fingerprint(seed=0, sizes=(2, 4)))
    assert back.epoch == 2 and back.history["val_accuracy"] == [0.5, 0.75]
    assert back.history["loss"][0] == 0.7 and np.isnan(back.history["loss"][1])
    for got, want in zip(back.state, done.state, strict=True):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    assert back.best.score == (0.75, -0.5) and back.best.epoch == 2
    np.testing.assert_array_equal(back.best.params[0], np.full(2, 7.0))
    for evaluated in (back.result, back.best.result):
        assert (evaluated.accuracy, evaluated.loss, evaluated.count) == (0.75, 0.5, 8)
        np.testing.assert_array_equal(evaluated.confusion, result.confusion)


CRASHING_RUN = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from m2l_nlp.runs import folders as runs

    out, accuracy = Path(sys.argv[1]), float(sys.argv[2])
    with runs.open_run(out, overwrite=True) as folder:
        folder.save_progress(dict(epoch=1, epochs=1, fingerprint={}), {})
        def write(new):
            (new / "checkpoint").mkdir()
            (new / "metrics.json").write_text(json.dumps({"test_accuracy": accuracy}))
        folder.commit(write, {"preset": "demo"})
    """
)


@pytest.mark.parametrize("exchange", [True, False], ids=["one-step-swap", "two-renames"])
@pytest.mark.parametrize(
    ("point", "seen", "after", "partial_kept"),
    [
        ("epoch-1-saved", 0.5, 0.5, True),  # killed while training: the old run, resumable
        ("run-written", 0.5, 0.5, True),  # new run complete, not swapped in: old run
        ("old-moved-aside", None, 0.9, False),  # two renames only: between them
        ("new-moved-in", 0.9, 0.9, False),  # swapped in, not yet tidied: the new run
    ],
)
def test_a_run_killed_at_each_write_step_leaves_the_old_run_or_the_new_one(
    tmp_path, point, seen, after, partial_kept, exchange
):
    if exchange and point == "old-moved-aside":
        pytest.skip("the one-step swap has no moment between two renames")
    out = tmp_path / "out"
    with runs.open_run(out) as folder:
        folder.commit(lambda new: write_run(new, 0.5), {"preset": "demo"})
    env = dict(os.environ, **{runs.CRASH_ENV: point})
    if not exchange:
        env[runs.NO_EXCHANGE_ENV] = "1"
    done = subprocess.run([sys.executable, "-c", CRASHING_RUN, str(out), "0.9"], env=env)
    assert done.returncode == -signal.SIGKILL
    if seen is None:  # the instant between the renames: no run under the name until repaired
        assert not out.exists()
    else:
        assert accuracy_in(out) == seen and runs.describe(out) == "run"
    folder = runs.RunFolder(out)
    folder.repair()  # what the next start on --out does first, under the lock
    assert accuracy_in(out) == after and runs.describe(out) == "run"
    expected = [".out.lock", ".out.partial"] if partial_kept else [".out.lock"]
    assert hidden_siblings(out) == expected


def test_a_validation_run_writes_beside_the_test_run():
    assert runs.default_out("default", no_test=False) == Path("runs/default")
    assert runs.default_out("default", no_test=True) == Path("runs/default-val")


def test_unwritable_reports_a_folder_it_may_not_look_into(tmp_path, monkeypatch):
    """Path.exists() raises PermissionError under a folder we may not enter: a message."""
    real_exists = Path.exists

    def exists(self):
        if self.name == "locked":
            raise PermissionError(13, "Permission denied")
        return real_exists(self)

    monkeypatch.setattr(Path, "exists", exists)
    problem = runs.unwritable(tmp_path / "locked" / "a" / "b", "--out")
    assert problem and "Permission denied" in problem and "--out" in problem
    assert runs.unwritable(tmp_path / "new" / "run", "--out") is None


def test_progress_with_values_that_are_not_finite_is_valid_json_and_reads_back_as_nan(tmp_path):
    history = {"loss": [0.7, 0.6], "val_loss": [float("nan"), 0.5]}  # epoch 1 not evaluated
    info, arrays = runs.progress_to_save(runs.Progress(2, [np.zeros(2)], history))
    with runs.open_run(tmp_path / "out") as folder:
        folder.save_progress(dict(info, epochs=3, fingerprint={}), arrays)
        text = (folder.partial / runs.PROGRESS).read_text()
        saved, arrays = folder.load_progress({})
    assert "NaN" not in text and json.loads(text)["history"]["val_loss"] == [None, 0.5]
    back = runs.progress_from_saved(saved, arrays)
    assert np.isnan(back.history["val_loss"][0]) and back.history["val_loss"][1] == 0.5


def test_the_lock_goes_with_the_run_that_held_it(tmp_path):
    """One lock file per run used to pile up beside the runs, even for runs that wrote
    nothing; now it is removed when its run ends, refused or not."""
    out = tmp_path / "out"
    with runs.open_run(out):
        assert (tmp_path / ".out.lock").exists()
    assert not (tmp_path / ".out.lock").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("x")
    with pytest.raises(runs.RunFolderError):
        with runs.open_run(tmp_path / "mine"):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]
    out.mkdir()
    write_run(out, 0.5)
    listed = ["checkpoint/params.npz", "metrics.json", runs.MARKER]
    (out / runs.MARKER).write_text(json.dumps({"m2l_nlp_run": True, "files": listed}))
    with pytest.raises(runs.RunFolderError, match="already holds a run"):  # under the lock
        with runs.open_run(out):
            pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "out"]


def test_a_lock_that_another_run_holds_is_never_removed(tmp_path):
    """Our lock file removed by hand while we run, and a second run locking a new one: our
    end must not remove the second run's lock, or a third run would write beside it."""
    out = tmp_path / "out"
    code = (
        "import sys, time\nfrom m2l_nlp.runs import folders as runs\n"
        "with runs.open_run(sys.argv[1]):\n    print('held', flush=True)\n    time.sleep(60)\n"
    )
    second = None
    try:
        with runs.open_run(out):
            (tmp_path / ".out.lock").unlink()
            second = subprocess.Popen(
                [sys.executable, "-c", code, str(out)], stdout=subprocess.PIPE, text=True
            )
            assert second.stdout.readline().strip() == "held"
        assert (tmp_path / ".out.lock").exists()
        with pytest.raises(runs.RunFolderError, match="another run is writing to"):
            with runs.open_run(out):
                pass
    finally:
        if second is not None:
            second.kill()
            second.wait()


def test_a_busy_lock_refused_as_its_run_ends_leaves_no_lock_file(tmp_path, monkeypatch):
    """The run holding the lock removes its file just as we find it busy: saying why must
    not make a new lock file, which nobody would remove."""
    import fcntl

    out = tmp_path / "out"

    def held_then_removed(fd: int, operation: int) -> None:
        (tmp_path / ".out.lock").unlink()  # the holder's end
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(fcntl, "flock", held_then_removed)
    with pytest.raises(runs.RunFolderError, match="another run is writing to"):
        with runs.open_run(out):
            pass
    assert list(tmp_path.iterdir()) == []
