"""Atomic writes: the target is either the old file or the complete new one, never a mix."""

from __future__ import annotations

import json
import os

import pytest

from m2l_nlp.fileio import atomic_file, write_json_atomic, write_text_atomic


def test_write_text_creates_folders_and_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "a" / "b.txt"
    assert write_text_atomic(target, "héllo\r\n") == target
    assert target.read_bytes() == "héllo\r\n".encode()
    assert sorted(p.name for p in target.parent.iterdir()) == ["b.txt"]
    assert os.stat(target).st_mode & 0o044, "the file should be readable like an ordinary one"


def test_a_failed_write_keeps_the_old_file_and_raises(tmp_path):
    target = tmp_path / "results.json"
    write_json_atomic(target, {"score": 1})
    with pytest.raises(TypeError):
        write_json_atomic(target, {"score": object()})  # not JSON: fails before writing
    with pytest.raises(TypeError):
        write_text_atomic(target, b"bytes are not text")  # fails while writing
    assert json.loads(target.read_text()) == {"score": 1}
    assert [p.name for p in tmp_path.iterdir()] == ["results.json"]


def test_an_interrupted_binary_write_leaves_the_old_file(tmp_path):
    """Ctrl-C inside ``with atomic_file(...)``: the old bytes stay, no temporary is left."""
    target = tmp_path / "arrays.bin"
    with atomic_file(target) as handle:
        handle.write(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_file(target) as handle:
        handle.write(b"new, but cut short")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["arrays.bin"]


def test_json_files_are_valid_json_with_null_for_numbers_that_are_not_finite(tmp_path):
    """JSON has no NaN: a bare NaN (json.dumps' default) is not JSON that other tools read."""
    import numpy as np

    value = {"loss": [0.5, float("nan")], "best": (float("inf"), -np.inf), "x": np.float32("nan")}
    text = write_json_atomic(tmp_path / "m.json", value).read_text()

    def refuse(constant):
        raise ValueError(f"not JSON: {constant}")

    read = json.loads(text, parse_constant=refuse)
    assert read == {"loss": [0.5, None], "best": [None, None], "x": None}
