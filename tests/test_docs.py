"""The documentation names what the tree holds, and the tree holds what the documentation names.

- every name in ``imitation_meg.__all__`` and in each subpackage's ``__all__`` has an entry in the
  API reference (``docs/api/``; ``make docs`` checks the same against the built index);
- every config and every ``docs/results/`` folder is named in the docs, and every config, results
  folder and linked file the docs name exists;
- guides and reports are apart: a guide (a page of ``docs/`` outside ``docs/reports/``) is at most
  4 000 words and carries no date, load average or history wording, which a report keeps; the
  package's docstrings carry none either.
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
    named |= set(re.findall(r"\]\((?:\.\./)?results/([\w.-]+)/", text))
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


#: The most words a guide page may have (reports, in docs/reports/, are not limited).
GUIDE_WORDS = 4000
#: What marks a page as a report, not a guide: a date, a machine's load, or the page's history.
NOT_IN_A_GUIDE = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|load average|this machine|session-1|this page used to|"
    r"earlier version of this",
    re.IGNORECASE,
)
#: A guide page waiting for its rewrite (the paths method moved here as it was): its dated
#: measurements go to docs/reports/ with that rewrite, which then removes it from this set.
PENDING_REWRITE: set[str] = set()
#: What a docstring does not carry ("this machine" may mean the one a call runs on there).
NOT_IN_A_DOCSTRING = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|load average|session-1|this page used to", re.IGNORECASE
)


def _guides() -> dict[str, str]:
    """The guide pages: every page of docs/ but the reports and the included changelog."""
    return {
        str(p.relative_to(DOCS)): p.read_text()
        for p in sorted(DOCS.rglob("*.md"))
        if "_build" not in p.parts
        and "results" not in p.parts
        and "reports" not in p.parts
        and p.name != "changelog.md"
    }


def test_no_guide_page_runs_past_its_word_limit():
    long = {name: len(text.split()) for name, text in _guides().items()}
    long = {name: n for name, n in long.items() if n > GUIDE_WORDS}
    assert long == {}, (
        f"guide pages over {GUIDE_WORDS} words (move reports to docs/reports/): {long}"
    )


def test_guides_carry_no_dates_loads_or_history():
    found = {
        name: sorted({m.group(0) for m in NOT_IN_A_GUIDE.finditer(text)})
        for name, text in _guides().items()
        if name not in PENDING_REWRITE
    }
    found = {name: hits for name, hits in found.items() if hits}
    assert found == {}, f"report wording in guides (move it to docs/reports/): {found}"


def test_every_report_states_its_date_machine_and_command():
    reports = sorted((DOCS / "reports").glob("*.md"))
    assert reports, "no reports in docs/reports/"
    index = (DOCS / "index.md").read_text()
    for page in reports:
        head = page.read_text()[:3000]
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", head), f"{page.name}: no date"
        for field in ("**Machine**", "**Command"):
            assert field in head, f"{page.name}: no {field}"
        assert f"reports/{page.stem}" in index, f"{page.name} is not in the Reports toctree"


def test_docstrings_carry_no_dates_or_loads():
    """Docstrings say what is; a measurement's date and load belong in a report."""
    import ast

    found = []
    for path in sorted((ROOT / "imitation_meg").rglob("*.py")):
        tree = ast.parse(path.read_text())
        nodes = [tree, *ast.walk(tree)]
        for node in nodes:
            if not isinstance(
                node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
            ):
                continue
            doc = ast.get_docstring(node) or ""
            for m in NOT_IN_A_DOCSTRING.finditer(doc):
                found.append(f"{path.relative_to(ROOT)}: {m.group(0)!r}")
    assert found == [], f"docstrings with report wording: {sorted(set(found))}"


def test_the_guide_checks_see_report_wording():
    assert NOT_IN_A_GUIDE.search("measured on 2026-11-27 (load average about 1)")
    assert NOT_IN_A_GUIDE.search("This page used to give two sets")
    assert not NOT_IN_A_GUIDE.search("MEG is 2.596 at beta 2.257 over 20 decisions")
