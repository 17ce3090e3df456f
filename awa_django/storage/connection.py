"""Resolve the Django connection that holds the queue."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper

from ..conf import awa_settings


def alias_for(database: str | None) -> str:
    return database or awa_settings().database


def django_connection(database: str | None = None) -> BaseDatabaseWrapper:
    """Django's connection for ``database`` (default ``AWA["DATABASE"]``)."""
    alias = alias_for(database)
    if alias not in connections.settings:
        raise ImproperlyConfigured(
            f"awa_django: database alias {alias!r} is not in settings.DATABASES"
        )
    connection = connections[alias]
    if connection.vendor != "postgresql":
        raise ImproperlyConfigured(
            f"awa_django needs PostgreSQL; database {alias!r} is {connection.vendor}"
        )
    return connection


def psycopg_params(database: str | None = None) -> dict[str, Any]:
    """Keyword arguments for ``psycopg.connect`` matching Django's settings.

    The worker runtime and LISTEN need connections of their own; they use the
    same host, credentials and options Django would.
    """
    params = dict(django_connection(database).get_connection_params())
    for django_only in ("cursor_factory", "context", "server_side_binding", "pool"):
        params.pop(django_only, None)
    return params


def conninfo(database: str | None = None) -> str:
    """The same as :func:`psycopg_params`, as a libpq connection string."""
    from psycopg.conninfo import make_conninfo

    return make_conninfo(
        **{key: value for key, value in psycopg_params(database).items() if value not in (None, "")}
    )
