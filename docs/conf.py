"""Sphinx configuration: the site is built from the Markdown pages in docs/ in place (MyST).

``make docs`` builds the HTML with warnings as errors and then runs the pages' examples with the
doctest builder (the ``{doctest}`` and ``{testcode}`` blocks of the pages).
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # document this checkout, not whatever is installed
sys.path.insert(0, str(ROOT / "docs"))

import _api_names  # noqa: E402
from sphinx.domains.python import PythonDomain  # noqa: E402
from sphinx.util import logging  # noqa: E402

import imitation_meg  # noqa: E402

project = "imitation_meg"
author = "imitation_meg developers"
copyright = "imitation_meg developers"
version = release = imitation_meg.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.doctest",
    "sphinx.ext.mathjax",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
# results/ holds the published CSV / JSON / PNG files the pages show, not pages.
exclude_patterns = ["_build", "results/**/*.md", "README.md"]

# MyST: anchors for headings down to ###, so that links like `approx.md#every-option` resolve.
myst_heading_anchors = 3
myst_enable_extensions = ["dollarmath"]

# autodoc / napoleon: Google-style docstrings; members in source order; the signatures keep
# the types (the docstrings already name them with their shapes).
autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": True, "show-inheritance": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
# A dataclass's "Attributes:" section becomes fields of the class entry; its fields are then
# documented once (as members), not twice.
napoleon_use_ivar = True
# Overridden methods of third-party bases (gymnasium's step / reset) keep their own docstring
# only; the bases' docstrings are not in this package's style.
autodoc_inherit_docstrings = False

# doctest builder: the pages' {doctest} / {testcode} blocks. The docstrings' own examples run in
# the test suite (tests/test_docstring_examples.py), so they are not run a second time here.
doctest_test_doctest_blocks = ""
doctest_global_setup = """
import os as _os
_os.environ["PYGAME_HIDE_SUPPORT_PROMPT"] = "1"  # pygame (through seals) greets on stdout
import torch as _th
_th.set_num_threads(1)
"""

html_theme = "furo"
html_title = f"imitation_meg {release}"
html_static_path: list[str] = []


def _check_api_reference(app, exception):  # type: ignore[no-untyped-def]
    """Warn (an error under -W) for every public name without an entry in the Python index."""
    if exception is not None or app.builder.name != "html":
        return
    documented = set(app.env.get_domain("py").objects)
    log = logging.getLogger(__name__)
    for pkg, name, obj in _api_names.public_names():
        if not _api_names.is_covered(pkg, name, obj, documented):
            log.warning("%s.%s is in %s.__all__ but has no entry in docs/api/", pkg, name, pkg)


class _PythonDomain(PythonDomain):
    """The Python domain, with a class's own attribute names kept to that class.

    An ``Attributes:`` entry of a class becomes a reference to that name (and, where napoleon
    reads part of the entry as its type, a type reference to it); where the class does not
    document the attribute as a member (an instance attribute set in ``__init__``), Sphinx would
    search every class for an attribute of that name and warn when it finds several. Such a name
    is left as text instead of being linked to another class's attribute; type references to
    classes and documented type aliases resolve as before.
    """

    def resolve_xref(self, env, fromdocname, builder, typ, target, node, contnode):  # type: ignore[no-untyped-def]
        cls, module = node.get("py:class"), node.get("py:module")
        local = node.hasattr("refspecific") and cls and "." not in target
        if local and f"{module}.{cls}.{target}" not in self.objects:
            if typ in ("attr", "obj"):
                return None
            if typ == "class" and not any(
                self.find_obj(env, module, cls, target, kind, 1) for kind in ("class", "data")
            ):
                return None
        return super().resolve_xref(env, fromdocname, builder, typ, target, node, contnode)


def setup(app):  # type: ignore[no-untyped-def]
    app.add_domain(_PythonDomain, override=True)
    app.connect("build-finished", _check_api_reference)
