# m2l-nlp: every command sets up its own virtual environment on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

# handout: cut
# Lines between "# handout: cut" and "# handout: end cut" are left out of the students'
# Makefile that `make handout` writes; "# handout only: " lines are put in, uncommented.
.PHONY: venv test test-slow lint train demo exercises solutions compat compat-floors compat-colab compat-colab-previous compat-newest autograder handout clean
# handout: end cut
# handout only: .PHONY: venv test train demo clean

# uv installs the environment (pip puts uv in it first): several times faster than pip from
# empty download caches. uv reads its own settings, not pip's: where it
# cannot install (an index only pip is configured for, say), or with PIP_ONLY=1, pip does, and
# uv's output is kept in $(VENV)/uv.log. Neither byte-compiles: compileall does it on every
# core, packages' own test folders left out, where pip would on one. Compiled up front, as
# PYTHONDONTWRITEBYTECODE=1 (set on some machines) would have every process compile jax's
# modules again otherwise.
PIP_ONLY ?=
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@if [ -z "$(PIP_ONLY)" ] && $(BIN)/python -m pip install -q uv > $(VENV)/uv.log 2>&1 && \
	    $(BIN)/uv pip install -q --python $(BIN)/python -e '.[dev]' >> $(VENV)/uv.log 2>&1; then \
	  echo "installed with uv into $(VENV)"; \
	else \
	  [ -n "$(PIP_ONLY)" ] || echo "uv could not install (its output: $(VENV)/uv.log); pip installs"; \
	  $(BIN)/python -m pip install -q --upgrade pip && \
	  $(BIN)/python -m pip install -q --no-compile -e '.[dev]'; \
	fi
	$(BIN)/python -m compileall -q -j 0 -x '/tests?/' $(VENV)/lib > /dev/null || true  # speed only
	touch $(STAMP)

venv: $(STAMP)

# handout: cut
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/lint-imports  # the layers of m2l_nlp: pyproject.toml [tool.importlinter]

# Instructor / CI suite: lint, library tests and every graded check against the solutions.
# The drift check fails if exercises/ was not regenerated after a change to solutions/.
# The graded checks run in one process (their score table and exit status live there), beside
# the other tests in $(JOBS) parallel workers (pytest-xdist): the checks keep about one core
# busy, and the workers the rest, sooner done than one run after the other (benchmarks/
# README.md). The checks' output is shown after the workers' run; Ctrl-C stops both. The
# end-to-end tests marked `slow` (whole training runs, notebooks, kills and resumes) run in
# `make test-slow`, which CI runs beside this.
JOBS ?= 2
GRADED  = $(BIN)/python -m pytest tests/graded --impl solutions -q
LIBRARY = $(BIN)/python -m pytest tests --ignore=tests/graded --impl solutions -q -n $(JOBS) -m "not slow"
test: $(STAMP) lint
	$(BIN)/python -m m2l_nlp.authoring.stubs --check
	@echo '$(GRADED) (beside the next one; its output follows)'; \
	echo '$(LIBRARY)'; \
	log=$$(mktemp); \
	$(GRADED) > "$$log" 2>&1 & graded=$$!; \
	trap 'kill $$graded 2>/dev/null; rm -f "$$log"; exit 130' INT TERM; \
	$(LIBRARY); library=$$?; \
	wait $$graded; checks=$$?; \
	cat "$$log"; rm -f "$$log"; \
	[ $$library = 0 ] && [ $$checks = 0 ]

# --dist loadfile: a file's tests share one worker and its module fixtures (the autograder's
# batch is graded once, and never beside a second grader running as the same student user).
test-slow: $(STAMP)
	$(BIN)/python -m pytest tests --ignore=tests/graded --impl solutions -q -n $(JOBS) -m slow \
	    --dist loadfile

# Compatibility environments (CI runs them beside `make test` and `make test-slow`; they need
# pyenv's Python 3.10, 3.12 and 3.13, or FLOORS_PYTHON / COLAB_PYTHON / COLAB_PREVIOUS_PYTHON /
# NEWEST_PYTHON): the dependency floors of pyproject.toml on the oldest supported Python;
# Colab's runtime as
# published (.ci/colab-pip-freeze.txt: Python 3.13, jax 0.7.2 and the rest of Colab's
# versions), set up by the notebooks' own setup cell, with the solved notebooks run as in
# Colab; Colab's previous runtime the same way (.ci/colab-previous-pip-freeze.txt: Python
# 3.12); and the newest release of everything on the newest Python (.ci/newest-passed.txt:
# what last passed). Each: the graded suite, the loop's library tests and the demo run
# (Colab's previous runtime, whose jax is the current one's: its first notebook and tests). See
# .ci/compat.sh. The autograder's lane is in `make test-slow` (tests/e2e/test_autograder_on_gradescope.py: a
# Python 3.10 every user can read, .ci/readable_python.sh, with the versions setup.sh ships).
compat: compat-floors compat-colab compat-colab-previous compat-newest
compat-floors:
	bash .ci/compat.sh floors
