"""Least-privilege database roles for awa (``manage.py awa_roles``).

Three NOLOGIN group roles, each with what its processes need and no more:

``owner``
    Owns schema ``awa`` and everything in it; runs ``manage.py migrate``.
    Gets CONNECT and CREATE on the database (``CREATE SCHEMA IF NOT
    EXISTS`` checks CREATE before it looks), and membership in
    ``pg_read_all_stats``: prune's horizon gate (``awa.horizon_pinned``,
    SECURITY DEFINER) reads every session's transaction as the owner.
``worker``
    Runs ``awa_worker`` / ``awa_maintenance``: every row privilege on every
    table, TRUNCATE on the ring partitions only (prune empties ring slots
    with it, which needs the privilege, not ownership), every function; no
    ``pg_read_all_stats`` (job code runs as this role and must not read other
    sessions' queries; see ``sql/schema/roles.sql``).  No superuser, no
    CREATE: the ring partitions a leader adds are created by
    ``awa.ensure_ring_partitions``, which runs as the owner.
``web``
    The web app: enqueue, reads, operator actions (the console and the
    admin run them): SELECT, INSERT, UPDATE, DELETE, never TRUNCATE, no
    CREATE, none of the maintenance functions (rotate, prune, rescue,
    promotion, cleanup, partitions) and no writes to the tables only
    maintenance writes.

Optional login roles join a group (``--login web=app_web``); the owner's
login acts as the owner (``ALTER ROLE ... SET role``) so that what migrate
creates belongs to the owner.  The statements are idempotent: run them
before the first ``migrate`` (roles, schema, default privileges) and again
after every ``migrate`` (grants on what the migration created;
``awa.grant_roles``).  :func:`role_script` is what ``--print-sql`` prints,
:func:`apply_roles` what ``--apply`` runs; passwords are only ever set by
the latter.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from .storage import roles as store
from .storage import substrate
from .storage.base import run

KINDS = ("owner", "worker", "web")
#: The substrate version that brought ``awa.grant_roles`` (every 0.1.0 substrate has it).
GRANTS_SINCE = 1
DEFAULT_NAMES = {"owner": "awa_owner", "worker": "awa_worker", "web": "awa_web"}

# Plain lower-case identifiers: they need no quoting anywhere, and none can
# end a dollar quote or a string literal of the generated statements.
_NAME = re.compile(r"^[a-z_][a-z0-9_]{0,62}$")


def check_role_name(name: str) -> str:
    """``name`` if it is a role name awa_roles accepts, else ``ValueError``."""
    if not _NAME.match(name):
        raise ValueError(
            f"role name {name!r}: use 1 to 63 lower-case letters, digits and underscores, "
            "not starting with a digit"
        )
    if name.startswith("pg_") or name == "public":
        raise ValueError(f"role name {name!r} is reserved by PostgreSQL")
    return name


@dataclass(frozen=True)
class RolePlan:
    """The group roles and the login roles to create in them."""

    owner: str = DEFAULT_NAMES["owner"]
    worker: str = DEFAULT_NAMES["worker"]
    web: str = DEFAULT_NAMES["web"]
    #: Login role per kind ("owner", "worker", "web"), created in that group.
    logins: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.logins) - set(KINDS))
        if unknown:
            raise ValueError(f"login kinds must be among {KINDS}, got {unknown}")
        names = [self.owner, self.worker, self.web, *self.logins.values()]
        for name in names:
            check_role_name(name)
        if len(set(names)) != len(names):
            raise ValueError(f"every role needs a name of its own, got {names}")

    def group(self, kind: str) -> str:
        """The group role of ``kind``."""
        return {"owner": self.owner, "worker": self.worker, "web": self.web}[kind]

    def statements(self) -> list[str]:
        logins = [(self.group(kind), self.logins[kind]) for kind in KINDS if kind in self.logins]
        return store.role_statements(self.owner, self.worker, self.web, logins)


def role_script(plan: RolePlan) -> str:
    """The SQL of ``plan`` as one script for psql (no passwords in it)."""
    lines = [
        "-- awa_django roles (manage.py awa_roles --print-sql).",
        "-- Run as a superuser in the database that holds schema awa: once before the",
        "-- first migrate, and again after every migrate. Every statement is idempotent.",
        f"--   owner   {plan.owner}: owns schema awa, runs the migrations, member of "
        "pg_read_all_stats",
        f"--   worker  {plan.worker}: runs jobs and maintenance, TRUNCATE on ring partitions only",
        f"--   web     {plan.web}: enqueues, reads, operator actions; no TRUNCATE, DDL or "
        "maintenance",
    ]
    lines += [
        f"--   login   {login} in {plan.group(kind)}" for kind, login in sorted(plan.logins.items())
    ]
    lines += [
        "-- Passwords are never printed: use awa_roles --apply --password-env, or psql's",
        "-- \\password command.",
        "",
    ]
    return "\n".join(lines) + "\n" + "".join(f"{s};\n\n" for s in plan.statements())


@dataclass(frozen=True)
class Applied:
    """What :func:`apply_roles` did."""

    statements: int
    #: Substrate version found after the statements ran (None: not installed).
    substrate_version: int | None

    @property
    def objects_granted(self) -> bool:
        """Whether the grants on the objects of schema awa were applied (they
        need the substrate at version 20 or later)."""
        return self.substrate_version is not None and self.substrate_version >= GRANTS_SINCE


def apply_roles(
    plan: RolePlan, *, passwords: Mapping[str, str] | None = None, database: str | None = None
) -> Applied:
    """Run ``plan`` on ``database`` (default ``AWA["DATABASE"]``) in one
    transaction, then set the passwords (kind -> password; the kind needs a
    login role).  The connection's role must be able to create roles and
    grant ``pg_read_all_stats`` (a superuser)."""
    statements = plan.statements()
    for kind, password in (passwords or {}).items():
        if kind not in plan.logins:
            raise ValueError(f"a password for {kind!r} needs a login role (--login {kind}=NAME)")
        if not password:
            raise ValueError(f"the password for {kind!r} is empty")
        statements.append(store.password_statement(plan.logins[kind], password, database))
    count = run(store.apply_statements(statements), database)
    return Applied(count, run(substrate.installed_version(), database))
