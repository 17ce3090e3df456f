"""System checks: configuration (always) and substrate (with ``--database``).

``manage.py check`` reports every problem in ``settings.AWA`` at once, each
naming its key.  ``manage.py check --database default`` also verifies that
the awa substrate is installed at the version this code needs.
"""

from __future__ import annotations

import sys
from typing import Any

from django.conf import settings
from django.core.checks import Error, Tags, register
from django.db import DatabaseError

from .conf import parse_settings


@register("awa_django")
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[Error]:
    parsed, problems = parse_settings(getattr(settings, "AWA", None))
    errors = [
        Error(str(problem), hint="See API.md 'Settings' for valid keys.", id="awa_django.E001")
        for problem in problems
    ]
    database = settings.DATABASES.get(parsed.database)
    if database is None:
        errors.append(
            Error(
                f"AWA[DATABASE]: alias {parsed.database!r} is not in settings.DATABASES",
                id="awa_django.E002",
            )
        )
    elif "postgresql" not in database.get("ENGINE", ""):
        errors.append(
            Error(
                f"AWA[DATABASE]: {parsed.database!r} uses {database.get('ENGINE')!r}; "
                "awa_django needs django.db.backends.postgresql",
                id="awa_django.E002",
            )
        )
    return errors


def _inside_migrate() -> bool:
    # `manage.py migrate` runs the database checks before migrating; reporting
    # the missing substrate there would block the very command that installs it.
    frame = sys._getframe(1)
    while frame is not None:
        command = frame.f_locals.get("self")
        if type(command).__module__ == "django.core.management.commands.migrate":
            return True
        frame = frame.f_back
    return False


@register(Tags.database)
def check_substrate(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Error]:
    from .storage.substrate import SCHEMA_VERSION, installed_version

    parsed, problems = parse_settings(getattr(settings, "AWA", None))
    if problems or not databases or parsed.database not in databases or _inside_migrate():
        return []
    try:
        version = installed_version(parsed.database)
    except DatabaseError as exc:
        return [
            Error(
                f"awa_django could not inspect database {parsed.database!r}: {exc}",
                id="awa_django.E003",
            )
        ]
    if version is None:
        return [
            Error(
                f"the awa substrate is not installed in database {parsed.database!r}",
                hint=f"Run: python manage.py migrate awa_django --database {parsed.database}",
                id="awa_django.E003",
            )
        ]
    if version < SCHEMA_VERSION:
        return [
            Error(
                f"the awa substrate in {parsed.database!r} is version {version}; this code "
                f"needs {SCHEMA_VERSION}",
                hint=f"Run: python manage.py migrate awa_django --database {parsed.database}",
                id="awa_django.E004",
            )
        ]
    return []
