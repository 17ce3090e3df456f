"""``manage.py awa_roles`` without a database: what it prints and refuses.

The statements themselves are exercised on a real database by
test_roles.py; here: the script is deterministic, holds no secret, and
bad names or flag combinations are usage errors before anything runs.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import CommandError, call_command

from awa_django.roles import RolePlan, check_role_name, role_script


def printed(*args: str) -> str:
    out = io.StringIO()
    call_command("awa_roles", "--print-sql", *args, stdout=out)
    return out.getvalue()


def test_the_script_names_every_role_and_is_the_same_every_time():
    args = ("--web", "shop_web", "--login", "worker=shop_worker_1", "--login", "owner=shop_mig")
    script = printed(*args)
    assert script == printed(*args)
    assert script == role_script(
        RolePlan(web="shop_web", logins={"worker": "shop_worker_1", "owner": "shop_mig"})
    )
    for fragment in (
        'CREATE ROLE "awa_owner" NOLOGIN',
        'CREATE ROLE "shop_web" NOLOGIN',
        'GRANT "awa_worker" TO "shop_worker_1"',
        "ALTER ROLE \"shop_mig\" SET role = 'awa_owner'",
        'GRANT pg_read_all_stats TO "awa_owner"',
        'CREATE SCHEMA IF NOT EXISTS awa AUTHORIZATION "awa_owner"',
        'GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO "shop_web"',
        "PERFORM awa.grant_roles('awa_owner', 'awa_worker', 'shop_web')",
    ):
        assert fragment in script, fragment
    # The web role is never given TRUNCATE, and nobody CREATE on the schema.
    web_grants = [line for line in script.splitlines() if line.rstrip().endswith('"shop_web";')]
    assert web_grants and not any("TRUNCATE" in line for line in web_grants)
    assert "GRANT CREATE ON SCHEMA" not in script
    assert "PASSWORD" not in script.split("-- Passwords are never printed")[1]


def test_passwords_are_never_printed(monkeypatch):
    monkeypatch.setenv("AWA_TEST_SECRET", "hunter2")
    with pytest.raises(CommandError, match="needs --apply") as raised:
        printed("--login", "web=shop_web", "--password-env", "web=AWA_TEST_SECRET")
    assert raised.value.returncode == 2


@pytest.mark.parametrize(
    "args",
    [
        ("--web", "Shop"),
        ("--web", "shop-web"),
        ("--worker", "pg_monitor"),
        ("--owner", "x$$y"),
        ("--owner", "a" * 64),
        ("--login", "admin=shop"),
        ("--login", "web"),
    ],
)
def test_bad_names_are_refused(args):
    with pytest.raises(CommandError):
        printed(*args)


@pytest.mark.parametrize(
    "args",
    [
        ("--web", "awa_worker"),
        ("--login", "web=awa_owner"),
        ("--login", "web=shop", "--login", "worker=shop"),
        ("--login", "web=shop_a", "--login", "web=shop_b"),
    ],
)
def test_every_role_needs_its_own_name(args):
    with pytest.raises(CommandError) as raised:
        printed(*args)
    assert raised.value.returncode == 2


def test_role_names_are_plain_identifiers():
    assert check_role_name("shop_web_2") == "shop_web_2"
    for bad in ("", "1shop", "shop web", "shop'; DROP", "public", 'a"b'):
        with pytest.raises(ValueError):
            check_role_name(bad)
