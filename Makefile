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

# bash with pipefail: a failing pip fails its step even though its output is filtered.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# pip's full output goes to <venv>/install.log; the terminal shows each package pip collects,
# numbered, the count installed and pip's errors (pip's notes on index locations that lack a
# package, one per package and index, stay in the log). PYTHONUNBUFFERED: lines as they come.
PINNED_EXTRAS := .[all,imitation,lint,atari,mujoco,box2d]
MODERN_EXTRAS := .[all,zoo,atari,mujoco,box2d]
# $(call PIP,<venv>,<label>,<pip install arguments>): one install step, labelled and shown so
# (the extras are variables: a comma in an argument of $(call) would split it).
PIP = echo "$(2) ..." && PYTHONUNBUFFERED=1 $(1)/bin/python -m pip install --progress-bar off \
	$(3) 2>&1 | $(call SHOW,$(1))
SHOW = tee -a $(1)/install.log | python3 -u -c "$$PIP_SHOW" \
	|| { echo "pip failed; its full output is in $(1)/install.log"; exit 1; }
define PIP_SHOW
import sys
n = 0
for line in sys.stdin:
    word, _, rest = line.partition(" ")
    if word in ("Collecting", "Processing"):
        n += 1
        print(f"    {n:3d} {rest.split()[0].rsplit('/', 1)[-1]}", flush=True)
    elif word == "Installing" and rest.startswith("collected packages: "):
        n_new = rest.count(",") + 1
        print(f"    installing {n_new} package{'s' * (n_new > 1)} ...", flush=True)
    elif word == "Successfully" and rest.startswith("installed "):
        n_new = len(rest.split()) - 1
        print(f"    installed {n_new} package{'s' * (n_new > 1)}", flush=True)
    elif word.startswith(("ERROR", "error")):
        print(line, end="", flush=True)
endef
export PIP_SHOW

.PHONY: install install-modern demo test test-expensive test-modern lint docs clean

$(STAMP): setup.cfg pyproject.toml constraints.txt
	@echo "Installing the pinned lane into $(VENV): torch, then imitation-meg with imitation 1.0.1,"
	@echo "SB3 2.2.1 and their dependencies (about 115 packages). This first install takes about"
	@echo "5 minutes on 2 idle cores, longer on a busy machine; later make runs skip it."
	@python3 -m venv $(VENV)
	@$(call PIP,$(VENV),[1/3] torch 2.13.0,torch==2.13.0)
	@$(call PIP,$(VENV),[2/3] imitation-meg with its extras all / imitation / lint / atari / mujoco / box2d (constraints.txt),\
		-c constraints.txt -e "$(PINNED_EXTRAS)")
	@# rl-zoo3 2.2.1 without its dependencies (see constraints.txt); the rest is installed above.
	@$(call PIP,$(VENV),[3/3] rl-zoo3 2.2.1 (without its dependencies),\
		--no-deps -c constraints.txt rl-zoo3==2.2.1)
	@touch $(STAMP)
	@echo "Installed; pip's full output is in $(VENV)/install.log."

$(MODERN_STAMP): setup.cfg pyproject.toml constraints-modern.txt
	@echo "Installing the modern lane into $(MODERN_VENV): torch, then imitation-meg with the current"
	@echo "SB3 and gymnasium (no imitation). This first install takes a few minutes."
	@python3 -m venv $(MODERN_VENV)
	@$(call PIP,$(MODERN_VENV),[1/2] torch 2.13.0,torch==2.13.0)
	@$(call PIP,$(MODERN_VENV),[2/2] imitation-meg with its extras all / zoo / atari / mujoco / box2d (constraints-modern.txt),\
		-c constraints-modern.txt -e "$(MODERN_EXTRAS)")
	@touch $(MODERN_STAMP)
	@echo "Installed; pip's full output is in $(MODERN_VENV)/install.log."

$(DOCS_STAMP): $(STAMP) setup.cfg constraints.txt
	@$(call PIP,$(VENV),the docs extra (constraints.txt),-c constraints.txt -e ".[docs]")
	@touch $(DOCS_STAMP)

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

# Style and types: ruff's pinned rule set and formatter (pyproject.toml), mypy on the package
# and the benchmark scripts.
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
