"""m2l_nlp.grading.trusted.recording: every check of one practical run on the reference, its
answers recorded (the handout's records, the trusted grader's)."""

from __future__ import annotations

import types

import numpy as np
import pytest

from m2l_nlp.grading.checks.catalog import load_exercises
from m2l_nlp.grading.checks.expected import Replay
from m2l_nlp.grading.checks.runner import judge_check, reference
from m2l_nlp.grading.trusted.recording import record

P1 = "practical1_baselines"


@pytest.fixture(scope="module")
def catalog():
    """multi_hot (practical 1) and scaled_dot_product (practical 2): quick to check."""
    every = load_exercises()
    return {name: every[name] for name in ("multi_hot", "scaled_dot_product")}


def test_a_practicals_checks_are_recorded_and_the_reference_passes_them_replayed(catalog):
    ref = reference(P1)
    recorder = record(catalog, P1, ref, ("raise NotImplementedError",))
    assert list(recorder.seconds) == ["multi_hot"]  # the other practical's exercise is left
    assert recorder.records and recorder.stub_lines == ("raise NotImplementedError",)
    replay = Replay(recorder.records, recorder.stub_lines)
    ex = catalog["multi_hot"]
    for chk in ex.checks:
        assert judge_check(ex, chk, ref, replay, [], set()) == ("passed", ""), chk.name


def test_a_reference_that_fails_a_check_stops_the_recording_in_words(catalog):
    ref = reference(P1)
    broken = types.SimpleNamespace(
        **{n: getattr(ref, n) for n in dir(ref) if not n.startswith("_")}
    )
    broken.multi_hot = lambda ids, mask, vocab_size: np.zeros((len(ids), vocab_size), np.float32)
    with pytest.raises(RuntimeError, match=r"^the reference fails multi_hot/\w+: "):
        record(catalog, P1, broken)
