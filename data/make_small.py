"""Write the small bundled dataset ``data/small/aclImdb`` (synthetic movie reviews).

The reviews are made up by this script from templates: neutral sentences about a film,
sentiment sentences (with negations such as "not boring at all" in positive reviews and
"not funny in the slightest" in negative ones, so single words are not enough), an
occasional sentence that goes against the review's overall sentiment, HTML line breaks
``<br /><br />`` between paragraphs like the real IMDB, and a closing verdict. Files are named
``<id>_<rating>.txt`` (ratings 7-10 positive, 1-4 negative) in the aclImdb layout.

    python data/make_small.py            # (re)write data/small/aclImdb
    python data/make_small.py --check    # fail if the files differ from what it would write

The output depends only on ``--seed``, so it is reproducible byte for byte.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
OUT = HERE / "small" / "aclImdb"
COUNTS = {"train": 500, "test": 250}  # per label

TITLE_A = "Silent Broken Last Golden Hidden Crimson Lonely Frozen Endless Wild".split()
TITLE_B = "Harbor Summer Letter Kingdom River Witness Garden Signal Frontier Orchard".split()
GENRES = ["drama", "comedy", "thriller", "western", "horror film", "romance", "war film"]
WHO = ["my sister", "a friend", "my parents", "the whole family", "nobody", "my roommate"]
WHEN = ["night", "weekend", "Sunday", "month", "summer"]
ASPECTS = [
    "acting",
    "plot",
    "script",
    "music",
    "soundtrack",
    "camera work",
    "dialogue",
    "ending",
    "pacing",
    "cast",
    "direction",
    "cinematography",
    "story",
    "lead actress",
    "villain",
]
POS = [
    "brilliant",
    "wonderful",
    "superb",
    "moving",
    "gripping",
    "delightful",
    "excellent",
    "charming",
    "clever",
    "beautiful",
    "outstanding",
    "touching",
    "great",
    "fantastic",
]
NEG = [
    "awful",
    "boring",
    "dull",
    "terrible",
    "clumsy",
    "tedious",
    "predictable",
    "weak",
    "pointless",
    "lifeless",
    "bad",
    "forgettable",
    "annoying",
    "poor",
]
INTENS = ["really", "truly", "very", "quite", "simply", "absolutely"]

NEUTRAL = [
    "I watched {title} last {when} with {who}.",
    "{title} is a {genre} from {year}.",
    "I went into {title} knowing almost nothing about it.",
    "The film runs for about {minutes} minutes.",
    "It was shown on TV late at night.",
    "The story takes place in a small town by the sea.",
    "Most of it was filmed in {place}.",
    "I had read the book before seeing the film.",
    "The director also wrote the script.",
    "It is the kind of {genre} they do not make any more.",
]
PLACES = ["Canada", "Spain", "a studio in London", "the desert", "New York", "Ireland"]

SENTIMENT = {
    1: [
        "The {aspect} was {pos}.",
        "The {aspect} is {intens} {pos}.",
        "I loved the {aspect}.",
        "What a {pos} {genre}!",
        "It was not {neg} at all.",
        "The {aspect} is never {neg} for a second.",
        "Everyone I know who saw it thought it was {pos}.",
        "I was surprised by how {pos} the {aspect} was.",
        "I could not stop smiling.",
        "I did not expect it to be this {pos}.",
    ],
    0: [
        "The {aspect} was {neg}.",
        "The {aspect} is {intens} {neg}.",
        "I hated the {aspect}.",
        "What a {neg} {genre}.",
        "It was not {pos} in the slightest.",
        "The {aspect} is never {pos}, not even once.",
        "Nobody I know who saw it liked it.",
        "I was surprised by how {neg} the {aspect} was.",
        "I almost fell asleep.",
        "I did not expect it to be this {neg}.",
    ],
}
AGAINST = {  # one sentence of the opposite sentiment, then a turn back
    1: "The {aspect} was a little {neg}, but that hardly matters.",
    0: "The {aspect} was {pos}, but that could not save it.",
}
CLOSING = {
    1: [
        "{score}/10, I would happily watch it again.",
        "Highly recommended.",
        "Go and see it.",
        "One of the best films I have seen this year.",
    ],
    0: [
        "{score}/10. Save your money.",
        "Avoid it.",
        "Not recommended.",
        "One of the worst films I have seen this year.",
    ],
}


def review(rng: random.Random, label: int) -> tuple[str, int]:
    """One made-up review and its rating (7-10 if ``label`` is 1, else 1-4)."""
    rating = rng.randint(7, 10) if label else rng.randint(1, 4)
    fill = {
        "title": f"The {rng.choice(TITLE_A)} {rng.choice(TITLE_B)}",
        "genre": rng.choice(GENRES),
        "who": rng.choice(WHO),
        "when": rng.choice(WHEN),
        "year": rng.randint(1950, 2010),
        "minutes": rng.randrange(80, 180, 5),
        "place": rng.choice(PLACES),
        "score": rating,
    }

    def say(template: str) -> str:
        return template.format(
            **fill,
            aspect=rng.choice(ASPECTS),
            pos=rng.choice(POS),
            neg=rng.choice(NEG),
            intens=rng.choice(INTENS),
        )

    paragraphs = []
    intro = [say(t) for t in rng.sample(NEUTRAL, rng.randint(1, 3))]
    paragraphs.append(" ".join(intro))
    body = [say(t) for t in rng.sample(SENTIMENT[label], rng.randint(2, 4))]
    if rng.random() < 0.3:
        body.insert(rng.randrange(len(body) + 1), say(AGAINST[label]))
    if rng.random() < 0.5:
        body.insert(rng.randrange(len(body) + 1), say(rng.choice(NEUTRAL)))
    paragraphs.append(" ".join(body))
    paragraphs.append(say(rng.choice(CLOSING[label])))
    return "<br /><br />".join(paragraphs), rating


def write(out: Path, seed: int) -> None:
    """Write the dataset to ``out`` (a temporary folder renamed at the end)."""
    rng = random.Random(seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=out.parent, prefix=".aclImdb-"))
    try:
        for split, n in COUNTS.items():
            for name, label in (("pos", 1), ("neg", 0)):
                folder = tmp / split / name
                folder.mkdir(parents=True)
                for i in range(n):
                    text, rating = review(rng, label)
                    (folder / f"{i}_{rating}.txt").write_text(text, encoding="utf-8")
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def differences(a: Path, b: Path) -> list[str]:
    """Relative paths of the files that differ between folders ``a`` and ``b``."""
    files_a = {p.relative_to(a) for p in a.rglob("*") if p.is_file()}
    files_b = {p.relative_to(b) for p in b.rglob("*") if p.is_file()}
    diff = sorted(str(p) for p in files_a ^ files_b)
    diff += sorted(
        str(p) for p in files_a & files_b if (a / p).read_bytes() != (b / p).read_bytes()
    )
    return diff


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT, help="where to write aclImdb/")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--check", action="store_true", help="only compare with --out")
    args = parser.parse_args(argv)
    if args.check:
        with tempfile.TemporaryDirectory() as tmp:
            fresh = Path(tmp) / "aclImdb"
            write(fresh, args.seed)
            diff = differences(fresh, args.out)
        if diff:
            print(
                f"{args.out} differs from the generator in {len(diff)} files, e.g. {diff[:3]};"
                " run `python data/make_small.py` to rewrite it",
                file=sys.stderr,
            )
            return 1
        print(f"{args.out} is up to date")
        return 0
    write(args.out, args.seed)
    print(f"wrote {sum(COUNTS.values()) * 2} reviews to {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
