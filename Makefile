# Two commands do all set-up: `make book` (build the site) and `make test` (run every test).
# Both create .venv with the pinned dependencies when it is missing or pyproject.toml changed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: book test test-fast lab release clean venv

venv: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[course,test]'
	touch $(STAMP)

## book: execute the chapters (cached) and build the static site into _build/html
book: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/jupyter-book build . --warningiserror --keep-going

## test: every test, the book build and the browser checks included
test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest

## test-fast: the library's tests only (seconds)
test-fast: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -m "not slow and not browser"

## lab: JupyterLab on the exercises, with nbgrader's Validate button
lab: $(STAMP)
	cd notebooks && PATH="$(CURDIR)/$(BIN):$$PATH" ../$(BIN)/jupyter lab

## release: regenerate notebooks/ (the learners' versions) from solutions/ with nbgrader
release: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/release.py

clean:
	rm -rf _build .pytest_cache
