"""What ``m2l-nlp predict`` scores: the reviews given as arguments and in files, each
checked to be UTF-8 text that is not empty and not larger than a limit (``--max-mb``),
before any checkpoint is read. A file or standard input is read up to one byte past the
limit and no further, so memory stays proportional to the limit (``/dev/zero`` included)."""

from __future__ import annotations

import sys
from collections.abc import Sequence

MAX_MB = 10  # per review: far beyond any real review (a few kB), far below a machine's memory


class InputError(ValueError):
    """Text given to ``m2l-nlp predict`` that cannot be scored; the message says why."""


def _too_large(name: str, max_mb: int, what: str) -> InputError:
    return InputError(
        f"{name} is larger than {max_mb} MB, the limit for one {what}: pass a shorter text "
        "(the model reads only its first tokens), or raise the limit with --max-mb"
    )


def read_reviews(
    texts: Sequence[str], files: Sequence[str], max_mb: int = MAX_MB, what: str = "review"
) -> list[str]:
    """The reviews to score: ``texts``, then the whole of each file in ``files`` (``-``:
    standard input). Raises :class:`InputError`, naming the review, for one that is not
    UTF-8, cannot be read, is empty or is larger than ``max_mb`` MB (10**6 bytes; a file
    is read no further than that), and when there is none at all. ``what`` names one text
    in the messages (``m2l-nlp translate`` reads sentences)."""
    limit = max_mb * 10**6
    reviews = []
    for i, text in enumerate(texts, 1):
        try:  # the shell's bytes, decoded by Python with surrogates where they were not UTF-8
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError:
            raise InputError(
                f"{what} {i} is not valid UTF-8 text: save it as UTF-8 and pass the file with "
                "--file"
            ) from None
        if size > limit:
            raise _too_large(f"{what} {i}", max_mb, what)
        reviews.append((f"{what} {i}", text))
    for path in files:
        name = "standard input" if path == "-" else path
        try:
            if path == "-":
                raw = sys.stdin.buffer.read(limit + 1)
            else:
                with open(path, "rb") as handle:
                    raw = handle.read(limit + 1)
        except OSError as error:
            raise InputError(f"cannot read {name} ({error.strerror}): check the path") from None
        if len(raw) > limit:
            raise _too_large(name, max_mb, what)
        try:
            reviews.append((name, raw.decode("utf-8")))
        except UnicodeDecodeError:
            raise InputError(
                f"{name} is not UTF-8 text: convert it (e.g. iconv -f latin1 -t utf-8)"
            ) from None
    if not reviews:
        raise InputError(f"nothing to read: give {what}s as arguments or with --file PATH")
    for name, text in reviews:
        if not text or text.isspace():  # no copy of a long review, as strip() would make
            raise InputError(f"{name} is empty: there is nothing to read")
    return [text for _, text in reviews]