compat-colab:
	bash .ci/compat.sh colab
compat-colab-previous:
	bash .ci/compat.sh colab-previous
compat-newest:
	bash .ci/compat.sh newest
# handout: end cut
# handout only: # Grade your exercises: the score table at the end (exit status 0 once all pass).
# handout only: test: $(STAMP)
# handout only: 	$(BIN)/python -m pytest

# Main job: train the practical-2 transformer on the full IMDB (default recipe), print the
# test accuracy and confusion matrix, write checkpoint + plots under runs/default/.
# IMDB comes from IMDB=... (archive or aclImdb/ folder), else $$M2L_NLP_IMDB, else a local
# copy beside the project, else the official download.
IMDB ?= $(or $(M2L_NLP_IMDB),$(wildcard ../shared/data/aclImdb_v1_labeled.tar.gz))
EPOCHS ?=
train: $(STAMP)
	$(BIN)/m2l-nlp train --overwrite $(if $(IMDB),--data $(IMDB)) $(if $(EPOCHS),--epochs $(EPOCHS))

# The same job on the small bundled dataset with a tiny model (half a minute of CPU time; offline).
demo: $(STAMP)
	$(BIN)/m2l-nlp train --data small --out runs/demo --overwrite

# handout: cut
# Instructor: write the student stubs exercises/*.py from solutions/*.py.
# A stub a student edited is never overwritten (refused, named); FORCE=1 saves it as .bak first.
exercises: $(STAMP)
	$(BIN)/python -m m2l_nlp.authoring.stubs $(if $(FORCE),--force)

# Instructor: regenerate exercises/ (and notebooks/), grade the solutions with every check,
# and fail if a generated file differed from what is committed (review, commit, run again).
NOTEBOOKS := $(wildcard m2l_nlp/authoring/notebooks.py)
solutions: $(STAMP)
	@drift=0; \
	$(BIN)/python -m m2l_nlp.authoring.stubs --check || drift=1; \
	if [ -n "$(NOTEBOOKS)" ]; then $(BIN)/python -m m2l_nlp.authoring.notebooks --check || drift=1; fi; \
	$(BIN)/python -m m2l_nlp.authoring.stubs $(if $(FORCE),--force) || exit 1; \
	if [ -n "$(NOTEBOOKS)" ]; then $(BIN)/python -m m2l_nlp.authoring.notebooks || exit 1; fi; \
	$(BIN)/python -m pytest tests/graded --impl solutions -q || exit 1; \
	$(BIN)/python -m m2l_nlp.grading.trusted.bundle check-hidden || exit 1; \
	if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && \
	   [ -n "$$(git status --porcelain -- exercises notebooks)" ]; then \
	  git status --short -- exercises notebooks; drift=1; fi; \
	if [ $$drift = 1 ]; then \
	  echo "make solutions: generated files changed (listed above): review and commit them, then run make solutions again"; \
	  exit 1; fi; \
	echo "make solutions: exercises and notebooks up to date, every graded check passes"

# Instructor: grading for credit. `make autograder` writes the Gradescope bundle (setup.sh,
# run_autograder, the library and solutions/); `make handout` writes the student copy
# without solutions/, whose `pytest` grades from the reference's recorded answers.
AUTOGRADER ?= dist/autograder.zip
HANDOUT ?= dist/handout
autograder: $(STAMP)
	$(BIN)/python -m m2l_nlp.grading.trusted.bundle autograder $(AUTOGRADER)
REPOSITORY ?=
handout: $(STAMP)
	$(BIN)/python -m m2l_nlp.grading.trusted.bundle handout $(HANDOUT) $(if $(REPOSITORY),--repository $(REPOSITORY))
# handout: end cut

clean:
	rm -rf $(VENV) .compat .pytest_cache .ruff_cache
