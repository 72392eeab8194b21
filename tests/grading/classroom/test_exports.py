"""m2l_nlp.grading.classroom.exports: Gradescope's export metadata read as data, safely."""

from __future__ import annotations

import os
import zipfile

import pytest

from m2l_nlp.grading.classroom import exports
from m2l_nlp.grading.classroom.exports import ExportError, Submitter, read_export


def test_the_folder_and_its_zip_give_the_same_submissions(export, tmp_path):
    found = read_export(export)
    assert [s.id for s in found] == [f"submission_10{i}" for i in range(1, 5)]
    assert found[0].submitters == (Submitter("Ada Lovelace", "ada@example.org", "1001"),)
    assert found[0].created_at.startswith("2026-11-30") and found[0].results["score"] == 25
    assert len(found[2].submitters) == 2 and found[3].results is None
    archive = tmp_path / "export.zip"
    with zipfile.ZipFile(archive, "w") as zf:  # as Gradescope zips it: under one folder
        for path in export.rglob("*"):
            zf.write(path, path.relative_to(export.parent))
    assert read_export(archive) == found
    assert [s.results for s in read_export(archive)] == [s.results for s in found]


def test_what_is_not_an_export_is_refused_in_words(tmp_path):
    with pytest.raises(ExportError, match="does not exist"):
        read_export(tmp_path / "nothing")
    with pytest.raises(ExportError, match="has no submission_metadata.yml"):
        read_export(tmp_path)
    (tmp_path / "bad.zip").write_bytes(b"not a zip")
    with pytest.raises(ExportError, match="cannot be read as a zip"):
        read_export(tmp_path / "bad.zip")
    (tmp_path / exports.METADATA).write_text("- a list\n")
    with pytest.raises(ExportError, match="holds no submissions"):
        read_export(tmp_path)
    (tmp_path / exports.METADATA).write_text("key: [unclosed\n")
    with pytest.raises(ExportError, match="cannot be read"):
        read_export(tmp_path)


def test_no_link_is_followed_and_no_object_is_built(tmp_path, monkeypatch):
    secret = tmp_path / "secret.yml"
    secret.write_text("submission_1:\n  :submitters: []\n")
    folder = tmp_path / "export"
    folder.mkdir()
    os.symlink(secret, folder / exports.METADATA)
    with pytest.raises(ExportError, match="not a plain file"):
        read_export(folder)
    (folder / exports.METADATA).unlink()
    (folder / exports.METADATA).write_text("submission_1: !!python/object/apply:os.system [id]\n")
    with pytest.raises(ExportError, match="cannot be read"):  # safe_load builds no object
        read_export(folder)
    link = tmp_path / "link.zip"
    with zipfile.ZipFile(link, "w") as zf:
        info = zipfile.ZipInfo(exports.METADATA)
        info.external_attr = 0o120777 << 16  # a symbolic link's mode
        zf.writestr(info, str(secret))
    with pytest.raises(ExportError, match="is a link"):
        read_export(link)
    monkeypatch.setattr(exports, "MAX_METADATA_BYTES", 10)
    with pytest.raises(ExportError, match="is over"):
        read_export(secret.parent / "export.zip" if False else _zipped(tmp_path, secret))


def _zipped(tmp_path, path):
    archive = tmp_path / "big.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.write(path, exports.METADATA)
    return archive


def test_aliases_deep_nesting_and_odd_values_are_refused_or_read_as_nothing(tmp_path):
    """From the attack round: an alias bomb (a few lines, billions of items), nesting past
    Python's recursion limit, two entries that are the same submission, and values of the
    wrong type where names are read."""
    bomb = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    with pytest.raises(ExportError, match=r"alias \(\*name\)"):
        exports.parse_metadata(bomb)
    with pytest.raises(ExportError, match="nested too deeply"):
        exports.parse_metadata("x: " + "[" * 100_000 + "]" * 100_000)
    with pytest.raises(ExportError, match="two entries are the submission '1'"):
        exports.parse_metadata("1: {}\n'1': {}\n")
    (odd,) = exports.parse_metadata(
        "submission_1:\n  :submitters: 7\n  :created_at: [1, 2]\n  :results: text\n"
    )
    assert odd.submitters == () and odd.created_at == "" and odd.results is None
    (named,) = exports.parse_metadata("s:\n  :submitters:\n  - :name: [a, b]\n    :sid: 12\n")
    assert named.submitters == (Submitter("", "", "12"),)


def test_a_zip_that_cannot_be_read_is_refused_in_words(tmp_path, monkeypatch):
    archive = tmp_path / "e.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr(exports.METADATA, "s: {}\n")

    def refuse(*args, **kwargs):
        raise NotImplementedError("That compression method is not supported")

    monkeypatch.setattr(zipfile.ZipFile, "open", refuse)  # an encrypted or exotic member
    with pytest.raises(ExportError, match="cannot be read as a zip.*compression"):
        read_export(archive)
