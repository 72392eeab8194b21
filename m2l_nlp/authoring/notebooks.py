"""Build the Colab notebooks in ``notebooks/`` from the percent-format ``.py`` practicals.

For every practical ``solutions/<practical>.py``:

- ``exercises/<practical>.py`` (the student stubs) -> ``notebooks/<practical>.ipynb``;
- ``solutions/<practical>.py`` (the reference) -> ``notebooks/<practical>_solved.ipynb``.

A setup cell (``setup_cell.py``) is inserted after the title: in Colab it clones the
repository of ``[project.urls] Repository`` in ``pyproject.toml`` and installs it without
touching Colab's own jax, jaxlib and numpy; anywhere it turns off JAX's GPU memory
preallocation and prints the accelerator it found. The README's table of Colab links is
written from the same setting. Cells written as
``# %% active="ipynb"`` in the ``.py`` (code commented out) are plain code cells in the
notebook and never run on ``import``.

The output is deterministic (no outputs, fixed cell ids and metadata), so ``--check`` can
tell whether a committed notebook is out of date::

    python -m m2l_nlp.authoring.notebooks            # write notebooks/
    python -m m2l_nlp.authoring.notebooks --check    # exit 1 if a notebook differs from its source
"""

from __future__ import annotations

import argparse
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import jupytext
import nbformat

from m2l_nlp.fileio import write_text_atomic
from m2l_nlp.impl import repo_root

BRANCH = "main"
# Where the setup cell clones the repository inside a Colab runtime.
COLAB_CLONE_DIR = "/content/m2l-nlp"
NOTEBOOK_DIR = "notebooks"
SOLVED_SUFFIX = "_solved"
# Cell metadata kept from the .py source; everything else (jupytext bookkeeping) is dropped.
KEPT_CELL_METADATA = ("active", "tags")
SETUP_CELL = Path(__file__).with_name("setup_cell.py")  # the setup cell's source, as code
COLAB_TESTED = Path(__file__).with_name("colab_tested.txt")  # what Colab lacks, tested
BADGE = "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]"
README_BEGIN = "<!-- notebook links: written by `make solutions` from [project.urls] -->"
README_END = "<!-- end of notebook links -->"

SETUP_MARKDOWN = """\
## Setup

[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url})

Run the next cell first. In Google Colab it downloads the course repository and installs it
(this takes a minute; Colab's own `jax` stays as it is). On your own machine it changes
nothing: install the repository once with `pip install -e .` from its root instead.
Either way it tells you which accelerator JAX found. For a GPU in Colab choose
*Runtime > Change runtime type > GPU* before running it."""


