#!/usr/bin/env bash
# The compatibility environments of `make compat` (CI runs them after `make test`):
#   floors  the oldest supported Python, every runtime dependency at its pyproject floor
#   colab   Colab's runtime: Python 3.13, jax and jaxlib 0.7.2 installed first and kept, the
#           course installed by the notebooks' own setup cell from a file:// clone
# Each runs the graded suite against the solutions, the tests of the checks' messages, the
# library tests of the training loop and the demo training; colab also runs every solved
# notebook. FLOORS_PYTHON / COLAB_PYTHON name other interpreters.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:?usage: .ci/compat.sh floors|colab}
envs=$root/.compat
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1

pyenv_python() {  # the newest pyenv interpreter of a minor version, e.g. 3.10
  local found
  found=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$1".*/bin/python 2>/dev/null | tail -n 1)
  [ -n "$found" ] || { echo "compat: no Python $1 (set ${2}=/path/to/python$1)" >&2; exit 2; }
  echo "$found"
}

pip_install() {  # pip_install ENV ARGS...: quiet; pip's output is shown only if it fails
  # byte-compiled by compileall on every core, not by pip on one (as in the Makefile)
  if ! "$envs/$1/bin/python" -m pip install -q --no-compile "${@:2}" > "$work/pip.log" 2>&1; then
    grep -v "^WARNING: Location" "$work/pip.log" >&2
    return 1
  fi
  "$envs/$1/bin/python" -m compileall -q -j 0 -x "/tests?/" "$envs/$1/lib" > /dev/null || true
}

new_env() {  # new_env NAME PYTHON: a fresh virtual environment under .compat/
  rm -rf "${envs:?}/$1"
  "$2" -m venv "$envs/$1"
  pip_install "$1" --upgrade pip
}

graded_and_demo() {  # graded_and_demo ENV FOLDER: the graded suite and the demo run in FOLDER
  local py=$envs/$1/bin/python
  (cd "$2" && "$py" -m pytest tests/graded --impl solutions -q -p no:cacheprovider)
  # what a student reads: the checks' hints follow JAX's own errors, whose words change
  # between versions (the .T hint once matched only the newer words); and the device the
  # checks run on (11 s of the 72 that these two files take in all)
  (cd "$2" && "$py" -m pytest tests/test_grading.py tests/test_devices.py --impl solutions \
      -q -p no:cacheprovider -m "not slow" -k "hint or words or message or cpu or device")
  # the loop and what it leans on, where JAX's API moves between versions: sharding, buffer
  # donation, lax.scan, the persistent compilation cache and its count, haiku's transform,
  # checkpoints (about 40 s)
  (cd "$2" && "$py" -m pytest tests/test_training.py tests/test_batching.py \
      tests/test_evaluation.py tests/test_optim.py tests/test_transform.py \
      tests/test_checkpoint.py --impl solutions -q -p no:cacheprovider -m "not slow")
  (cd "$2" && "$py" -m m2l_nlp.cli train --data small --no-progress --out "$work/demo" \
      --cache-dir "$work/cache")
  "$py" - "$work/demo/metrics.json" <<'PY'
import json, sys
accuracy = json.load(open(sys.argv[1]))["test_accuracy"]
assert accuracy >= 0.8, f"the demo run learned too little: test accuracy {accuracy:.3f}"
print(f"demo run: test accuracy {accuracy:.3f}")
PY
}

case $kind in
floors)
  python=${FLOORS_PYTHON:-$(pyenv_python 3.10 FLOORS_PYTHON)}
  new_env floors "$python"
  python3 "$root/.ci/floor_constraints.py" > "$work/floors.txt"  # tomllib: Python >= 3.11
  pip_install floors -c "$work/floors.txt" -e "$root[dev]"
  "$envs/floors/bin/python" "$root/.ci/floor_constraints.py" --verify < "$work/floors.txt"
  graded_and_demo floors "$root"
  ;;
colab)
  python=${COLAB_PYTHON:-$(pyenv_python 3.13 COLAB_PYTHON)}
  jax=${COLAB_JAX:-0.7.2}
  new_env colab "$python"
  pip_install colab "jax==$jax" "jaxlib==$jax" ipykernel nbclient nbformat pytest pytest-timeout
  # The setup cell of each notebook clones this repository (its committed state) and
  # installs it beside the runtime's jax; google.colab is a stand-in module.
  M2L_NLP_REPO_URL="file://$root" M2L_NLP_CLONE_DIR="$work/clone" \
    "$envs/colab/bin/python" "$root/.ci/colab_notebooks.py" "$work" "$root"/notebooks/*_solved.ipynb
  "$envs/colab/bin/python" -c "import jax; assert jax.__version__ == '$jax', jax.__version__"
  graded_and_demo colab "$work/clone"
  ;;
*)
  echo "compat: unknown environment $kind (floors or colab)" >&2
  exit 2
  ;;
esac
echo "compat $kind: passed"
