"""m2l_nlp.grading.checks.expected: the reference's answers recorded, replayed, kept in a file."""

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


def test_a_modules_forward_is_recorded_by_its_build_and_inputs_and_replayed():
    """The ``run_haiku`` questions: init, then apply with those parameters, answered again
    from the records alone; other inputs were never asked."""
    from m2l_nlp.grading.checks.runner import reference
    from m2l_nlp.grading.practicals.practical2.blocks import D, _ffn

    recorder = expected.Recorder(reference("practical2_transformers"))
    x = np.ones((2, 3, D), np.float32)
    params = recorder.run_haiku(_ffn(0.0, False), None, (x,))
    out = recorder.run_haiku(_ffn(0.0, False), params, (x,))
    assert np.asarray(out).shape == x.shape
    replay = expected.Replay(recorder.records)
    np.testing.assert_array_equal(replay.run_haiku(_ffn(0.0, False), params, (x,)), out)
    with pytest.raises(expected.NotRecorded, match=r"\(_ffn\)"):
        replay.run_haiku(_ffn(0.0, False), params, (x + 1,))
