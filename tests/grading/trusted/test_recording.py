"""Tests of m2l_nlp.grading.trusted.recording: the reference's recorded answers (the handout's)."""

from __future__ import annotations

import numpy as np
import pytest

from m2l_nlp.grading.checks import expected
from m2l_nlp.grading.checks.runner import outcome


def test_recorded_answers_replay_and_an_unrecorded_question_fails_in_words():
    class Reference:
        @staticmethod
        def square(x):
            return np.asarray(x) ** 2

    recorder = expected.Recorder(Reference())
    first = recorder.square(np.arange(3.0))
    replay = expected.Replay(recorder.records)
    np.testing.assert_array_equal(replay.square(np.arange(3.0)), first)
    with pytest.raises(expected.NotRecorded, match="no expected value was recorded"):
        replay.square(np.arange(4.0))
    assert outcome(expected.NotRecorded("x"), set())[0] == "failed"


def test_handout_records_round_trip_through_a_file(tmp_path):
    recorder = expected.Recorder(np, stub_lines=('raise NotImplementedError("f: x")',))
    recorder.add(np.float32(1), np.float32(2))
    path = expected.save(recorder, "practical_x", tmp_path)
    assert path.name == "practical_x.json.gz"
    replay = expected.load("practical_x", tmp_path)
    assert replay.stub_lines == ('raise NotImplementedError("f: x")',)
    assert replay.add(np.float32(1), np.float32(2)) == 3
    with pytest.raises(FileNotFoundError, match="make handout"):
        expected.load("practical_y", tmp_path)
