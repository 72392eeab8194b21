"""Tests of m2l_nlp.grading.checks.wire: the plain data between the grader and a worker."""

from __future__ import annotations

import json
import os

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


def test_a_framed_message_crosses_a_pipe_whole_and_an_early_close_is_an_end():
    read, write = os.pipe()
    try:
        value = {"a": np.arange(3, dtype=np.int32), "t": ("x", 1.5)}
        payload = wire.encode(value)
        assert wire.frame(payload) == wire.HEADER.pack(len(payload)) + payload
        wire.send(write, value)
        wire.send_bytes(write, wire.encode([None]))
        got = wire.receive(read)
        np.testing.assert_array_equal(got["a"], value["a"])
        assert got["t"] == ("x", 1.5) and wire.receive(read) == [None]
        os.write(write, wire.HEADER.pack(10) + b"abc")  # a message cut short
        os.close(write)
        write = None
        with pytest.raises(EOFError):
            wire.receive(read)
    finally:
        os.close(read)
        if write is not None:
            os.close(write)


def test_read_exactly_gathers_a_message_written_in_pieces():
    read, write = os.pipe()
    try:
        os.write(write, b"ab")
        os.write(write, b"cdef")
        assert wire.read_exactly(read, 5) == b"abcde"
        assert wire.read_exactly(read, 1) == b"f"
    finally:
        os.close(read)
        os.close(write)


def test_a_length_over_the_limit_is_refused_before_it_is_read():
    read, write = os.pipe()
    try:
        os.write(write, wire.HEADER.pack(wire.MAX_BYTES + 1))
        with pytest.raises(wire.WireError, match="over the limit"):
            wire.receive(read)
    finally:
        os.close(read)
        os.close(write)
