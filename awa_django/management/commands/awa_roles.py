"""``manage.py awa_roles``: the least-privilege roles, printed or applied."""

from __future__ import annotations

import argparse
import os
from typing import Any

import psycopg
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DatabaseError

from awa_django.management.options import add_database_argument, add_yes_argument
from awa_django.management.output import Output, confirm_change, usage_error
from awa_django.roles import DEFAULT_NAMES, GRANTS_SINCE, KINDS, RolePlan, apply_roles, role_script
from awa_django.roles import check_role_name as _check_role_name


def _role_name(value: str) -> str:
    try:
        return _check_role_name(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _pair(value: str) -> tuple[str, str]:
    kind, sep, name = value.partition("=")
    if not sep or kind not in KINDS or not name:
        raise argparse.ArgumentTypeError(
            f"expected KIND=VALUE with KIND one of {', '.join(KINDS)}, got {value!r}"
        )
    return kind, name


def _login(value: str) -> tuple[str, str]:
    kind, name = _pair(value)
    return kind, _role_name(name)


class Command(BaseCommand):
    help = (
        "Create the least-privilege roles: an owner that owns schema awa and runs the "
        "migrations (pg_read_all_stats, so prune's horizon gate, which runs as the owner, sees "
        "every session's transaction), a worker role (no superuser; TRUNCATE on ring "
        "partitions only) and a web role that enqueues and reads but cannot run "
        "maintenance, DDL or TRUNCATE. Idempotent: run it before the first migrate and again "
        "after every migrate. Example: manage.py awa_roles --login web=shop_web "
        "--login worker=shop_worker --print-sql"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        mode = parser.add_mutually_exclusive_group(required=True)
        mode.add_argument(
            "--print-sql",
            action="store_true",
            help="Print the statements (to review them, or to run them with psql as a "
            "superuser); connects to no database and prints no password.",
        )
        mode.add_argument(
            "--apply",
            action="store_true",
            help="Run the statements in one transaction on the --database connection, whose "
            "role must be a superuser (or may create roles and grant pg_read_all_stats).",
        )
        for kind, what in (
            ("owner", "the group role that owns schema awa"),
            ("worker", "the group role of awa_worker and awa_maintenance"),
            ("web", "the group role of the web app"),
        ):
            parser.add_argument(
                f"--{kind}",
                type=_role_name,
                default=DEFAULT_NAMES[kind],
                metavar="ROLE",
                help=f"Name of {what} (NOLOGIN; default {DEFAULT_NAMES[kind]}).",
            )
        parser.add_argument(
            "--login",
            action="append",
            type=_login,
            default=[],
            metavar="KIND=ROLE",
            help="Also create the login role ROLE (if missing) as a member of the KIND group "
            "(owner, worker or web), e.g. --login web=shop_web (repeatable). The owner's "
            "login acts as the owner, so what migrate creates belongs to the owner.",
        )
        parser.add_argument(
            "--password-env",
            action="append",
            type=_pair,
            default=[],
            metavar="KIND=VARIABLE",
            help="With --apply: set the password of KIND's login role from the environment "
            "variable VARIABLE, e.g. --password-env web=SHOP_WEB_PASSWORD (repeatable). "
            "Only a SCRAM-SHA-256 verifier computed here reaches the server.",
        )
        add_yes_argument(parser)
        add_database_argument(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        logins = dict(options["login"])
        if len(logins) != len(options["login"]):
            raise usage_error("--login: one login role per kind")
        try:
            plan = RolePlan(options["owner"], options["worker"], options["web"], logins)
        except ValueError as exc:
            raise usage_error(str(exc)) from None
        if options["print_sql"]:
            if options["password_env"]:
                raise usage_error("--password-env needs --apply: --print-sql prints no secrets")
            self.stdout.write(role_script(plan), ending="")
            return
        passwords = {}
        for kind, variable in options["password_env"]:
            if kind not in logins:
                raise usage_error(f"--password-env {kind}=...: needs --login {kind}=ROLE")
            value = os.environ.get(variable)
            if not value:
                raise usage_error(
                    f"--password-env {kind}={variable}: the variable is unset or empty"
                )
            passwords[kind] = value
        summary = (
            f"create or update roles {plan.owner} (owner), {plan.worker} (worker), "
            f"{plan.web} (web)"
            + "".join(f", login {name} in {plan.group(kind)}" for kind, name in logins.items())
            + ", and grant their privileges on schema awa"
        )
        confirm_change(out, options["database"], summary, assume_yes=options["yes"])
        try:
            applied = apply_roles(plan, passwords=passwords, database=options["database"])
        except (DatabaseError, psycopg.Error) as exc:
            raise CommandError(f"awa_roles --apply failed, nothing changed: {exc}") from None
        out.line(f"applied {applied.statements} statements")
        version = applied.substrate_version
        if version is None:
            out.line(
                "schema awa holds no substrate yet, so only the roles, the schema and the "
                "default privileges were set: run manage.py migrate as the owner's login, then "
                "awa_roles --apply again"
            )
        elif not applied.objects_granted:
            out.line(
                f"the substrate is at version {version}; the grants on its objects need "
                f"version {GRANTS_SINCE}: run manage.py migrate as the role that ran it so "
                "far, then awa_roles --apply again (it hands schema awa to the owner)"
            )
        else:
            out.line(f"schema awa and its objects belong to {plan.owner}; privileges granted")