def _pyproject(root: Path) -> dict:
    """``pyproject.toml`` of ``root`` (tomllib on Python >= 3.11, else the installed
    package's metadata, which pip wrote from the same file)."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        from importlib.metadata import metadata

        meta = metadata("m2l-nlp")
        urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
        return {"project": {"urls": urls, "dependencies": meta.get_all("Requires-Dist") or []}}
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))


def repo_url(root: Path | None = None) -> str:
    """The student-facing repository: ``[project.urls] Repository`` of ``pyproject.toml``."""
    return _pyproject(root or repo_root())["project"]["urls"]["Repository"]


def jax_floor(root: Path | None = None) -> str:
    """The oldest jax the course supports: the ``jax>=`` floor of ``pyproject.toml``."""
    for requirement in _pyproject(root or repo_root())["project"]["dependencies"]:
        match = re.fullmatch(r"jax\s*>=\s*([0-9.]+).*", requirement.strip())
        if match:
            return match[1]
    raise ValueError("pyproject.toml declares no `jax>=` floor")


@dataclass(frozen=True)
class Target:
    """One notebook to build: ``source`` (a percent-format .py) -> ``notebook``."""

    source: Path
    notebook: Path


def colab_url(notebook: str, repo_url: str, branch: str = BRANCH) -> str:
    """The "Open in Colab" link of ``notebook`` (a path relative to the repository root)."""
    prefix = "https://github.com/"
    if not repo_url.startswith(prefix):
        raise ValueError(f"repo_url must start with {prefix}, got {repo_url!r}")
    slug = repo_url[len(prefix) :].rstrip("/").removesuffix(".git")
    return f"https://colab.research.google.com/github/{slug}/blob/{branch}/{notebook}"


def colab_tested(path: Path = COLAB_TESTED) -> str:
    """What the setup cell installs beside Colab's own packages: the ``name==version`` lines
    of ``colab_tested.txt`` (the versions the simulated Colab of ``make compat-colab`` tested),
    space-separated."""
    lines = (line.split("#")[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    pins = [line for line in lines if line]
    if not pins or not all(re.fullmatch(r"[A-Za-z0-9_.-]+==[0-9][0-9A-Za-z.]*", p) for p in pins):
        raise ValueError(f"{path} should hold name==version lines, got {pins}")
    return " ".join(pins)


def setup_code(
    url: str, clone_dir: str = COLAB_CLONE_DIR, floor: str = "0", tested: str | None = None
) -> str:
    """The source of the setup cell: ``setup_cell.py`` with the repository's URL, the clone
    folder, the jax floor and the tested versions of what Colab lacks filled in."""
    text = SETUP_CELL.read_text(encoding="utf-8")
    settings = (("REPO_URL", url), ("CLONE_DIR", clone_dir), ("JAX_FLOOR", floor))
    for name, value in (*settings, ("TESTED", colab_tested() if tested is None else tested)):
        text, count = re.subn(rf'^{name} = "[^"]*"', f'{name} = "{value}"', text, flags=re.M)
        if count != 1:
            raise ValueError(f"{SETUP_CELL} should set {name} once")
    return text.rstrip("\n")


def targets(root: Path) -> list[Target]:
    """Every notebook to build: two per ``solutions/<practical>.py`` (student and solved)."""
    solutions = root / "solutions"
    if not solutions.is_dir():
        raise FileNotFoundError(
            f"{solutions} is not a folder: run from the repository root or pass --root"
        )
    out = []
    for source in sorted(solutions.glob("*.py")):
        if source.name.startswith("_"):
            continue
        name = source.stem
        out.append(Target(root / "exercises" / source.name, root / NOTEBOOK_DIR / f"{name}.ipynb"))
        out.append(Target(source, root / NOTEBOOK_DIR / f"{name}{SOLVED_SUFFIX}.ipynb"))
    return out


EARLIER_IMPORT = re.compile(r"^from \.(practical\d+_\w+) import", re.M)
EARLIER_MARKDOWN = """\
This practical builds on your {names}. In Colab, upload your notebook of it (as *File >
Download > Download .ipynb* saves it, under its own name) to the files pane on the left, or
mount Drive where Colab keeps it; on your own machine your `exercises/` file is used. The
next cell says which one it found."""
EARLIER_SOLVED_MARKDOWN = """\
This practical builds on {names}. A solved notebook uses the reference solution of it, from
`solutions/`, wherever the notebook is opened. The next cell says which file it found."""


def _earlier_cells(names: list[str], solved: bool = False) -> list[nbformat.NotebookNode]:
    """The cells that make the earlier practicals ``names`` importable in a notebook: the
    reference solutions in a ``solved`` notebook, the student's work in the other."""
    flag = ", solved=True" if solved else ""
    calls = "\n".join(f'use_practical("{name}"{flag})' for name in names)
    shown = ", ".join(f"`{name}`" for name in names)
    markdown = EARLIER_SOLVED_MARKDOWN if solved else EARLIER_MARKDOWN
    return [
        nbformat.v4.new_markdown_cell(markdown.format(names=shown)),
        nbformat.v4.new_code_cell(
            f"from m2l_nlp.grading import use_practical\n\n{calls}", metadata={"active": "ipynb"}
        ),
    ]


def _cell_metadata(cell: nbformat.NotebookNode) -> dict:
    return {k: cell.metadata[k] for k in KEPT_CELL_METADATA if k in cell.metadata}


