"""What ``m2l-nlp predict`` scores: the reviews given as arguments and in files, each
checked to be UTF-8 text that is not empty, before any checkpoint is read."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path


class InputError(ValueError):
    """Text given to ``m2l-nlp predict`` that cannot be scored; the message says why."""


def read_reviews(texts: Sequence[str], files: Sequence[str]) -> list[str]:
    """The reviews to score: ``texts``, then the whole of each file in ``files`` (``-``:
    standard input). Raises :class:`InputError`, naming the review, for one that is not
    UTF-8, cannot be read or is empty, and when there is none at all."""
    reviews = []
    for i, text in enumerate(texts, 1):
        try:  # the shell's bytes, decoded by Python with surrogates where they were not UTF-8
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise InputError(
                f"review {i} is not valid UTF-8 text: save it as UTF-8 and pass the file with "
                "--file"
            ) from None
        reviews.append((f"review {i}", text))
    for path in files:
        name = "standard input" if path == "-" else path
        try:
            raw = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
        except OSError as error:
            raise InputError(f"cannot read {name} ({error.strerror}): check the path") from None
        try:
            reviews.append((name, raw.decode("utf-8")))
        except UnicodeDecodeError:
            raise InputError(
                f"{name} is not UTF-8 text: convert it (e.g. iconv -f latin1 -t utf-8)"
            ) from None
    if not reviews:
        raise InputError("nothing to score: give reviews as arguments or with --file PATH")
    for what, text in reviews:
        if not text.strip():
            raise InputError(f"{what} is empty: there is nothing to score")
    return [text for _, text in reviews]
