#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image (the bundle made by
# `make autograder` is unpacked in $AUTOGRADER_ROOT/source). It installs the course library
# (not editable) into the `python3` found on PATH, where every user can read it, with exactly
# the versions that the course tested for that Python (python3.X.txt beside this file), and makes
# the reference solutions readable by root only: student code runs as unprivileged users of
# its own, m2l-student and m2l-student-1 to -7 (created here if the image lacks them), so that
# the limits on its processes count nothing else.
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
PY=$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')
LOCK="$SOURCE/m2l_nlp/grading/trusted/gradescope/python$PY.txt"
if [ ! -f "$LOCK" ]; then
  tested=$(cd "$SOURCE/m2l_nlp/grading/trusted/gradescope" && ls python3.*.txt | sed 's/^python//; s/\.txt$//' | tr '\n' ' ')
  echo "m2l-nlp autograder: this image's python3 is Python $PY, for which the course has no tested versions (it has: ${tested% }): choose a Gradescope base image with one of those (Ubuntu 22.04: Python 3.10), or add Python $PY with \`python .ci/versions.py gradescope-lock python$PY\` and its lane" >&2
  exit 1
fi
# Exactly the tested set: no resolution (--no-deps), so a later rebuild installs the same.
python3 -m pip install -q $BREAK --no-deps -r "$LOCK"
python3 -m pip install -q $BREAK --no-deps "$SOURCE"
python3 - "$LOCK" <<'PY'
import importlib.metadata as md, re, sys
wanted = dict(re.findall(r"^([A-Za-z0-9_.-]+)==(\S+)$", open(sys.argv[1]).read(), re.M))
wrong = []
for name, version in wanted.items():
    try:
        found = md.version(name)
    except md.PackageNotFoundError:
        found = "missing"
    if found != version:
        wrong.append(f"{name} {found} (tested: {version})")
if wrong:
    sys.exit("m2l-nlp autograder: installed versions differ from the tested ones: " + ", ".join(wrong))
PY
# Student code runs in a bubblewrap sandbox per phase where the kernel lets this image make
# namespaces; else as a fresh user of this pool per phase (docs/grading.md).
if ! command -v bwrap >/dev/null 2>&1; then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap >/dev/null 2>&1; } ||
    echo "could not install bubblewrap: student code will run as a fresh user per phase"
fi
for user in m2l-student m2l-student-1 m2l-student-2 m2l-student-3 m2l-student-4 \
  m2l-student-5 m2l-student-6 m2l-student-7; do
  if ! id "$user" >/dev/null 2>&1; then
    useradd --system --no-create-home --shell /usr/sbin/nologin "$user" 2>/dev/null ||
      adduser --system --no-create-home "$user" >/dev/null 2>&1 ||
      echo "could not create the user $user: the pool of users is smaller"
  fi
done
chmod -R go-rwx "$SOURCE/solutions"
python3 -c 'import m2l_nlp.grading.trusted.grader' && echo "m2l-nlp autograder installed"
