"""Issue 30 point 9: the declared floors exclude releases with published SQL-injection fixes.

``Django>=5.2`` admitted 5.2.0 to 5.2.10 and 6.0.0/6.0.1, which Django's
security releases of 2025-2026 fixed SQL injections in (the last ones:
CVE-2026-1207, CVE-2026-1287, CVE-2026-1312, fixed in 5.2.11 and 6.0.2).
"""

from __future__ import annotations

import importlib.metadata
import tomllib

from packaging.requirements import Requirement
from packaging.version import Version

from tests.conftest import ROOT

#: Each version before which Django fixed an SQL injection, by line.
SQL_INJECTION_FIXED_IN = {"5.2": "5.2.11", "6.0": "6.0.2"}


def requirement(name: str) -> Requirement:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    (found,) = [
        Requirement(r) for r in project["dependencies"] if Requirement(r).name.lower() == name
    ]
    return found


def test_django_s_floor_excludes_releases_with_later_sql_injection_fixes():
    specifier = requirement("django").specifier
    for line, fixed in SQL_INJECTION_FIXED_IN.items():
        first = Version(line)
        patch = 0
        while Version(f"{line}.{patch}") < Version(fixed):
            assert not specifier.contains(f"{line}.{patch}"), (specifier, f"{line}.{patch}")
            patch += 1
        assert not specifier.contains(str(first))
        assert specifier.contains(fixed)
    # The lines CI runs stay installable; the ceiling stays.
    for version in ("5.2.19", "6.0.10", "6.1", "6.1.3"):
        assert specifier.contains(version), version
    assert not specifier.contains("6.2")


def test_the_installed_versions_satisfy_the_declared_requirements():
    for name in ("django", "psycopg", "psycopg-pool", "django-environ"):
        declared = requirement(name)
        installed = importlib.metadata.version(name)
        assert declared.specifier.contains(installed), (name, installed, str(declared))
