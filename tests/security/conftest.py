"""A database per test module set up the way the roles guide says.

:func:`deployment` creates a database, the roles of ``manage.py awa_roles``
(the statements of ``--print-sql``, run as the superuser), migrates it as
the owner's login role, and runs ``awa_roles --apply``; the tests then act
as the web and worker login roles.  Roles belong to the cluster, not to a
database: every name carries a random suffix, and the database and every
role are dropped afterwards, also when the set-up fails half-way.  No
existing role is touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from tests.conftest import ROOT

ADMIN_URL = os.environ.get("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres")
WEB_PASSWORD = "web-secret-not-in-any-log"

# What awa.grant_roles and the migration-time rule must leave behind, read
# as the superuser: the ACLs of every object of schema awa.
ACLS = """
SELECT 'rel ' || c.oid::regclass || ' ' || COALESCE(c.relacl::text, '-')
  FROM pg_class c WHERE c.relnamespace = 'awa'::regnamespace
UNION ALL
SELECT 'fn ' || p.oid::regprocedure || ' ' || COALESCE(p.proacl::text, '-')
  FROM pg_proc p WHERE p.pronamespace = 'awa'::regnamespace
UNION ALL
SELECT 'schema ' || COALESCE(n.nspacl::text, '-') FROM pg_namespace n WHERE n.nspname = 'awa'
UNION ALL
SELECT 'default ' || d.defaclobjtype::text || ' ' || d.defaclacl::text FROM pg_default_acl d
ORDER BY 1
"""


def _with(url: str, *, user: str | None = None, dbname: str | None = None) -> str:
    parts = urlsplit(url)
    netloc = parts.netloc.rsplit("@", 1)[-1]
    password = f":{parts.password}" if parts.password and user is None else ""
    netloc = f"{user or parts.username or 'postgres'}{password}@{netloc}"
    return urlunsplit(parts._replace(netloc=netloc, path=f"/{dbname or parts.path[1:]}"))


@dataclass
class Deployment:
    """One database and its roles; ``owner``, ``worker``, ``web`` are the
    group roles, ``*_login`` the login roles the processes use."""

    suffix: str
    database: str = ""
    owner: str = ""
    worker: str = ""
    web: str = ""
    owner_login: str = ""
    worker_login: str = ""
    web_login: str = ""
    #: Facts recorded between the migration and the second ``awa_roles --apply``.
    after_migrate: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        base = f"awa_sec_{self.suffix}"
        self.database = base
        for kind in ("owner", "worker", "web"):
            setattr(self, kind, f"{base}_{kind}")
            setattr(self, f"{kind}_login", f"{base}_{kind}_login")

    @property
    def roles(self) -> list[str]:
        """Login roles first: they are dropped before their groups."""
        return [
            self.owner_login,
            self.worker_login,
            self.web_login,
            self.owner,
            self.worker,
            self.web,
        ]

    def url(self, user: str | None = None) -> str:
        """``DATABASE_URL`` of this database as ``user`` (default: the superuser)."""
        return _with(ADMIN_URL, user=user, dbname=self.database)

    def conninfo(self, user: str | None = None) -> str:
        params = conninfo_to_dict(self.url(user))
        return make_conninfo(**params)

    def connect(self, user: str | None = None) -> psycopg.Connection:
        return psycopg.connect(self.conninfo(user), autocommit=True)

    def role_args(self) -> list[str]:
        return [
            "--owner", self.owner, "--worker", self.worker, "--web", self.web,
            "--login", f"owner={self.owner_login}",
            "--login", f"worker={self.worker_login}",
            "--login", f"web={self.web_login}",
        ]  # fmt: skip

    def manage_env(self, user: str | None = None, env: dict | None = None) -> dict[str, str]:
        """The environment of a ``manage.py`` process on this database as ``user``."""
        full_env = dict(os.environ)
        full_env.update(
            DATABASE_URL=self.url(user),
            PYTHONPATH=os.pathsep.join([str(ROOT), str(ROOT / "testproject")]),
            **(env or {}),
        )
        return full_env

    def manage(
        self, *args: str, user: str | None = None, env: dict | None = None, timeout: float = 180
    ) -> subprocess.CompletedProcess:
        """``testproject/manage.py`` against this database as ``user``."""
        return subprocess.run(
            [sys.executable, str(ROOT / "testproject" / "manage.py"), *args],
            env=self.manage_env(user, env),
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def acls(self) -> list[str]:
        with self.connect() as conn:
            return [row[0] for row in conn.execute(ACLS).fetchall()]


def _drop(deployment: Deployment) -> None:
    with psycopg.connect(_with(ADMIN_URL), autocommit=True) as admin:
        admin.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(deployment.database)
            )
        )
        for role in deployment.roles:
            exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role]).fetchone()
            if exists:
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def _check(result: subprocess.CompletedProcess, what: str) -> subprocess.CompletedProcess:
    assert result.returncode == 0, f"{what} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture(scope="module")
def deployment() -> Iterator[Deployment]:
    deployment = Deployment(uuid.uuid4().hex[:10])
    try:
        with psycopg.connect(_with(ADMIN_URL), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(deployment.database)))
        # 1. The roles, as the printed script run by a superuser.
        script = _check(
            deployment.manage("awa_roles", "--print-sql", *deployment.role_args()), "--print-sql"
        ).stdout
        with deployment.connect() as conn:
            conn.execute(script)
            # The owner owns the database, so migrate can create Django's tables too.
            conn.execute(
                sql.SQL("ALTER DATABASE {} OWNER TO {}").format(
                    sql.Identifier(deployment.database), sql.Identifier(deployment.owner)
                )
            )
        # 2. The migrations, as the owner's login role.
        _check(deployment.manage("migrate", "-v0", user=deployment.owner_login), "migrate")
        with deployment.connect() as conn:
            deployment.after_migrate = dict(
                zip(
                    ("web_rotates", "worker_rotates", "web_truncates"),
                    conn.execute(
                        "SELECT has_function_privilege(%(web)s, 'awa.rotate_ring(text)',"
                        "                              'EXECUTE'),"
                        "       has_function_privilege(%(worker)s, 'awa.rotate_ring(text)',"
                        "                              'EXECUTE'),"
                        "       has_table_privilege(%(web)s, 'awa.ready_entries_0', 'TRUNCATE')",
                        {"web": deployment.web_login, "worker": deployment.worker_login},
                    ).fetchone(),
                    strict=True,
                )
            )
        # 3. awa_roles --apply after the migration, with a password.
        _check(
            deployment.manage(
                "awa_roles",
                "--apply",
                "--yes",
                *deployment.role_args(),
                "--password-env",
                "web=AWA_SECURITY_WEB_PASSWORD",
                env={"AWA_SECURITY_WEB_PASSWORD": WEB_PASSWORD},
            ),
            "awa_roles --apply",
        )
        yield deployment
    finally:
        _drop(deployment)
