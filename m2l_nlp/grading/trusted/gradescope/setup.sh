#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image (the bundle made by
# `make autograder` is unpacked in $AUTOGRADER_ROOT/source). It installs the course library
# (not editable) into the `python3` found on PATH, where every user can read it, and makes
# the reference solutions readable by root only: student code runs as an unprivileged user of
# its own, m2l-student (created here if the image lacks it), so that the limits on its
# processes count nothing else.
set -euo pipefail
ROOT="${AUTOGRADER_ROOT:-/autograder}"
SOURCE="$ROOT/source"

if ! command -v python3 >/dev/null 2>&1 || ! python3 -m pip --version >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq python3 python3-pip python3-venv
fi
# Debian and Ubuntu mark their system Python as managed by apt (PEP 668); this image is ours.
BREAK=""
if python3 -m pip install --help 2>/dev/null | grep -q -- --break-system-packages; then
  python3 -c 'import sys; sys.exit(sys.prefix != sys.base_prefix)' && BREAK="--break-system-packages"
fi
python3 -m pip install -q $BREAK "$SOURCE"
if ! id m2l-student >/dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin m2l-student 2>/dev/null ||
    adduser --system --no-create-home m2l-student >/dev/null 2>&1 ||
    echo "could not create the user m2l-student: student code will run as nobody"
fi
chmod -R go-rwx "$SOURCE/solutions"
python3 -c 'import m2l_nlp.grading.trusted.grader' && echo "m2l-nlp autograder installed"
