#!/usr/bin/env bash
# The compatibility environments of `make compat` (CI runs them beside `make test`):
#   floors  the oldest supported Python, every runtime dependency at its pyproject floor
#   colab   Colab's runtime as published (.ci/colab-pip-freeze.txt): Python 3.13, Colab's own
#           version of every package of the course's dependency tree that Colab has installed
#           first, then the notebooks' own setup cell (from a file:// clone), then a pip freeze
#           check that Colab's versions were kept and only the tested pins added
#   colab-previous  the same, for Colab's previous runtime (.ci/colab-previous-pip-freeze.txt:
#           Python 3.12), which users may pin
#   newest  the newest release of every dependency on the newest Python here; it records the
#           versions that passed (.ci/newest-passed.txt) and, when it breaks, says what moved
# Each runs the graded suite in a built handout (the solutions as a student's exercises), the
# tests of the checks' messages, the library tests of the training loop and the demo training;
# colab also runs every solved notebook (colab-previous, whose jax is colab's: the first
# practical's notebook and the tests, not the handout's replay nor the demo).
# FLOORS_PYTHON / COLAB_PYTHON / COLAB_PREVIOUS_PYTHON / NEWEST_PYTHON name other interpreters.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
kind=${1:?usage: .ci/compat.sh floors|colab|colab-previous|newest}
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
  # what a student reads: the checks' hints follow JAX's own errors, whose words change
  # between versions (the .T hint once matched only the newer words); and the device the
  # checks run on
  (cd "$2" && "$py" -m pytest tests/grading/practicals/test_practical2.py \
      tests/grading/checks/test_runner.py tests/grading/checks/test_tools.py \
      tests/grading/local/test_notebook.py tests/test_devices.py --impl solutions \
      -q -p no:cacheprovider -m "not slow" -k "hint or words or message or cpu or device")
  # the loop and what it leans on, where JAX's API moves between versions: sharding, buffer
  # donation, lax.scan, the persistent compilation cache and its count, haiku's transform,
  # checkpoints (about 40 s)
  (cd "$2" && "$py" -m pytest tests/train/test_loop.py tests/train/test_step.py \
      tests/data/test_batching.py tests/train/test_evaluation.py tests/train/test_optim.py \
      tests/test_transform.py tests/runs/test_checkpoint.py --impl solutions -q \
      -p no:cacheprovider -m "not slow")
  if [ "${COLAB_RUNTIME:-}" = previous ]; then
    # Colab's previous runtime has the current one's jax and jaxlib: the recorded answers'
    # numbers and the demo's programs are the current lane's; its own Python and numpy are
    # what the notebooks and the tests above exercise
    return 0
  fi
  # the graded suite as a student runs it: the handout's recorded answers (made with the
  # instructor's jax, .venv's) replayed under this lane's jax, the solutions as a student's
  # exercises earning every point (every check runs the reference's code under this jax, so
  # the suite against the live reference would only repeat it). The same handout serves every
  # lane: .ci/run builds it once (COMPAT_HANDOUT).
  if [ -n "${COMPAT_HANDOUT:-}" ]; then
    while [ ! -d "$COMPAT_HANDOUT" ] && [ ! -e "$COMPAT_HANDOUT.failed" ]; do sleep 2; done
  fi
  if [ -n "${COMPAT_HANDOUT:-}" ] && [ -d "$COMPAT_HANDOUT" ]; then
    cp -R "$COMPAT_HANDOUT" "$work/handout"
  else
    "$root/.venv/bin/python" -m m2l_nlp.grading.trusted.bundle handout "$work/handout" \
        --repository https://github.com/ci/handout > /dev/null
  fi
  cp "$root"/solutions/practical*.py "$work/handout/exercises/"
  (cd "$work/handout" && PYTHONPATH="$work/handout" M2L_ROOT= "$py" -m pytest -q \
      -p no:cacheprovider > "$work/replay.log" 2>&1) || { cat "$work/replay.log"; exit 1; }
  echo "the handout's records replayed under this lane's jax: $(grep -E '^total' "$work/replay.log")"
  (cd "$2" && "$py" -m m2l_nlp.cli train --data small --no-progress --out "$work/demo" \
      --cache-dir "$work/cache")
  "$py" - "$work/demo/metrics.json" <<'PY'
import json, sys
accuracy = json.load(open(sys.argv[1]))["test_accuracy"]
assert accuracy >= 0.8, f"the demo run learned too little: test accuracy {accuracy:.3f}"
print(f"demo run: test accuracy {accuracy:.3f}")
PY
}

if [ "$kind" = colab-previous ]; then
  # Colab's previous runtime (.ci/colab-previous-pip-freeze.txt: Python 3.12, numpy 2.0.2),
  # which users may pin: the same lane with its own freeze file
  export COLAB_RUNTIME=previous
  kind=colab
  COLAB_PYTHON=${COLAB_PREVIOUS_PYTHON:-$(pyenv_python 3.12 COLAB_PREVIOUS_PYTHON)}
  [ -n "$COLAB_PYTHON" ] || exit 2
  envs=$root/.compat/previous
fi

