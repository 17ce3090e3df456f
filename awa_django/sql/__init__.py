"""SQL shipped with awa_django, loaded once from package data.

``schema/<concern>.sql`` files hold the substrate, one file per concern
(rings, enqueue, claim, close, ...), each opening with its design; the
Django migrations in ``awa_django.migrations`` run them in order.  ``queries/<area>.sql`` files hold
named statements, each introduced by a ``-- name: <name>`` line, so no SQL
lives in Python strings.  Only ``awa_django.storage`` executes them.
"""

from __future__ import annotations

import functools
import re
from importlib import resources

_NAME_LINE = re.compile(r"^--\s*name:\s*(?P<name>[a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


def schema_file(filename: str) -> str:
    """Return the text of ``sql/schema/<filename>``."""
    return resources.files(__package__).joinpath("schema", filename).read_text(encoding="utf-8")


def schema_files() -> list[str]:
    """Names of every substrate file, sorted by name."""
    folder = resources.files(__package__).joinpath("schema")
    return sorted(entry.name for entry in folder.iterdir() if entry.name.endswith(".sql"))


@functools.cache
def queries(area: str) -> dict[str, str]:
    """Named statements of ``sql/queries/<area>.sql``."""
    text = (
        resources.files(__package__).joinpath("queries", f"{area}.sql").read_text(encoding="utf-8")
    )
    found: dict[str, str] = {}
    matches = list(_NAME_LINE.finditer(text))
    for index, match in enumerate(matches):
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end() : end].strip().rstrip(";").strip()
        if match["name"] in found:
            raise ValueError(f"duplicate query name {match['name']!r} in {area}.sql")
        found[match["name"]] = body
    return found


def query(area: str, name: str) -> str:
    """One named statement; a typo fails loudly at first use."""
    try:
        return queries(area)[name]
    except KeyError:
        raise KeyError(f"no query {name!r} in sql/queries/{area}.sql") from None
