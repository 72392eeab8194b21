# m2l-nlp: every command sets up its own virtual environment on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: venv test lint train demo exercises solutions clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $(STAMP)

venv: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .

# Instructor / CI suite: lint, library tests and every graded check against the solutions.
test: $(STAMP) lint
	$(BIN)/python -m pytest tests --impl solutions -q

# Main job: train the practical-2 transformer on the full IMDB.
train: $(STAMP)
	@echo "make train: not built yet"

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
