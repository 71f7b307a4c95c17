"""The documentation names what the tree holds, and the tree holds what the documentation names.

- every name in ``imitation_meg.__all__`` and in each subpackage's ``__all__`` has an entry in the
  API reference (``docs/api/``; ``make docs`` checks the same against the built index);
- every config and every ``docs/results/`` folder is named in the docs, and every config, results
  folder and linked file the docs name exists.
"""

from __future__ import annotations

import importlib.util
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _api_names():
    spec = importlib.util.spec_from_file_location("_api_names", DOCS / "_api_names.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _pages() -> dict[pathlib.Path, str]:
    """README.md and the site's pages (the changelog's history is not a reference)."""
    pages = [ROOT / "README.md", *sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.parts)]
    return {page: page.read_text() for page in pages}


def test_every_public_name_has_an_api_entry():
    pytest.importorskip("pettingzoo")  # imitation_meg.symmtom needs it
    api = _api_names()
    documented = api.documented_in_pages()
    names = list(api.public_names())
    assert {pkg for pkg, _, _ in names} >= {"imitation_meg", "imitation_meg.cid"}
    missing = [
        f"{pkg}.{name}"
        for pkg, name, obj in names
        if not api.is_covered(pkg, name, obj, documented)
    ]
    assert missing == [], f"no entry in docs/api/ for {missing}"


def test_the_api_check_sees_a_missing_name():
    api = _api_names()
    documented = api.documented_in_pages()
    assert "imitation_meg.meg" in documented and "imitation_meg.cid.meg_cid" in documented
    assert not api.is_covered("imitation_meg", "not_documented", object(), documented)
    # a module of __all__ counts through its own page
    import imitation_meg

    assert api.is_covered("imitation_meg", "envs", imitation_meg.envs, documented)


def test_every_config_and_results_folder_is_named_in_the_docs():
    text = "\n".join(_pages().values())
    unnamed = [f"configs/{p.name}" for p in sorted((ROOT / "configs").glob("*.yaml"))]
    unnamed = [c for c in unnamed if c not in text]
    assert unnamed == [], f"configs named nowhere in the docs: {unnamed}"
    folders = sorted(p.name for p in (DOCS / "results").iterdir() if p.is_dir())
    named = set(re.findall(r"docs/results/([\w.-]+)", text))
    named |= set(re.findall(r"\]\(results/([\w.-]+)/", text))
    assert [f for f in folders if f not in named] == [], "results folders named nowhere"


def test_everything_the_docs_name_exists():
    missing = []
    for page, text in _pages().items():
        where = page.relative_to(ROOT)
        for config in re.findall(r"configs/([\w.-]+\.yaml)", text):
            if not (ROOT / "configs" / config).is_file():
                missing.append(f"{where}: configs/{config}")
        for bare in re.findall(r"(?<![\w/.-])([\w-]+\.yaml)\b", text):
            if not (ROOT / "configs" / bare).is_file():
                missing.append(f"{where}: {bare}")
        for folder in re.findall(r"docs/results/([\w.-]+)", text):
            if not (DOCS / "results" / folder).is_dir():
                missing.append(f"{where}: docs/results/{folder}")
        for link in re.findall(r"\]\(([^)#\s]+)(?:#[^)\s]*)?\)", text):
            if re.match(r"[a-z]+://", link):
                continue
            if not (page.parent / link).exists():
                missing.append(f"{where}: link {link}")
    assert missing == [], f"named in the docs but not in the tree: {missing}"
