"""Which database the operator API works on, and how a process of its own
reaches it.

Every function of :mod:`awa_django.ops` takes ``database=`` (an alias of
``DATABASES``, default ``AWA["DATABASE"]``).  The commands and views that
need the alias itself, Django's connection for it (to describe it, or to
probe it without running a statement) or a libpq connection string for a
worker's own connections get them here, resolved the same way.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from ..storage import connection as _connection


def database_alias(database: str | None = None) -> str:
    """The alias ``database`` names: itself, or ``AWA["DATABASE"]`` when None."""
    return _connection.alias_for(database)


def database_connection(database: str | None = None) -> BaseDatabaseWrapper:
    """Django's connection for ``database`` (default ``AWA["DATABASE"]``);
    ``ImproperlyConfigured`` when the alias is not in ``DATABASES`` or is not
    PostgreSQL."""
    return _connection.django_connection(database)


def conninfo(database: str | None = None) -> str:
    """A libpq connection string with the host, credentials and options
    Django uses for ``database``: what worker and maintenance processes
    open their own connections with."""
    return _connection.conninfo(database)
