"""How much a film-block screen can tell: the noise of one seed's difference between two
recipes, read from the screens recorded in docs/results.md, and what follows from it.

Every film-block table there has a column "vs the adopted recipe" with one difference per
seed (candidate minus the adopted recipe, in points). Their spread around each candidate's
own mean is the noise of one seed's difference. From it this script prints:

- how often the screens' rule passes a candidate whose true gain is g (a simulation with
  that noise: seeds 16-20, stop once behind at two, pass if ahead at 4 or more and the mean
  difference is at least +0.20 points);
- how many seeds a paired comparison needs to find a gain g (one-sided 5 %, power 80 %);
- from the test accuracies given with ``--test`` (the adopted recipe's seeds), the chance
  that the mean of three seeds reaches ``--goal``, for the recipe as it is and for recipes
  better by a little.

    python benchmarks/screen_power.py --test 90.44 90.41 90.36 90.52 90.47 90.17
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
from pathlib import Path

import numpy as np

COLUMN = "vs the adopted recipe"
Z_LEVEL, Z_POWER = 1.6449, 0.8416  # normal quantiles: one-sided 5 % level, 80 % power


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def recorded_differences(text: str) -> list[tuple[str, list[float]]]:
    """(candidate, per-seed differences) for every row of a table with a ``COLUMN`` column
    that gives at least two signed differences (``-0.40 / +0.18 / ...``)."""
    lines = text.splitlines()
    found = []
    for i, header in enumerate(lines):
        if not header.startswith("|"):
            continue
        column = next((k for k, c in enumerate(_cells(header)) if c.startswith(COLUMN)), None)
        if column is None:
            continue
        for row in lines[i + 2 :]:
            if not row.startswith("|"):
                break
            values = _cells(row)
            signed = re.findall(r"[-+]\d+\.\d+", values[column].split("(")[0])
            if len(signed) >= 2:
                found.append((values[0], [float(v) for v in signed]))
    return found


def within_sd(groups: list[list[float]]) -> float:
    """Pooled standard deviation of each group's values around the group's own mean."""
    squares = sum((x - statistics.mean(g)) ** 2 for g in groups for x in g)
    return math.sqrt(squares / sum(len(g) - 1 for g in groups))


def rule_passes(diffs: np.ndarray, least_ahead: int = 4, least_mean: float = 0.20) -> np.ndarray:
    """The screens' rule on rows of per-seed differences ``(N, seeds)``: stopped once behind
    at two seeds, else passed if ahead at ``least_ahead`` or more with a mean of at least
    ``least_mean``."""
    behind = np.cumsum(diffs < 0, axis=1)
    stopped = (behind >= 2).any(axis=1)
    ahead = (diffs > 0).sum(axis=1)
    return ~stopped & (ahead >= least_ahead) & (diffs.mean(axis=1) >= least_mean)


def chance_of_mean_at_least(goal: float, mean: float, sd: float, n: int) -> float:
    """P(mean of n draws from N(mean, sd) >= goal)."""
    z = (goal - mean) / (sd / math.sqrt(n))
    return 0.5 * math.erfc(z / math.sqrt(2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=Path("docs/results.md"))
    parser.add_argument(
        "--test",
        type=float,
        nargs="*",
        default=[],
        help="test accuracies (%%) of the adopted recipe, one per seed and run",
    )
    parser.add_argument("--goal", type=float, default=90.5, help="goal for the mean of 3 seeds")
    parser.add_argument("--seeds", type=int, default=5, help="seeds of a screen")
    parser.add_argument("--draws", type=int, default=100_000)
    args = parser.parse_args()

    try:
        text = args.results.read_text(encoding="utf-8")
    except OSError as err:
        raise SystemExit(
            f"error: cannot read {args.results} ({err.strerror}): run from the "
            "repository root or pass --results docs/results.md"
        ) from None
    rows = recorded_differences(text)
    if len(rows) < 2:
        raise SystemExit(
            f"error: fewer than two screens with a '{COLUMN}' column in {args.results}"
        )
    for name, diffs in rows:
        print(f"{name[:44]:44s} {' '.join(f'{d:+.2f}' for d in diffs)}")
    groups = [d for _, d in rows]
    every = [x for g in groups for x in g]
    noise = within_sd(groups)
    print(
        f"\n{len(rows)} screens, {len(every)} per-seed differences: "
        f"mean {statistics.mean(every):+.2f}, "
        f"sd {statistics.stdev(every):.2f}; around each candidate's own mean (the noise of one "
        f"seed's difference): sd {noise:.2f}"
    )

    rng = np.random.default_rng(0)
    print(
        f"\nthe rule ({args.seeds} seeds), simulated with that noise ({args.draws:,} screens each):"
    )
    for gain in (0.0, 0.1, 0.2, 0.3, 0.5):
        passed = rule_passes(rng.normal(gain, noise, (args.draws, args.seeds))).mean()
        print(f"  true gain {gain:+.1f} points: passes {100 * passed:4.1f} % of screens")
    print("seeds a paired comparison needs (one-sided 5 %, power 80 %):")
    for gain in (0.1, 0.2, 0.3):
        seeds = math.ceil(((Z_LEVEL + Z_POWER) * noise / gain) ** 2)
        print(f"  to find a gain of {gain:+.1f} points: {seeds} seeds")

    if len(args.test) >= 2:
        mean, sd = statistics.mean(args.test), statistics.stdev(args.test)
        print(
            f"\ntest accuracy of the adopted recipe, {len(args.test)} runs: mean {mean:.2f} %, "
            f"sd {sd:.2f}"
        )
        for gain in (0.0, 0.1, 0.15, 0.2):
            p = chance_of_mean_at_least(args.goal, mean + gain, sd, 3)
            print(
                f"  a recipe {gain:+.2f} points better: the mean of 3 seeds reaches "
                f"{args.goal} % with a chance of {100 * p:.0f} %"
            )


if __name__ == "__main__":
    main()
