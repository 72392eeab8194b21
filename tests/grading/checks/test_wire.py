"""Tests of m2l_nlp.grading.checks.wire: the plain data between the grader and a worker."""

from __future__ import annotations

import json

import numpy as np
import pytest

from m2l_nlp.grading.checks import wire


def test_wire_round_trip_keeps_types_and_bytes():
    value = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "t": (1, 2.5, None, True, "x"),
        "l": [np.int32(3), np.zeros((0, 4), np.int64)],
        "nested": {"b": np.array([True, False])},
    }
    back = wire.decode(wire.encode(value))
    assert back["t"] == (1, 2.5, None, True, "x") and isinstance(back["l"], list)
    np.testing.assert_array_equal(back["a"], value["a"])
    assert back["a"].dtype == np.float32 and back["l"][1].shape == (0, 4)
    assert wire.digest(value) == wire.digest(back)


def test_wire_never_builds_objects():
    class Evil:
        def __reduce__(self):  # what pickle would run
            raise AssertionError("never called")

    back = wire.decode(wire.encode({"x": Evil(), "o": np.array([object()], dtype=object)}))
    assert back["x"] == wire.Opaque("Evil") and isinstance(back["o"], wire.Opaque)
    for bad in (
        {"a": ["|O", [1], "AAAAAAAAAAA="]},  # object arrays are refused
        {"a": ["<f4", [3], "AAAAAA=="]},  # bytes that do not fill the shape
        {"z": 1},  # unknown tag
        {"t": [1], "l": [2]},  # two tags
    ):
        with pytest.raises(wire.WireError):
            wire.decode(json.dumps(bad).encode())
    with pytest.raises(wire.WireError):
        wire.decode(b"\xff not json")


def test_replies_are_bounded_in_shape_before_any_computation():
    """Bytes do not bound shapes: a zero-size (2**30, 0) array is 0 bytes, and its mean over
    the last axis 8 GiB."""
    for fine in (np.zeros((30000, 1)), [np.zeros((1, 30000)), np.zeros((3, 0))], {"a": 1}):
        wire.check_sizes(wire.decode(wire.encode(fine)))
    for huge in (
        np.zeros((2**30, 0)),
        np.zeros((0, 2**23)),
        [np.zeros((1 << 21,), np.int8)] * 5,  # under the limit each, over it together
        list(range(wire.MAX_ITEMS + 1)),
    ):
        with pytest.raises(wire.TooLarge):
            wire.check_sizes(wire.decode(wire.encode(huge)))
