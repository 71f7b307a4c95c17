# Every target installs into .venv first: torch (CPU wheel) before anything else, then the
# package with all extras under constraints.txt, the tested stack.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test test-expensive clean

$(STAMP): setup.cfg pyproject.toml constraints.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -c constraints.txt -e ".[all]"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/imitation-meg demo

test: $(STAMP)
	$(PY) -m pytest -m "not expensive" -q

test-expensive: $(STAMP)
	$(PY) -m pytest -m expensive -q

clean:
	rm -rf $(VENV) build *.egg-info
