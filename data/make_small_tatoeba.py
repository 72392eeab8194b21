"""Write the bundled excerpt ``data/small/tatoeba-el-en-small.tsv`` of the Tatoeba pairs.

The excerpt is about 3,000 whole lines of the real ``el-en.tsv``, byte for byte (the file's
byte-order mark first, CRLF line ends, file order), chosen as whole connected components of
the sentence graph (:func:`m2l_nlp.data.tatoeba.split_pairs`'s unit), drawn at random with
``--seed``: a split of the excerpt is as leak-free as a split of the whole file.

    python data/make_small_tatoeba.py            # (re)write the excerpt
    python data/make_small_tatoeba.py --check    # fail if the file differs from what it would write

The source is ``$M2L_NLP_TATOEBA`` if set, else ``../shared/data/tatoeba-el-en.tsv``; it must
have the published sha256, so the output depends only on ``--seed`` and ``--pairs``.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

import numpy as np

from m2l_nlp.data import tatoeba
from m2l_nlp.fileio import atomic_file

BOM = b"\xef\xbb\xbf"


def excerpt(raw: bytes, pairs: list[tatoeba.Pair], n_pairs: int, seed: int) -> bytes:
    """The lines of ``raw`` (the real file) of randomly drawn whole components, until they
    hold at least ``n_pairs`` pairs, in file order, with the byte-order mark first."""
    lines = raw.removeprefix(BOM).splitlines(keepends=True)
    assert len(lines) == len(pairs), "one pair per line (the real file has no blank lines)"
    component = tatoeba._components(pairs)
    sizes = np.bincount(component)
    order = np.random.default_rng(seed).permutation(len(sizes))
    taken = order[: int(np.searchsorted(np.cumsum(sizes[order]), n_pairs)) + 1]
    keep = np.isin(component, taken)
    return BOM + b"".join(line for line, k in zip(lines, keep.tolist(), strict=True) if k)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="fail if the file differs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pairs", type=int, default=3000, help="at least this many pairs")
    args = parser.parse_args(argv)
    source = Path(os.environ.get(tatoeba.SOURCE_ENV) or tatoeba.SHARED_PAIRS)
    raw = source.read_bytes()
    if hashlib.sha256(raw).hexdigest() != tatoeba.TATOEBA_SHA256:
        sys.exit(f"{source} is not the published el-en.tsv (sha256 differs)")
    out = excerpt(raw, tatoeba.read_pairs(source), args.pairs, args.seed)
    dest = tatoeba.SMALL_PAIRS
    if args.check:
        if not dest.is_file() or dest.read_bytes() != out:
            print(f"{dest} differs from what make_small_tatoeba.py writes", file=sys.stderr)
            return 1
        print(f"{dest} is up to date")
        return 0
    with atomic_file(dest) as handle:
        handle.write(out)
    n_lines = out.count(b"\n")
    print(f"wrote {dest}: {n_lines} pairs, {len(out):,} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
