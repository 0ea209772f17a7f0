# `make demo` and `make test` both create .venv and install on first use.
PY      ?= python3
VENV    := .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TORCH   := torch==2.13.0
# make test's first phase: one test more at once than there are cores (tests that start real processes
# wait much of the time: the in-process ones fill the gaps)
JOBS    ?= $(shell $(PY) -c 'import os; print(len(os.sched_getaffinity(0)) + 1)' 2>/dev/null || echo 3)
# bytecode caches on, whatever the shell says: with PYTHONDONTWRITEBYTECODE set, every pytest
# process rewrites all 220 test modules' asserts again (about 9 s of CPU each) and every rank,
# zygote and script compiles hetsync from source; __pycache__/ is in .gitignore
unexport PYTHONDONTWRITEBYTECODE

.PHONY: demo test test-fast lint install clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: an unpinned torch pulls gigabytes of CUDA wheels
	$(BIN)/pip install --quiet $(TORCH)
	$(BIN)/pip install --quiet -e '.[test]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(BIN)/hetsync compare --scenario default --out runs/demo
	@echo "open runs/demo/report.html in a browser; load runs/demo/trace.json in ui.perfetto.dev to follow every step"

# all of it: every test that rests on no measured time, JOBS at once (a test
# that starts real processes spends much of its time waiting: start-up,
# injected delays, time limits; the in-process tests fill those gaps), a
# file's tests on one worker so a module-scoped run is made once;
# then the tests whose assertions rest on measured times (marked serial) one
# at a time, on a machine at rest
test: $(STAMP)
	$(BIN)/python -m pytest -m "not serial" -n $(JOBS) --dist loadfile --durations=15
	$(BIN)/python -m pytest -m "dist and serial" --durations=8

# everything but the tests that start real processes (marked dist), on every core
test-fast: $(STAMP)
	$(BIN)/python -m pytest -m "not dist" -n auto

lint: $(STAMP)
	$(BIN)/ruff check src tests
	$(BIN)/ruff format --check src tests
	$(BIN)/mypy

clean:
	rm -rf $(VENV) runs .pytest_cache