case $kind in
floors)
  python=${FLOORS_PYTHON:-$(pyenv_python 3.10 FLOORS_PYTHON)}
  new_env floors "$python"
  python3 "$root/.ci/floor_constraints.py" > "$work/floors.txt"  # tomllib: Python >= 3.11
  pip_install floors -c "$work/floors.txt" -e "$root[dev]"
  "$envs/floors/bin/python" "$root/.ci/floor_constraints.py" --verify < "$work/floors.txt"
  echo "floors: the course's dependencies (pip freeze):"
  "$envs/floors/bin/python" "$root/.ci/versions.py" tree
  graded_and_demo floors "$root"
  ;;
colab)
  python=${COLAB_PYTHON:-$(pyenv_python 3.13 COLAB_PYTHON)}
  py=$envs/colab/bin/python
  rm -rf "${envs:?}/colab"
  "$python" -m venv "$envs/colab"
  python3 "$root/.ci/versions.py" colab-constraints > "$work/colab.txt"
  pip_install colab -c "$work/colab.txt" pip  # Colab's pip, whose resolver runs the setup cell
  # 1. What Colab preinstalls: of the course's dependency tree (as pip resolves it beside
  # Colab's versions) and the notebook runner's, every package Colab has, at Colab's version.
  if ! "$py" -m pip install -q --dry-run --ignore-installed --report "$work/tree.json" \
      -c "$work/colab.txt" -e "$root" ipykernel nbclient nbformat pytest > "$work/pip.log" 2>&1; then
    cat "$work/pip.log" >&2; exit 1
  fi
  python3 "$root/.ci/versions.py" colab-preinstalled "$work/tree.json" > "$work/preinstalled.txt"
  pip_install colab -r "$work/preinstalled.txt"
  pip_install colab -c "$work/colab.txt" pytest-timeout  # the tests' only tool Colab lacks
  "$py" "$root/.ci/versions.py" installed > "$work/before.txt"
  # 2. The setup cell of each notebook, as in Colab: it clones this repository (its committed
  # state) and installs it; google.colab is a stand-in module. The previous runtime, whose jax
  # is the current one's, runs the first practical's: the setup cell on its Python and numpy.
  notebooks=("$root"/notebooks/*_solved.ipynb)
  [ "${COLAB_RUNTIME:-}" = previous ] && notebooks=("${notebooks[0]}")
  M2L_NLP_REPO_URL="file://$root" M2L_NLP_CLONE_DIR="$work/clone" \
    PYDEVD_DISABLE_FILE_VALIDATION=1 "$py" "$root/.ci/colab_notebooks.py" "$work" "${notebooks[@]}"
  # 3. Colab's versions kept, only what Colab lacks added.
  "$py" "$root/.ci/versions.py" colab-check "$work/preinstalled.txt" "$work/before.txt"
  echo "colab: the course's dependencies (pip freeze):"; "$py" "$root/.ci/versions.py" tree
  graded_and_demo colab "$work/clone"
  ;;
newest)
  newest=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.*/bin/python 2>/dev/null | sort -V | tail -n 1)
  python=${NEWEST_PYTHON:-$newest}
  [ -n "$python" ] || { echo "compat: no Python 3 (set NEWEST_PYTHON)" >&2; exit 2; }
  py=$envs/newest/bin/python
  new_env newest "$python"
  # no constraints: the newest release of everything
  pip_install newest --upgrade --upgrade-strategy eager -e "$root[dev]"
  "$py" -m pip list --outdated 2>/dev/null | awk 'tolower($1) ~ /^(jax|jaxlib|dm-haiku|optax|tokenizers|numpy|pandas|matplotlib)$/ {print "newest: pip held back " $1 " at " $2 ", not " $3 " (a conflict, or no wheel for this Python)"}'
  echo "newest: the course's dependencies (pip freeze):"; "$py" "$root/.ci/versions.py" tree
  set +e
  (set -e; graded_and_demo newest "$root")
  status=$?
  set -e
  "$py" "$root/.ci/versions.py" newest-check "$([ $status = 0 ] && echo passed || echo failed)"
  # A pair that pip allows but that cannot import (dm-haiku does not declare jax): dm-haiku
  # 0.0.16 beside this jax (0.11 or newer) is refused by `import m2l_nlp` in one line.
  pip_install newest --no-deps dm-haiku==0.0.16
  if "$py" -c "import haiku" > /dev/null 2>&1; then
    echo "newest: dm-haiku 0.0.16 imports beside this jax; the refusal is not exercised" >&2
  else
    echo "newest: dm-haiku 0.0.16 does not import beside jax $("$py" -c 'import importlib.metadata as m; print(m.version("jax"))')"
  fi
  refused=$(cd "$work" && "$py" -c "import m2l_nlp" 2>&1 >/dev/null) && {
    echo "newest: import m2l_nlp accepted dm-haiku 0.0.16" >&2; exit 1; }
  [ "$(printf '%s\n' "$refused" | wc -l)" = 1 ] && [[ $refused == *"dm-haiku>=0.0.17"* ]] ||
    { echo "newest: the refusal of dm-haiku 0.0.16 is not one line: $refused" >&2; exit 1; }
  echo "newest: refused in one line: $refused"
  pip_install newest --no-deps dm-haiku==0.0.17
  ;;
*)
  echo "compat: unknown environment $kind (floors, colab, colab-previous or newest)" >&2
  exit 2
  ;;
esac
echo "compat $kind: passed"
