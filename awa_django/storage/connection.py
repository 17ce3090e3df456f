"""Resolve the Django connection that holds the queue."""

from __future__ import annotations

from collections.abc import Mapping
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


def pooled(database: str | None = None) -> bool:
    """Whether Django's ``database`` alias goes through a transaction-mode
    pooler.  Its ``DISABLE_SERVER_SIDE_CURSORS`` says so: Django's own advice
    for such an alias, and what a project behind PgBouncer already sets.
    Such a connection may land on another server session at every
    transaction, so the runtime keeps no session state on it."""
    return bool(django_connection(database).settings_dict.get("DISABLE_SERVER_SIDE_CURSORS"))


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


#: Server settings of every session the worker runtime opens (its pool, its
#: LISTEN connection, the leader's election and task sessions).  ``jit``:
#: PostgreSQL JIT-compiles any statement whose estimated cost passes
#: ``jit_above_cost``, and the queue's reads over many ring partitions (the
#: leader's queue sample, rescue, the ``--burst`` check) estimate high while
#: touching a few rows: compiling one took about 150 ms, for a statement
#: that then ran in a few.
RUNTIME_SESSION_SETTINGS: Mapping[str, str] = {"jit": "off"}


def with_server_settings(conninfo: str, settings: Mapping[str, str]) -> str:
    """``conninfo`` whose ``options`` also set these server settings for the
    session (``-c name=value``); options the project configured are kept,
    and come first."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(conninfo)
    extra = " ".join(f"-c {name}={value}" for name, value in settings.items())
    params["options"] = f"{params['options']} {extra}" if params.get("options") else extra
    return make_conninfo("", **params)
