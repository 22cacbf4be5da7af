# Two commands do all set-up: `make book` (build the site) and `make test` (run every test).
# Both create .venv with the pinned dependencies when it is missing or pyproject.toml changed.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed
PYSTAMP := $(VENV)/.python-installed

.PHONY: book test test-fast lab lab-instructor check validate release clean venv python-deps system-deps

venv: $(STAMP)

# configurable-http-proxy, JupyterHub's proxy (the class's hub: scripts/hub/, tests/book/test_hub.py), from npm into
# $(VENV)/node (git-ignored with the rest of $(VENV)).  Without npm it is left out (self-study needs no hub);
# tests/book/test_hub.py then skips, or fails under CI.
PROXY_VERSION := 5.3.0

## python-deps: the Python half of the venv alone (it needs no system package, so .ci/run installs it while
## system-deps runs); the venv target adds JupyterHub's proxy from npm.
python-deps: $(PYSTAMP)

# pip compiles every installed module to bytecode one file after the other; compileall does the same on every core
# (13,290 files; on a 2-core machine, with nothing cached, 53 s for pip alone against 40 s for both).  A file that does
# not compile under this Python (torch ships one written for 3.12) is skipped, as pip skips it: -qq, and its status 1.
$(PYSTAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile -e '.[course,test]'
	$(BIN)/python -m compileall -qq -j 0 $(VENV)/lib || true
	touch $(PYSTAMP)

$(STAMP): $(PYSTAMP)
	if command -v npm >/dev/null; then \
	  npm install --prefix $(VENV)/node --no-audit --no-fund --loglevel=error configurable-http-proxy@$(PROXY_VERSION); \
	else echo "make: no npm, so no JupyterHub proxy in $(VENV)/node (only the class's hub needs it)"; fi
	touch $(STAMP)

## system-deps: the Debian/Ubuntu packages the whole test suite needs beyond Python, installed once, as root
## (`sudo make system-deps`; .ci/run calls it too).  What each is for: README.md, "System packages".  Without them
## `make test` still passes, but skips those groups of tests and says so at its end.
SYSTEM_PACKAGES := chromium chromium-driver fonts-noto-cjk bubblewrap postgresql
system-deps:
	@need=""; for pkg in $(SYSTEM_PACKAGES); do dpkg -s $$pkg >/dev/null 2>&1 || need="$$need $$pkg"; done; \
	command -v node >/dev/null || need="$$need nodejs npm"; \
	if [ -n "$$need" ]; then \
	  echo "make: installing$$need"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$need; \
	else echo "make: the system packages are installed ($(SYSTEM_PACKAGES), node and npm)"; fi
	@command -v npm >/dev/null || { echo "make: node is installed without npm; JupyterHub's proxy needs npm" >&2; exit 1; }
	@if [ -f $(STAMP) ] && [ ! -x $(VENV)/node/node_modules/.bin/configurable-http-proxy ]; then \
	  echo "make: $(VENV) was made before npm was there: rm $(STAMP) && make venv installs JupyterHub's proxy"; fi

# The course's own modules compiled to bytecode once (compileall skips what is up to date): with
# PYTHONDONTWRITEBYTECODE set, as on the course's CI machines, Python never writes the .pyc files itself and each of
# the few hundred processes of a test run (kernels, graders, nbgrader) would compile tfmlib, tfmcheck and tfmgrader
# again, about 0.3 s of CPU each.  The files are git-ignored (__pycache__/) and a stale one is never used.
COMPILE := $(BIN)/python -m compileall -q -j 0 tfmlib grader scripts book/_ext tests

## book: execute the chapters (cached) and build the static site into _build/html
book: $(STAMP)
	$(COMPILE)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/jupyter-book build . --warningiserror --keep-going

## test: every test, the book build and the browser checks included.  Two test files run at a time (pytest-xdist,
## whole files per process, so a file's module fixtures are built once), the longest files first
## (tests/conftest.py, LONGEST_FIRST), so that both cores stay busy to the end.
test: $(STAMP)
	$(BIN)/ruff check .
	$(COMPILE)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n 2 --dist loadfile --no-loadscope-reorder --durations=40

## test-fast: the library's tests only (seconds)
test-fast: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -m "not slow and not browser"

## lab: JupyterLab on the whole course (chapters in book/, exercises in notebooks/), with nbgrader's Validate
## button and no instructor tools.  Configuration: scripts/lab/ (see book/appendix/how_to_take.md).
lab: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/scripts/lab/learner$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(BIN)/jupyter lab $(LAB_ARGS)

## lab-instructor: the same JupyterLab with nbgrader's Formgrader, Create Assignment and exchange tools
lab-instructor: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" JUPYTER_CONFIG_PATH="$(CURDIR)/scripts/lab/instructor$${JUPYTER_CONFIG_PATH:+:$$JUPYTER_CONFIG_PATH}" \
	  $(BIN)/jupyter lab $(LAB_ARGS)

## check: self-check an exercise with its visible AND hidden tests: `make check 03` or `make check A=03`
## validate: nbgrader's Validate on the exercise's notebook, failing (exit 1) when a test fails: `make validate 03`
CHECK_ARGS := $(filter-out check validate,$(MAKECMDGOALS))
check: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/check.py $(or $(A),$(CHECK_ARGS))

validate: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/check.py --validate $(or $(A),$(CHECK_ARGS))

# `make check 03`: the exercise number is a goal of its own; let it do nothing.
ifneq ($(filter check validate,$(MAKECMDGOALS)),)
$(CHECK_ARGS):
	@:
endif

## release: regenerate notebooks/ (the learners' versions) from solutions/ with nbgrader
release: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python scripts/release.py

clean:
	rm -rf _build .pytest_cache
