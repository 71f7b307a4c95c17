# Two lanes, each in its own virtual environment, torch installed first in both (on these
# machines `pip install torch==2.13.0` finds a local CPU wheel; on an ordinary Linux machine it
# brings the CUDA build, about 5 GB: add --index-url https://download.pytorch.org/whl/cpu for
# the CPU build):
# - pinned (.venv): imitation 1.0.1 and what it pins (SB3 2.2.1, gymnasium 0.29.1, numpy 1.26),
#   constraints.txt, extras all + imitation + lint;
# - modern (.venv-modern): the current releases (SB3 2.9.2, gymnasium 1.4.0, numpy 2.x, no
#   imitation), constraints-modern.txt, extras all + zoo.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
MODERN_VENV ?= .venv-modern
MPY := $(MODERN_VENV)/bin/python
MODERN_STAMP := $(MODERN_VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed

.PHONY: install install-modern demo test test-expensive test-modern lint docs clean

$(STAMP): setup.cfg pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all,imitation,lint]"
	# rl-zoo3 2.2.1 without its dependencies (see constraints.txt); the rest is installed above.
	$(PY) -m pip install --quiet --no-deps -c constraints.txt rl-zoo3==2.2.1
	touch $(STAMP)

$(MODERN_STAMP): setup.cfg pyproject.toml constraints-modern.txt
	python3 -m venv $(MODERN_VENV)
	$(MPY) -m pip install --quiet torch==2.13.0
	$(MPY) -m pip install --quiet -c constraints-modern.txt -e ".[all,zoo]"
	touch $(MODERN_STAMP)

$(DOCS_STAMP): $(STAMP) setup.cfg constraints.txt
	$(PY) -m pip install --quiet -c constraints.txt -e ".[docs]"
	touch $(DOCS_STAMP)

install: $(STAMP)

install-modern: $(MODERN_STAMP)

demo: $(STAMP)
	$(VENV)/bin/imitation-meg demo

test: $(STAMP)
	$(PY) -m pytest -m "not expensive" -q

test-expensive: $(STAMP)
	$(PY) -m pytest -m expensive -q

# Every test that does not need imitation, on the current stack (imitation's tests skip).
test-modern: $(MODERN_STAMP)
	$(MPY) -m pytest -m "not expensive" -q

# Style and types: ruff's pinned rule set and formatter (pyproject.toml), mypy on the package.
lint: $(STAMP)
	$(VENV)/bin/ruff check imitation_meg tests experiments benchmarks docs/conf.py docs/_api_names.py
	$(VENV)/bin/ruff format --check imitation_meg tests experiments benchmarks docs/conf.py docs/_api_names.py
	$(VENV)/bin/mypy

# The documentation site, docs/_build/html (Sphinx over the Markdown pages in docs/, the API
# reference from the docstrings), warnings as errors; then the pages' examples as doctests.
docs: $(DOCS_STAMP)
	$(PY) -m sphinx -E -W --keep-going -q -b html -d docs/_build/doctrees docs docs/_build/html
	$(PY) -m sphinx -W --keep-going -q -b doctest -d docs/_build/doctrees docs docs/_build/doctest

clean:
	rm -rf $(VENV) $(MODERN_VENV) build *.egg-info docs/_build
