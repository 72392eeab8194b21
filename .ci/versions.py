"""The package versions of the compatibility lanes (.ci/compat.sh): Colab's, the tested ones,
the newest that last passed. ``python .ci/versions.py COMMAND ...``:

  tree                        the course's runtime dependency tree as installed in this
                              interpreter (pip freeze form, one a line)
  colab-constraints           Colab's versions (.ci/colab-pip-freeze.txt) as pip constraints,
                              the CUDA plugins aside
  colab-preinstalled REPORT   of the packages in a ``pip install --dry-run --report`` REPORT, the
                              ones Colab preinstalls, at Colab's versions
  colab-check PREINSTALLED    pip freeze check after the setup cell: every package of
                              PREINSTALLED kept at Colab's version, and only what Colab lacks
                              added (the tested pins of m2l_nlp/authoring/colab_tested.txt, the
                              course, the lane's test tools); exit 1 otherwise
  newest-check (passed|failed) compare the tree with .ci/newest-passed.txt: after a pass,
                              record it; after a failure, say which packages moved (from -> to)
  refresh [FILE --commit SHA --date DATE]   rewrite .ci/colab-pip-freeze.txt from Colab's
                              published list (downloaded when FILE is not given)
  gradescope-lock PYTHON      write the versions the autograder installs for Python PYTHON
                              (3.10, say) from pip's resolution of the course's dependencies

COLAB_RUNTIME=previous: the Colab commands read and write .ci/colab-previous-pip-freeze.txt,
Colab's previous runtime (users may pin it), instead.

Only the standard library here, except ``tree`` (``packaging``, in every lane's tree).
"""

from __future__ import annotations

import json
import os
import re
import sys
import urllib.request
from pathlib import Path

CI = Path(__file__).resolve().parent
COLAB_FREEZE = CI / (
    "colab-previous-pip-freeze.txt"
    if os.environ.get("COLAB_RUNTIME") == "previous"
    else "colab-pip-freeze.txt"
)
COLAB_TESTED = CI.parent / "m2l_nlp" / "authoring" / "colab_tested.txt"
NEWEST_PASSED = CI / "newest-passed.txt"
# What the autograder's setup.sh installs, one file per Python (python3.10.txt, ...)
GRADESCOPE_LOCKS = CI.parent / "m2l_nlp" / "grading" / "trusted" / "gradescope"
COLAB_SOURCE = "https://raw.githubusercontent.com/googlecolab/backend-info/main/pip-freeze.gpu.txt"
CUDA_PLUGINS = re.compile(r"jax-cuda\d+-(plugin|pjrt)")
COURSE = "m2l-nlp"


def norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def pins(path: Path) -> dict[str, str]:
    """``{name: version}`` of the ``name==version`` lines of a pip freeze or constraints file."""
    out = {}
    for line in path.read_text().splitlines():
        match = re.fullmatch(r"\s*([A-Za-z0-9_.-]+)\s*==\s*(\S+)\s*", line.split("#")[0])
        if match:
            out[norm(match[1])] = match[2]
    return out


def colab() -> dict[str, str]:
    return {n: v for n, v in pins(COLAB_FREEZE).items() if not CUDA_PLUGINS.fullmatch(n)}


def tree() -> dict[str, str]:
    """``{name: version}`` of m2l-nlp's runtime dependencies, transitively, as installed."""
    import importlib.metadata as md

    from packaging.requirements import Requirement

    found: dict[str, str] = {}
    todo = [(COURSE, frozenset())]
    while todo:
        name, extras = todo.pop()
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        found[norm(name)] = dist.version
        for text in dist.requires or []:
            req = Requirement(text)
            wanted = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker and not any(req.marker.evaluate(env) for env in wanted):
                continue
            if norm(req.name) not in found:
                todo.append((req.name, frozenset(req.extras)))
    found.pop(COURSE)
    return dict(sorted(found.items()))


def freeze_lines(versions: dict[str, str]) -> str:
    return "".join(f"{name}=={version}\n" for name, version in sorted(versions.items()))


def colab_preinstalled(report: Path) -> dict[str, str]:
    planned = {norm(p["metadata"]["name"]) for p in json.loads(report.read_text())["install"]}
    return {name: v for name, v in colab().items() if name in planned}


def installed() -> dict[str, str]:
    import importlib.metadata as md

    return {norm(d.metadata["Name"]): d.version for d in md.distributions()}


def colab_check(preinstalled: Path, before: Path) -> int:
    """After the setup cell: every package Colab has at Colab's version, and what the cell
    added (against ``before``, the freeze taken before it ran) only the tested pins of what
    Colab lacks and the course itself."""
    now, kept, tested, colab_versions = installed(), pins(preinstalled), pins(COLAB_TESTED), colab()
    problems = [
        f"{name} {now.get(name, 'removed')} (Colab has {colab_versions[name]})"
        for name in sorted(set(kept) | (set(now) & set(colab_versions)))
        if now.get(name) != colab_versions[name]
    ]
    added = {n: v for n, v in now.items() if pins(before).get(n) != v}
    for name, version in sorted(added.items()):
        if name in tested and tested[name] != version:
            problems.append(f"{name} {version} (the setup cell pins {tested[name]})")
        elif name not in tested and name != COURSE:
            problems.append(f"{name} {version} was added by the setup cell, untested")
    print(f"pip freeze check: {len(kept)} of Colab's packages in the course's tree kept")
    for name, version in sorted(added.items()):
        why = "tested pin" if name in tested else "the course" if name == COURSE else "?"
        print(f"  added by the setup cell: {name}=={version} ({why})")
    runner = {n: v for n, v in pins(before).items() if n not in colab_versions}
    print("  the lane's, which Colab lacks: " + " ".join(f"{n}=={v}" for n, v in runner.items()))
    for problem in problems:
        print(f"  NOT AS IN COLAB: {problem}", file=sys.stderr)
    return 1 if problems else 0


