"""Sphinx configuration of the awa_django documentation.

Built by ``make docs`` (``sphinx-build -W --keep-going``: every warning,
including an unresolved cross-reference, fails the build).  Django is set up
with the test project's settings so autodoc can import the package and the
generated reference (docs/_ext/awa_docs.py) can read the settings
definitions and the management commands' parsers; nothing connects to a
database.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
for path in (DOCS / "_ext", ROOT / "testproject", ROOT):
    sys.path.insert(0, str(path))

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")

import django  # noqa: E402

django.setup()

project = "awa_django"
author = "awa_django contributors"
copyright = "awa_django contributors"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "awa_docs",
]

source_suffix = {".md": "markdown"}
root_doc = "index"
exclude_patterns = ["_build"]
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

html_theme = "furo"
html_title = "awa_django"
html_static_path: list[str] = []

# Every reference must resolve.  There is no intersphinx (the build runs
# offline), so names of the standard library and of Django/psycopg that
# appear in signatures are accepted as they are.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(collections\.abc|typing|datetime|dt|threading|asyncio|uuid)\..*"),
    (r"py:.*", r"(django|psycopg|psycopg_pool|asgiref)\..*"),
    (r"py:class", r"(Any|Iterable|Mapping|Callable|Concatenate|Unpack|ParamSpec|TypeVar)"),
    (r"py:class", r"(P|R|T|P\.args|P\.kwargs|NoneType)"),
    (r"py:class", r"awa_django\.jobs\.(P|R)"),
    (r"py:.*", r"(int|str|float|bool|bytes|list|dict|tuple|set|type|object|None)"),
]

autodoc_member_order = "bysource"
autodoc_typehints = "signature"
autodoc_default_options = {"members": True, "undoc-members": False}
