"""Resolve the Django connection that holds the queue."""

from __future__ import annotations

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
