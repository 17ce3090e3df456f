"""An installation migrated by one role is handed to the owner by ``awa_roles --apply``.

Its own database: migrated as the superuser (the single-role setup most
projects start with), then ``awa_roles --apply``; afterwards every object
of schema ``awa`` belongs to the owner role, and a later migration run as
the owner's login works on them.
"""

from __future__ import annotations

import uuid

import psycopg
from psycopg import sql

from .conftest import ADMIN_URL, Deployment, _check, _drop, _with


def test_awa_roles_adopts_a_schema_another_role_migrated():
    deployment = Deployment(uuid.uuid4().hex[:10])
    try:
        with psycopg.connect(_with(ADMIN_URL), autocommit=True) as admin:
            admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(deployment.database)))
        _check(deployment.manage("migrate", "awa_django", "-v0"), "migrate")
        args = deployment.role_args()
        _check(deployment.manage("awa_roles", "--apply", "--yes", *args), "awa_roles --apply")
        with deployment.connect() as conn:
            owners = conn.execute(
                "SELECT DISTINCT relowner::regrole::text FROM pg_class"
                " WHERE relnamespace = 'awa'::regnamespace"
                " UNION SELECT DISTINCT proowner::regrole::text FROM pg_proc"
                " WHERE pronamespace = 'awa'::regnamespace"
                " UNION SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'awa'"
            ).fetchall()
            # The project's own tables are the project's business: hand over the one
            # migrate needs.
            conn.execute(
                sql.SQL("ALTER TABLE django_migrations OWNER TO {}").format(
                    sql.Identifier(deployment.owner)
                )
            )
        assert owners == [(deployment.owner,)]
        # The owner can now run the substrate's migrations: every file of the
        # initial one runs again (as a later migration would change the schema).
        owner = deployment.owner_login
        _check(
            deployment.manage("migrate", "awa_django", "zero", "--fake", "-v0", user=owner), "back"
        )
        _check(deployment.manage("migrate", "awa_django", "-v0", user=owner), "forward")
    finally:
        _drop(deployment)
