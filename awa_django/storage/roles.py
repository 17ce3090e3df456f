"""The statements of ``manage.py awa_roles``, and running them.

Role and database names cannot be bind parameters of ``CREATE ROLE`` or
``GRANT``: every statement is a template of ``sql/queries/roles.sql``
composed with :mod:`psycopg.sql` (``Identifier`` for names, ``Literal`` for
the same names as values inside ``DO`` blocks).  :mod:`awa_django.roles`
validates the names before they get here.  The object-level grants are
the substrate's own ``awa.grant_roles`` (``sql/schema/roles.sql``), called with
the names as values.

Passwords are set from a SCRAM-SHA-256 verifier computed by libpq on the
client (``PQencryptPasswordConn``), so the server and its statement log
never see them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg import sql

from ..sql import query
from .base import Execute, Steps, atomic_operation, operation, single
from .connection import django_connection


def _compose(name: str, **parts: sql.Composable) -> str:
    return sql.SQL(query("roles", name)).format(**parts).as_string(None)


def _names(**roles: str) -> dict[str, sql.Composable]:
    """``{kind}`` as an identifier and ``{kind}_name`` as a literal, per role."""
    parts: dict[str, sql.Composable] = {}
    for kind, role in roles.items():
        parts[kind] = sql.Identifier(role)
        parts[f"{kind}_name"] = sql.Literal(role)
    return parts


def role_statements(
    owner: str, worker: str, web: str, logins: Sequence[tuple[str, str]]
) -> list[str]:
    """Every statement for these roles, in order; ``logins`` pairs a group
    role (one of the three) with the login role to create in it."""
    three = _names(owner=owner, worker=worker, web=web)
    statements = [
        _compose("create_group_role", **_names(role=role)) for role in (owner, worker, web)
    ]
    for group, login in logins:
        statements.append(_compose("create_login_role", **_names(role=login)))
        statements.append(
            _compose("grant_membership", group=sql.Identifier(group), role=sql.Identifier(login))
        )
        if group == owner:
            statements.append(_compose("act_as_owner", **_names(role=login), **three))
    statements += [
        _compose(name, **three)
        for name in (
            "read_all_stats",
            "database_privileges",
            "create_schema",
            "schema_privileges",
            "default_privileges",
            "object_privileges",
        )
    ]
    return statements


def password_statement(role: str, password: str, database: str | None = None) -> str:
    """``ALTER ROLE role PASSWORD <verifier>``, the verifier computed by libpq
    over the connection of ``database`` (nothing is sent to the server)."""
    connection = django_connection(database)
    connection.ensure_connection()
    pgconn: Any = connection.connection.pgconn
    verifier = pgconn.encrypt_password(password.encode(), role.encode(), b"scram-sha-256")
    return _compose(
        "set_password", role=sql.Identifier(role), verifier=sql.Literal(verifier.decode())
    )


@atomic_operation
def apply_statements(statements: Sequence[str]) -> Steps[int]:
    """Run the statements in one transaction; returns how many ran."""
    for statement in statements:
        # A statement with parameters is scanned for placeholders: a literal
        # percent sign is written twice.
        yield Execute(statement.replace("%", "%%"))
    return len(statements)


@operation
def current_database() -> Steps[str]:
    """The name of the database this connection is in (as the server knows it)."""
    return str(single((yield Execute.named("roles", "current_database"))))
