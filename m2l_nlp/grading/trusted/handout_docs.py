"""The students' README and Makefile, made by ``make handout`` from the instructor's.

One source for both: in ``README.md`` a block between ``<!-- handout: cut -->`` and
``<!-- handout: end cut -->`` is the instructor's only, and the text of a
``<!-- handout only`` ... ``-->`` comment the students' only (GitHub shows neither marker); in
the ``Makefile`` the same with ``# handout: cut`` / ``# handout: end cut`` lines, and lines that
start ``# handout only: `` are put in, uncommented (so too in ``grading.toml`` and
``pyproject.toml``). The table of Colab links is written again for the handout's own
repository, without the solved notebooks.
"""

from __future__ import annotations

import re

README_CUT = re.compile(r"<!-- handout: cut -->\n.*?<!-- handout: end cut -->\n?", re.S)
README_ONLY = re.compile(r"<!-- handout only\n(.*?)-->\n?", re.S)
MAKE_CUT, MAKE_END, MAKE_ONLY = "# handout: cut", "# handout: end cut", "# handout only: "


class MarkerError(ValueError):
    """A handout marker without its pair; the message names the file."""


def handout_readme(text: str, links: str, begin: str, end: str) -> str:
    """The students' README from the instructor's ``text``; ``links``: the Colab table that
    replaces the block between ``begin`` and ``end``."""
    text = README_ONLY.sub(lambda m: m.group(1), README_CUT.sub("", text))
    if "handout:" in text or "<!-- handout only" in text:
        raise MarkerError("README.md: a `<!-- handout: cut -->` block is not closed")
    table = re.compile(re.escape(begin) + ".*?" + re.escape(end), re.S)
    if not table.search(text):
        raise MarkerError(f"README.md has no {begin!r} ... {end!r} block")
    return table.sub(lambda _: links, text)


def handout_cut(text: str, name: str) -> str:
    """The students' copy of ``text``, a file named ``name`` whose comments start with ``#``
    (the Makefile, ``grading.toml``, ``pyproject.toml``)."""
    kept, cutting = [], False
    for line in text.splitlines():
        if line.strip() == MAKE_CUT:
            if cutting:
                raise MarkerError(f"{name}: `{MAKE_CUT}` inside a cut block")
            cutting = True
        elif line.strip() == MAKE_END:
            if not cutting:
                raise MarkerError(f"{name}: `{MAKE_END}` without `{MAKE_CUT}`")
            cutting = False
        elif not cutting:
            kept.append(line.removeprefix(MAKE_ONLY))
    if cutting:
        raise MarkerError(f"{name}: a `{MAKE_CUT}` block is not closed")
    return "\n".join(kept) + "\n"


def handout_makefile(text: str) -> str:
    """The students' Makefile from the instructor's ``text``."""
    return handout_cut(text, "Makefile")
