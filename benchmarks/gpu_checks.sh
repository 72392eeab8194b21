#!/usr/bin/env bash
# The GPU checks of benchmarks/README.md ("On a GPU"), in order of what is least known,
# each under its own time limit so that one slow step cannot eat the others' time.
#
#   bash benchmarks/gpu_checks.sh OUT_DIR [IMDB]
#
# Run from the repository root, with m2l_nlp and dm-haiku importable (`pip install -e .`).
# IMDB defaults to $M2L_NLP_IMDB, then ../shared/data/aclImdb_v1_labeled.tar.gz. Every log
# goes to OUT_DIR; the data and the compiled programs are cached in OUT_DIR/cache, which
# should be empty for the cold figures. Five steps, about 9 minutes in all on one H200:
#   1. how many operations one step of the seed model compiles to (--count-ops);
#   2. training throughput against the seed loop at batch 8, K = 1, 8, 32 steps per call;
#   3. `make train`'s job, cold: test accuracy, wall time, programs compiled;
#   4. the graded checks against the reference solutions;
#   5. the library's quick tests (install the wheels into the interpreter, not a PYTHONPATH
#      folder: the tests' worker processes do not inherit it).
set -u
out=${1:?usage: bash benchmarks/gpu_checks.sh OUT_DIR [IMDB]}
imdb=${2:-${M2L_NLP_IMDB:-../shared/data/aclImdb_v1_labeled.tar.gz}}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false M2L_NLP_CACHE="$out/cache"
start=$(date +%s)

step() {  # NAME LIMIT_S COMMAND...: run it, log it, say how it ended
    local name=$1 limit=$2
    shift 2
    echo "== $name (at $(($(date +%s) - start)) s, limit $limit s)"
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    [ $rc = 124 ] && echo "   stopped at its limit" || echo "   exit $rc"
    grep -E "median|ratio|operations|programs|accuracy|passed|failed|total time" "$out/$name.log" | tail -12
}

python3 -c "import jax; print('jax', jax.__version__, jax.devices())"
step count_ops 180 python3 benchmarks/train_throughput.py --data "$imdb" --examples 400 \
    --seed-steps 10 --repeats 1 --count-ops
step throughput 150 python3 benchmarks/train_throughput.py --data "$imdb" --examples 4000 \
    --seed-steps 300 --repeats 3 --steps-per-call 1 8 32
step train_cold 200 m2l-nlp train --data "$imdb" --no-progress --out "$out/run" --overwrite
step graded 150 python3 -m pytest tests/graded --impl solutions -q -p no:cacheprovider
# the Gradescope-bundle test installs from a package index, which a GPU machine may lack
step quick_tests 180 python3 -m pytest tests --ignore=tests/graded -m "not slow" --impl solutions \
    -q -n "$(nproc)" -p no:cacheprovider \
    --deselect tests/test_autograder.py::test_gradescope_bundle_grades_and_resists_tricks
echo "== done at $(($(date +%s) - start)) s; logs in $out"
