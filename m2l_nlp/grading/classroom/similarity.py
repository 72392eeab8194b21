"""Which submissions are alike enough to be read side by side: copydetect's fingerprints
(winnowing, MOSS's method; names, strings and comments left out, so renamed identifiers do not
hide a copy) of each student's code (its Python files and notebooks), the handout's stubs and
notebooks as boilerplate, so that the starter code everyone shares counts for nothing.

A pair above the threshold is a lead to read, not a verdict: short exercises leave few ways to
write them, and students may work from the same lecture.
"""

from __future__ import annotations

import io
import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

NOISE = 25  # tokens: a shared run shorter than this is never counted
GUARANTEE = 30  # tokens: a shared run this long is always found
MAX_FILES = 200  # a submission's files read, at most
MAX_BYTES = 20 << 20  # and bytes
LEAD = "Similarity is a lead to read, not a verdict: read each pair before you ask anyone."


@dataclass(frozen=True)
class Pair:
    """Two submissions and the share of each one's fingerprints found in the other;
    ``shared``: the longest passages they share, side by side (``first``'s, ``second``'s)."""

    first: str
    second: str
    similarity: tuple[float, float]
    shared: list[tuple[str, str]]

    @property
    def score(self) -> float:
        return max(self.similarity)


def code_of(folder: Path) -> str:
    """A submission's code: every ``.py`` file and every notebook's code cells, under
    ``folder`` at any depth, in path order; no link followed, at most :data:`MAX_FILES` files
    and :data:`MAX_BYTES` read."""
    found = []
    for parent, folders, files in os.walk(folder):  # links to folders are not walked
        folders.sort()
        for name in files:
            path = Path(parent) / name
            if path.suffix.lower() in (".py", ".ipynb") and not path.is_symlink():
                found.append(path)
    parts, left = [], MAX_BYTES
    for path in sorted(found)[:MAX_FILES]:
        with open(path, "rb") as handle:
            data = handle.read(left)
        left -= len(data)
        text = data.decode("utf-8", errors="replace")
        parts.append(notebook_code(text) if path.suffix.lower() == ".ipynb" else text)
    return "\n".join(parts)


def notebook_code(text: str) -> str:
    """The code cells of a notebook's JSON, in order ("" for what is not a notebook)."""
    try:
        cells = json.loads(text).get("cells", [])
    except (ValueError, AttributeError, RecursionError):
        return ""
    code = []
    for cell in cells if isinstance(cells, list) else []:
        if isinstance(cell, dict) and cell.get("cell_type") == "code":
            source = cell.get("source", "")
            code.append("".join(source) if isinstance(source, list) else str(source))
    return "\n".join(code)


def _fingerprint(code: str, boilerplate: list[int] | None = None):
    from copydetect import CodeFingerprint

    window = GUARANTEE - NOISE + 1
    return CodeFingerprint("x.py", NOISE, window, boilerplate, fp=io.StringIO(code))


def similar_pairs(
    codes: dict[str, str], stubs: list[str], threshold: float = 0.5, detail: int = 50
) -> list[Pair]:
    """Every pair of ``codes`` (submission -> code) where the share of either one's
    fingerprints found in the other reaches ``threshold``, the most alike first; ``stubs``:
    the starter code, left out. The ``detail`` most alike get their shared passages (the
    costly part: copydetect's comparison of two files)."""
    from copydetect import compare_files

    boilerplate = sorted({h for stub in stubs for h in _fingerprint(stub).hashes})
    prints = {name: _fingerprint(code, boilerplate) for name, code in codes.items() if code}
    hashes = {name: set(p.hashes) for name, p in prints.items() if len(p.hashes)}
    pairs = []
    for a, b in itertools.combinations(sorted(hashes), 2):
        common = len(hashes[a] & hashes[b])
        shares = (common / len(hashes[a]), common / len(hashes[b]))
        if max(shares) >= threshold:
            pairs.append(Pair(a, b, shares, []))
    pairs.sort(key=lambda p: -p.score)
    for i, pair in enumerate(pairs[:detail]):
        _, _, slices = compare_files(prints[pair.first], prints[pair.second])
        pairs[i] = Pair(
            pair.first,
            pair.second,
            pair.similarity,
            _passages(codes, pair.first, pair.second, slices),
        )
    return pairs


def _passages(
    codes: dict[str, str], a: str, b: str, slices, most: int = 5
) -> list[tuple[str, str]]:
    """The ``most`` longest shared passages of each side, paired in order of length."""

    def longest(code: str, spans) -> list[str]:
        starts, ends = spans
        found = sorted(zip(starts, ends, strict=True), key=lambda s: s[0] - s[1])[:most]
        return [code[int(s) : int(e)] for s, e in found]

    left, right = longest(codes[a], slices[0]), longest(codes[b], slices[1])
    return list(itertools.zip_longest(left, right, fillvalue=""))


def write_pairs(pairs: list[Pair], folder: Path, threshold: float) -> list[Path]:
    """``similar.md`` and ``similar.html`` (the shared passages side by side, every text
    escaped) in ``folder``; returns their paths."""
    import html

    from m2l_nlp.fileio import atomic_file

    folder.mkdir(parents=True, exist_ok=True)
    head = f"Pairs whose shared code reaches {threshold:.0%} of either side. {LEAD}"
    lines = ["# Similar submissions", "", head, ""]
    page = [
        "<!doctype html><html><head><meta charset='utf-8'><title>Similar submissions</title>",
        "<style>body{font-family:sans-serif}td{vertical-align:top;border:1px solid #ccc}"
        "pre{margin:0;white-space:pre-wrap}</style></head><body>",
        f"<h1>Similar submissions</h1><p>{html.escape(head)}</p>",
    ]
    if not pairs:
        lines.append("No pair reaches the threshold.")
        page.append("<p>No pair reaches the threshold.</p>")
    for pair in pairs:
        title = (
            f"{pair.first} ~ {pair.second}: {pair.similarity[0]:.0%} of the first's code, "
            f"{pair.similarity[1]:.0%} of the second's"
        )
        lines += [f"## {title}", ""]
        page.append(f"<h2>{html.escape(title)}</h2><table>")
        for left, right in pair.shared:
            for name, text in ((pair.first, left), (pair.second, right)):
                fence = "`" * max([3, *(len(run) + 1 for run in re.findall("`+", text))])
                lines += [f"{name}:", "", f"{fence}python", text, fence, ""]
            cells = "".join(f"<td><pre>{html.escape(t)}</pre></td>" for t in (left, right))
            page.append(f"<tr>{cells}</tr>")
        page.append("</table>")
    page.append("</body></html>")
    paths = [folder / "similar.md", folder / "similar.html"]
    for path, text in zip(paths, ("\n".join(lines) + "\n", "\n".join(page) + "\n"), strict=True):
        with atomic_file(path, "w", encoding="utf-8") as handle:
            handle.write(text)
    return paths