def newest_check(outcome: str) -> int:
    now = tree()
    now["python"] = ".".join(map(str, sys.version_info[:3]))
    before = pins(NEWEST_PASSED) if NEWEST_PASSED.exists() else {}
    moved = [
        f"{name} {before.get(name, '(new)')} -> {now.get(name, '(gone)')}"
        for name in sorted(set(now) | set(before))
        if before.get(name) != now.get(name)
    ]
    if outcome == "failed":
        print(
            "compat newest FAILED with the newest releases; since the last pass (recorded in "
            f".ci/{NEWEST_PASSED.name}) these moved:",
            file=sys.stderr,
        )
        for line in moved or ["nothing (the break is in the course's own code)"]:
            print(f"  {line}", file=sys.stderr)
        print(
            "Fix the code for the new release, or bound the package below it in "
            "pyproject.toml (and say so in the commit).",
            file=sys.stderr,
        )
        return 1
    header = (
        "# The newest release of every dependency that last passed `make compat-newest`\n"
        "# (written by the lane after a pass: commit it).\n"
    )
    NEWEST_PASSED.write_text(header + freeze_lines(now))
    if moved:
        print(f"compat newest: moved since the last pass (commit .ci/{NEWEST_PASSED.name}):")
        for line in moved:
            print(f"  {line}")
    return 0


def refresh(args: list[str]) -> int:
    if args:
        text = Path(args[0]).read_text()
        options = dict(zip(args[1::2], args[2::2], strict=False))
        commit, date = options.get("--commit", "?"), options.get("--date", "?")
        source = "github.com/googlecolab/backend-info, pip-freeze.gpu.txt"
    else:
        with urllib.request.urlopen(COLAB_SOURCE, timeout=60) as reply:
            text = reply.read().decode()
        import datetime

        commit, date = "main", f"{datetime.date.today()} (downloaded)"
        source = COLAB_SOURCE
    head = [line for line in COLAB_FREEZE.read_text().splitlines() if line.startswith("#")]
    head = [
        f"# source: {source}"
        if line.startswith("# source:")
        else f"# commit: {commit}"
        if line.startswith("# commit:")
        else f"# date:   {date}"
        if line.startswith("# date:")
        else line
        for line in head
    ]
    body = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    COLAB_FREEZE.write_text("\n".join(head + body) + "\n")
    lane = "colab-previous" if COLAB_FREEZE.name.startswith("colab-previous") else "colab"
    print(f"{COLAB_FREEZE}: {len(body)} packages; now run `make compat-{lane}` and commit")
    return 0


def gradescope_lock(python: str) -> int:
    """Write the lock of ``python``'s version: what pip picks today for the course's runtime
    dependencies (pyproject.toml), resolved by that Python itself so that every marker holds."""
    import subprocess
    import tempfile

    import tomllib

    project = tomllib.loads((CI.parent / "pyproject.toml").read_text())["project"]
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([python, "-m", "venv", f"{tmp}/env"], check=True)
        py = f"{tmp}/env/bin/python"
        subprocess.run([py, "-m", "pip", "install", "-q", "--upgrade", "pip"], check=True)
        report = Path(tmp) / "report.json"
        subprocess.run(
            [py, "-m", "pip", "install", "-q", "--dry-run", "--ignore-installed"]
            + ["--report", str(report), *project["dependencies"]],
            check=True,
        )
        version = subprocess.run(
            [py, "-c", "import platform; print(platform.python_version())"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        planned = json.loads(report.read_text())["install"]
    versions = {norm(p["metadata"]["name"]): p["metadata"]["version"] for p in planned}
    minor = ".".join(version.split(".")[:2])
    lock = GRADESCOPE_LOCKS / f"python{minor}.txt"
    import datetime

    lock.write_text(
        f"# What the autograder's setup.sh installs into a Python {minor} (pip's choice on "
        f"{datetime.date.today()}, Python {version}),\n"
        "# tested by `make test-slow` (tests/e2e/test_autograder_on_gradescope.py). Refresh: "
        f"python .ci/versions.py gradescope-lock python{minor}\n" + freeze_lines(versions)
    )
    print(f"{lock}: {len(versions)} packages; now run `make test-slow` and commit")
    return 0


def main(argv: list[str]) -> int:
    command, args = argv[0], argv[1:]
    if command == "tree":
        sys.stdout.write(freeze_lines(tree()))
    elif command == "colab-constraints":
        sys.stdout.write(freeze_lines(colab()))
    elif command == "colab-preinstalled":
        sys.stdout.write(freeze_lines(colab_preinstalled(Path(args[0]))))
    elif command == "installed":
        sys.stdout.write(freeze_lines(installed()))
    elif command == "colab-check":
        return colab_check(Path(args[0]), Path(args[1]))
    elif command == "newest-check":
        return newest_check(args[0])
    elif command == "refresh":
        return refresh(args)
    elif command == "gradescope-lock":
        return gradescope_lock(args[0])
    else:
        raise SystemExit(__doc__)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
