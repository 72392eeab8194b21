#!/usr/bin/env bash
# The GPU checks of benchmarks/README.md (its H200 figures), in order of what is least known,
# each under its own time limit so that one slow step cannot eat the others' time.
#
#   [STEPS="tests graded"] bash benchmarks/gpu_checks.sh OUT_DIR [IMDB]
#
# Run from the repository root. Where dm-haiku cannot be imported and .gpu/whl exists
# (benchmarks/gpu_wheels.sh made it), its wheels and this project are installed into the
# interpreter first (not into a PYTHONPATH folder: the tests' workers do not inherit it).
# IMDB defaults to $M2L_NLP_IMDB, then .gpu/'s copy, then
# ../shared/data/aclImdb_v1_labeled.tar.gz. Every log goes to OUT_DIR;
# the data and the compiled programs are cached in OUT_DIR/cache, which should be empty for
# the cold figures. STEPS picks some of the steps below (default: all, about 15 minutes on one
# H200, more than one 10-minute call: run it as two, e.g. STEPS="tests graded" first):
#   count_ops   how many operations one step of the seed model compiles to;
#   throughput  training throughput against the seed loop at batch 8, K = 8, 1, 32 steps per call,
#               and our loop at K = 8 on each length bucket alone (ms per step);
#   train_k1    `make train`'s job, cold: test accuracy, wall time, programs compiled;
#   train_k8    the same job at 8 steps per call (its data and evaluation programs cached);
#   train_seeds not in the default list: the same job at seeds 1 and 2 (after train_k1, whose
#               caches they reuse): the H200 row of docs/results.md;
#   tests       every library test, the slow ones too, in parallel workers;
#   graded      the graded checks against the reference solutions (one process: they refuse -n);
#   xla_flags   not in the default list: K = 8 throughput and the step's operations under a few
#               XLA_FLAGS that could give the batch-8 step fewer or cheaper kernels;
#   check_cells not in the default list: the notebooks' check() of every exercise in a
#               student's copy (run on the machine's CPU: devices.on_checking_device), with
#               the checking flags as the checks' options and without (Colab's case:
#               benchmarks/checking_flags.py --suite handout).
set -u
out=${1:?usage: bash benchmarks/gpu_checks.sh OUT_DIR [IMDB]}
imdb=${2:-${M2L_NLP_IMDB:-$(ls .gpu/aclImdb_v1_labeled.tar.gz 2>/dev/null || echo ../shared/data/aclImdb_v1_labeled.tar.gz)}}
steps=${STEPS:-count_ops throughput train_k1 train_k8 tests graded}
mkdir -p "$out"
export PYTHONUNBUFFERED=1 XLA_PYTHON_CLIENT_PREALLOCATE=false M2L_NLP_CACHE="$out/cache"
start=$(date +%s)

if ! python3 -c 'import haiku' 2>/dev/null && [ -d .gpu/whl ]; then
    { python3 -m pip install -q --no-index --no-deps --no-compile .gpu/whl/*.whl &&
      python3 -m pip install -q --no-index --no-deps --no-build-isolation -e .; } \
        > "$out/install.log" 2>&1 || { echo "install failed: see $out/install.log"; exit 1; }
fi
python3 -c "import jax, haiku; print('jax', jax.__version__, 'dm-haiku', haiku.__version__, jax.devices())"

step() {  # NAME LIMIT_S COMMAND...: run it if STEPS names it, log it, say how it ended
    local name=$1 limit=$2
    shift 2
    case " $steps " in *" $name "*) ;; *) return ;; esac
    echo "== $name (at $(($(date +%s) - start)) s, limit $limit s)"
    timeout "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    [ $rc = 124 ] && echo "   stopped at its limit" || echo "   exit $rc"
    grep -E "XLA_FLAGS=|median|ratio|operations|width|programs|accuracy|passed|failed|total time" "$out/$name.log" | tail -15
}

step count_ops 180 python3 benchmarks/train_throughput.py --data "$imdb" --examples 400 \
    --seed-steps 10 --repeats 1 --count-ops
step throughput 240 python3 benchmarks/train_throughput.py --data "$imdb" --examples 4000 \
    --seed-steps 300 --repeats 3 --steps-per-call 8 1 32 --loop-per-width
step train_k1 200 m2l-nlp train --data "$imdb" --no-progress --out "$out/run_k1" --overwrite
step train_k8 200 m2l-nlp train --data "$imdb" --no-progress --out "$out/run_k8" --overwrite \
    --set train.steps_per_call=8
step train_seeds 240 bash -c "for s in 1 2; do m2l-nlp train --data '$imdb' --no-progress \
    --seed \$s --out '$out/run_s'\$s --overwrite || exit; done"
# the Gradescope-bundle test installs from a package index, which a GPU machine may lack
step tests 300 python3 -m pytest tests --ignore=tests/graded --impl solutions -q \
    -n "$(nproc)" -p no:cacheprovider \
    --deselect tests/test_autograder.py::test_gradescope_bundle_grades_and_resists_tricks
step graded 150 python3 -m pytest tests/graded --impl solutions -q -p no:cacheprovider
# Each variant in its own process (XLA reads XLA_FLAGS once; a flag this jaxlib does not know
# stops only that process, with XLA's message in the log).
flag_screen() {
    local flags
    for flags in "" --xla_gpu_triton_gemm_any=true \
        --xla_gpu_enable_command_buffer=+WHILE,+CONDITIONAL; do
        echo "XLA_FLAGS=$flags"
        XLA_FLAGS="$flags" python3 benchmarks/train_throughput.py --data "$imdb" \
            --examples 4000 --seed-steps 300 --repeats 3 --steps-per-call 8 --count-ops
    done
}
step xla_flags 400 bash -c "$(declare -f flag_screen); imdb='$imdb'; flag_screen"
# (the CPU emitter's switch is left out of the variant: jaxlib 0.11 stops at it)
step check_cells 300 python3 benchmarks/checking_flags.py --suite handout --rounds 2 \
    --variant "XLA defaults=--xla_backend_optimization_level=3 --xla_gpu_deterministic_ops=false"
echo "== done at $(($(date +%s) - start)) s; logs in $out"