def build_notebook(
    source: Path, notebook_path: str, repo_url: str, floor: str = "0"
) -> nbformat.NotebookNode:
    """Read a percent-format ``source`` and return its notebook, setup cell included.

    ``notebook_path`` (relative to the repository root) is used for the Colab link.
    """
    if not source.is_file():
        hint = (
            "generate the stubs first: python -m m2l_nlp.authoring.stubs (or make exercises)"
            if source.parent.name == "exercises"
            else "check the path"
        )
        raise FileNotFoundError(f"{source} does not exist: {hint}")
    text = jupytext.read(source, fmt="py:percent")
    cells = []
    for cell in text.cells:
        earlier = EARLIER_IMPORT.findall(cell.source) if cell.cell_type == "code" else []
        if earlier:  # a notebook is no package: the earlier practical comes by name
            cells += _earlier_cells(earlier, solved=source.parent.name == "solutions")
            cell.source = EARLIER_IMPORT.sub(r"from \1 import", cell.source)
        if cell.cell_type == "code":
            new = nbformat.v4.new_code_cell(cell.source, metadata=_cell_metadata(cell))
        elif cell.cell_type == "markdown":
            new = nbformat.v4.new_markdown_cell(cell.source, metadata=_cell_metadata(cell))
        else:
            new = nbformat.v4.new_raw_cell(cell.source, metadata=_cell_metadata(cell))
        cells.append(new)
    setup = [
        nbformat.v4.new_markdown_cell(
            SETUP_MARKDOWN.format(colab_url=colab_url(notebook_path, repo_url))
        ),
        nbformat.v4.new_code_cell(setup_code(repo_url, floor=floor)),
    ]
    at = 1 if cells and cells[0].cell_type == "markdown" else 0
    cells[at:at] = setup
    for index, cell in enumerate(cells):
        cell.id = f"cell-{index:03d}"
    nb = nbformat.v4.new_notebook(cells=cells)
    nb.nbformat, nb.nbformat_minor = 4, 5
    nb.metadata = {
        "accelerator": "GPU",
        "colab": {"name": Path(notebook_path).name, "provenance": [], "toc_visible": True},
        "kernelspec": {"display_name": "Python 3", "language": "python", "name": "python3"},
        "language_info": {"name": "python"},
    }
    nbformat.validate(nb)
    return nb


def render(nb: nbformat.NotebookNode) -> str:
    """The notebook's file text: stable JSON (sorted keys, one-space indent, final newline)."""
    return nbformat.writes(nb, version=4) + "\n"


def readme_links(root: Path, url: str, solved: bool = True) -> str:
    """The README's table of "Open in Colab" links, one row per practical (``solved``: with
    the solved notebooks' column; a handout has none)."""
    stems = ("", SOLVED_SUFFIX) if solved else ("",)
    header = "| practical | exercises | solved |" if solved else "| practical | exercises |"
    rows = [header, "|---" * (len(stems) + 1) + "|"]
    for target in targets(root)[::2]:
        name = target.notebook.stem
        number, _, title = name.removeprefix("practical").partition("_")
        links = [f"{BADGE}({colab_url(f'{NOTEBOOK_DIR}/{name}{s}.ipynb', url)})" for s in stems]
        rows.append(f"| {number}. {title.replace('_', ' ')} | {' | '.join(links)} |")
    return "\n".join([README_BEGIN, *rows, README_END])


def planned(root: Path, url: str | None = None) -> dict[Path, str]:
    """What :func:`main` would write: ``{path: text}`` for every notebook and the README."""
    url = url or repo_url(root)
    floor = jax_floor(root)
    plan = {}
    for target in targets(root):
        relative = target.notebook.relative_to(root).as_posix()
        plan[target.notebook] = render(build_notebook(target.source, relative, url, floor))
    readme = root / "README.md"
    if readme.is_file():
        text = readme.read_text(encoding="utf-8")
        pattern = re.compile(re.escape(README_BEGIN) + ".*?" + re.escape(README_END), re.S)
        if not pattern.search(text):
            raise ValueError(f"README.md has no {README_BEGIN!r} ... {README_END!r} block")
        plan[readme] = pattern.sub(lambda _: readme_links(root, url), text)
    return plan


def drifted(plan: dict[Path, str]) -> list[Path]:
    """The planned notebooks that are missing or differ on disk."""
    return [p for p, text in plan.items() if not p.is_file() or p.read_text("utf-8") != text]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m m2l_nlp.authoring.notebooks",
        description="Write notebooks/*.ipynb from exercises/*.py and solutions/*.py.",
    )
    parser.add_argument("--root", type=Path, default=None, help="repository root")
    parser.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 if a notebook is missing or out of date",
    )
    args = parser.parse_args(argv)
    root = (args.root or repo_root()).resolve()
    try:
        plan = planned(root)
    except (FileNotFoundError, ValueError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    stale = drifted(plan)
    extra = sorted(set((root / NOTEBOOK_DIR).glob("*.ipynb")) - set(plan))  # not generated
    for path in extra:
        print(f"note: {path.relative_to(root)} is not generated from a practical", file=sys.stderr)
    if args.check:
        for path in stale:
            print(f"out of date: {path.relative_to(root)}", file=sys.stderr)
        if stale:
            print(
                "notebooks or README links differ from their sources: run "
                "`python -m m2l_nlp.authoring.notebooks` "
                "(or `make solutions`) and commit the result",
                file=sys.stderr,
            )
            return 1
        print(f"{len(plan)} files (notebooks and README links) up to date")
        return 0
    for path in stale:
        write_text_atomic(path, plan[path])
        print(f"wrote {path.relative_to(root)}")
    print(f"{len(plan)} files (notebooks and README links), {len(stale)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
