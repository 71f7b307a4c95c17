# Every target installs into .venv first: torch before anything else (on these machines
# `pip install torch==2.13.0` finds a local CPU wheel; elsewhere it brings the CUDA build), then
# the package with all extras under constraints.txt, the tested stack.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-expensive lint clean

$(STAMP): setup.cfg pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all,lint]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/imitation-meg demo

test: $(STAMP)
	$(PY) -m pytest -m "not expensive" -q

test-expensive: $(STAMP)
	$(PY) -m pytest -m expensive -q

# Style and types: ruff's pinned rule set and formatter (pyproject.toml), mypy on the package.
lint: $(STAMP)
	$(VENV)/bin/ruff check imitation_meg tests experiments benchmarks
	$(VENV)/bin/ruff format --check imitation_meg tests experiments benchmarks
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) build *.egg-info
