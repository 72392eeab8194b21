"""Run notebooks as a student in Colab would: ``python .ci/colab_notebooks.py WORK NB...``.

Each notebook runs top to bottom in a fresh kernel of this interpreter, with a stand-in
``google.colab`` module imported at kernel start (Colab preloads the real one), so the setup
cell takes its Colab path: it clones ``$M2L_NLP_REPO_URL`` into ``$M2L_NLP_CLONE_DIR`` and
installs it beside the runtime's own jax. Fails on the first error, and unless every
``check(...)`` cell says "passed".
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import nbformat
from nbclient import NotebookClient

STAND_IN = """
import sys, types
colab = types.ModuleType("google.colab")
colab.output = types.ModuleType("google.colab.output")  # jax looks for it in Colab
sys.modules.update({"google.colab": colab, "google.colab.output": colab.output})
"""


def main(work: Path, notebooks: list[Path]) -> int:
    startup = work / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-google-colab.py").write_text(STAND_IN)
    os.environ["IPYTHONDIR"] = str(work / "ipython")
    for path in notebooks:
        nb = nbformat.read(path, as_version=4)
        client = NotebookClient(
            nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(work)}}
        )
        client.execute()
        code = [cell for cell in nb.cells if cell.cell_type == "code"]
        printed = ["".join(out.get("text", "") for out in cell.outputs) for cell in code]
        if "device(s)" not in printed[0] or not os.path.isdir(os.environ["M2L_NLP_CLONE_DIR"]):
            raise SystemExit(f"{path.name}: the setup cell did not take its Colab path")
        for cell, text in zip(code, printed, strict=True):
            if cell.source.startswith("check(") and ": passed" not in text:
                raise SystemExit(f"{path.name}: {cell.source!r} did not pass: {text}")
        print(f"{path.name}: ran in a simulated Colab ({len(code)} code cells)")
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), [Path(p) for p in sys.argv[2:]]))
