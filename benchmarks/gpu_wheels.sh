#!/usr/bin/env bash
# Prepare .gpu/ (ignored by git) for a GPU machine that cannot reach a package index: the
# wheels its image lacks, for its Python, and a copy of IMDB. Run here, from the repository
# root, where pip can download:
#
#   bash benchmarks/gpu_wheels.sh [IMDB]
#
# then carry .gpu to the GPU machine and run `bash benchmarks/gpu_checks.sh OUT_DIR` there
# (it installs the wheels and finds the copy of IMDB). The image seen so far (Python 3.12,
# jax with CUDA, optax, pytest and xdist installed) lacks dm-haiku and the Jupyter packages
# of the notebook tests; the setuptools wheel lets pip install this project in place there.
set -eu
imdb=${1:-${M2L_NLP_IMDB:-../shared/data/aclImdb_v1_labeled.tar.gz}}
python_version=${GPU_PYTHON_VERSION:-3.12}
dir=.gpu/whl
mkdir -p "$dir"
platforms=()
for p in manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64; do
    platforms+=(--platform "$p")
done
python3 -m pip download -q --only-binary=:all: --python-version "$python_version" \
    --implementation cp "${platforms[@]}" -d "$dir" \
    dm-haiku==0.0.17 jupytext nbformat nbclient ipykernel "setuptools>=77"
# Already on the image: a second version of one of them would make the install fail.
for name in absl_py attrs markdown_it_py mdurl numpy packaging psutil pygments \
    python_dateutil pyyaml tabulate typing_extensions tzdata; do
    rm -f "$dir/$name"-*.whl
done
cp "$imdb" .gpu/
echo "$(ls "$dir" | wc -l) wheels in $dir, IMDB in .gpu/; $(du -sh .gpu | cut -f1) to carry"
