"""System checks: configuration (always) and substrate (with ``--database``).

``manage.py check`` reports every problem in ``settings.AWA`` at once, each
naming its key, and warns about settings that are accepted but have no
effect yet.  ``manage.py check --database <alias>`` also verifies that the
awa substrate is installed at the version this code needs, and
``manage.py check --deploy --database <alias>`` runs the doctor
(:mod:`awa_django.doctor`, tag ``awa``) on it.
"""

from __future__ import annotations

import importlib
import sys
import uuid
from collections.abc import Sequence
from types import FrameType
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, Info, Tags, register
from django.core.checks import Warning as CheckWarning
from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, connections
from django.db.migrations.loader import MigrationLoader
from django.urls import NoReverseMatch, reverse

from .conf import AwaSettings, QueueConfig, parse_settings, unimplemented_settings
from .storage import substrate
from .storage.base import run

APP_LABEL = "awa_django"
# Where the hints send readers: a page of the documentation (docs/ in the
# source distribution), never a file a user of the package does not have.
SETTINGS_REFERENCE = "the awa_django settings reference (docs/reference/settings)"
SETTINGS_HINT = f"Every key, its accepted values and its default: see {SETTINGS_REFERENCE}."


def _parsed() -> tuple[AwaSettings, list[Error]]:
    parsed, problems = parse_settings(getattr(settings, "AWA", None))
    return parsed, [Error(str(p), hint=SETTINGS_HINT, id="awa_django.E001") for p in problems]


@register(APP_LABEL)
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    parsed, errors = _parsed()
    messages: list[CheckMessage] = list(errors)
    messages.extend(
        CheckWarning(
            str(problem),
            hint="Leave it at its default (or remove it) until a release implements it; "
            f"see {SETTINGS_REFERENCE}.",
            id="awa_django.W001",
        )
        for problem in unimplemented_settings(parsed)
    )
    if parsed.heartbeat_interval * 2 <= parsed.heartbeat_staleness < parsed.heartbeat_interval * 3:
        messages.append(
            CheckWarning(
                f"AWA[HEARTBEAT_STALENESS] is {parsed.heartbeat_staleness:g}s, less than 3x "
                f"HEARTBEAT_INTERVAL ({parsed.heartbeat_interval:g}s): one late heartbeat can "
                "get a live worker's attempts rescued and run twice",
                hint="Set HEARTBEAT_STALENESS to at least 3 x HEARTBEAT_INTERVAL.",
                id="awa_django.W003",
            )
        )
    messages.extend(_weighted_only(parsed))
    messages.extend(_telemetry(parsed))
    messages.extend(_database_alias("DATABASE", parsed.database))
    if parsed.session_database is not None:
        messages.extend(_database_alias("SESSION_DATABASE", parsed.session_database))
    if parsed.outbox_database is not None:
        messages.extend(_database_alias("OUTBOX_DATABASE", parsed.outbox_database))
        if parsed.outbox_database == parsed.database:
            messages.append(
                Error(
                    f"AWA[OUTBOX_DATABASE] and AWA[DATABASE] are both {parsed.database!r}: "
                    "the outbox is for a queue in a database of its own",
                    hint="Set DATABASE to the queue's alias, or drop OUTBOX_DATABASE (jobs in "
                    "the application's own database join its transactions without one).",
                    id="awa_django.E008",
                )
            )
    return messages


def _database_alias(key: str, alias: str) -> list[CheckMessage]:
    """E002: ``AWA[key]`` names no PostgreSQL alias of ``DATABASES`` (or, for
    ``SESSION_DATABASE``, one marked as going through a pooler)."""
    database = settings.DATABASES.get(alias)
    if database is None:
        problem = f"alias {alias!r} is not in settings.DATABASES"
    elif "postgresql" not in database.get("ENGINE", ""):
        problem = (
            f"{alias!r} uses {database.get('ENGINE')!r}; "
            "awa_django needs django.db.backends.postgresql"
        )
    elif key == "SESSION_DATABASE" and database.get("DISABLE_SERVER_SIDE_CURSORS"):
        problem = (
            f"{alias!r} sets DISABLE_SERVER_SIDE_CURSORS (a transaction-mode pooler); "
            "LISTEN and the election need a direct connection"
        )
    else:
        return []
    return [Error(f"AWA[{key}]: {problem}", id="awa_django.E002")]


def _weighted_only(parsed: AwaSettings) -> list[CheckMessage]:
    """W004: ``min_workers`` / ``weight`` set while there is no shared pool to weigh."""
    if parsed.global_max_workers is not None:
        return []
    default = QueueConfig("default")
    return [
        CheckWarning(
            f"AWA[QUEUES][{name!r}][{option!r}]: has no effect without GLOBAL_MAX_WORKERS "
            "(each queue owns its max_workers)",
            hint="Set AWA['GLOBAL_MAX_WORKERS'] to share one pool of permits by min_workers "
            f"and weight, or leave {option} at its default; see {SETTINGS_REFERENCE}.",
            id="awa_django.W004",
        )
        for name, queue in parsed.queues.items()
        for option in ("min_workers", "weight")
        if getattr(queue, option) != getattr(default, option)
    ]


def _telemetry(parsed: AwaSettings) -> list[CheckMessage]:
    """E005: ``TELEMETRY`` is True but OpenTelemetry cannot be imported.

    Only with True: ``"auto"`` means "when installed", and False must not
    import it at all.
    """
    if parsed.telemetry is not True:
        return []
    try:
        for module in ("opentelemetry.trace", "opentelemetry.metrics"):
            importlib.import_module(module)
    except ImportError as exc:
        return [
            Error(
                f"AWA[TELEMETRY] is True but OpenTelemetry cannot be imported: {exc}",
                hint="Install the otel extra (pip install 'awa-django[otel]'), or set "
                'TELEMETRY to "auto" (record when installed) or False.',
                id="awa_django.E005",
            )
        ]
    return []


@register(APP_LABEL, Tags.security)
def check_callback_secret(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """W005: the callback receiver is routed but ``CALLBACK_HMAC_SECRET`` is not set.

    Anyone who can reach the URL and learns a live callback id can then
    complete, fail, retry or resume it.  Routed means ``awa:callback``
    reverses in the root URLconf.
    """
    parsed, problems = parse_settings(getattr(settings, "AWA", None))
    if problems or parsed.callback_hmac_secret is not None:
        return []  # invalid settings are check_settings' to report
    if not getattr(settings, "ROOT_URLCONF", None):
        return []  # a worker-only settings module routes nothing (reverse() would raise)
    try:
        where = reverse("awa:callback", kwargs={"callback_id": uuid.UUID(int=0), "action": "retry"})
    except (NoReverseMatch, ImproperlyConfigured):
        return []
    return [
        CheckWarning(
            f"the callback receiver is routed ({where.rsplit('/', 2)[0]}/...) but "
            "AWA[CALLBACK_HMAC_SECRET] is not set: anyone who can reach it and knows a live "
            "callback id can resolve that callback",
            hint="Set AWA['CALLBACK_HMAC_SECRET'] and sign requests with X-Awa-Timestamp and "
            "X-Awa-Signature (see the callback receiver how-to), or do not include "
            "awa_django.urls where the callback senders cannot be trusted.",
            id="awa_django.W005",
        )
    ]


def _pending_migrations(alias: str) -> int:
    """How many awa_django migrations are not recorded as applied on ``alias``."""
    loader = MigrationLoader(connections[alias], ignore_no_migrations=True)
    return sum(
        1
        for node in loader.graph.nodes
        if node[0] == APP_LABEL and node not in loader.applied_migrations
    )


def _migrate_applies_awa() -> bool:
    """Whether these checks run inside a ``migrate`` that is about to apply
    awa_django's migrations (all apps, or awa_django named): W002 would tell
    its user to run the very command that is fixing it.  ``--plan`` and
    ``--check`` apply nothing, so they still get the warning."""
    from django.core.management.commands.migrate import Command as Migrate

    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        options = frame.f_locals.get("options")
        if isinstance(frame.f_locals.get("self"), Migrate) and isinstance(options, dict):
            return (
                options.get("app_label") in (None, APP_LABEL)
                and not options.get("plan")
                and not options.get("check_unapplied")
            )
        frame = frame.f_back
    return False


@register(Tags.database)
def check_substrate(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """Compare the installed substrate with the migration state of ``awa_django``.

    ``manage.py migrate`` runs the database checks before it migrates, so
    anything an unmigrated database shows must not be an Error, or the
    command that installs the substrate would refuse to run.  What migrate
    can fix is therefore a Warning (W002): awa_django migrations are pending.
    ``migrate`` itself, when it is about to apply them, does not print it.
    When every awa_django migration is recorded as applied and the substrate
    is still missing (E003) or older than this code needs (E004), the
    database was changed behind Django's back: migrate has nothing left to
    apply and cannot repair it, so those stay Errors.
    """
    parsed, errors = _parsed()
    alias = parsed.database
    if errors or not databases or alias not in databases:
        return []
    migrate = f"python manage.py migrate {APP_LABEL} --database {alias}"
    try:
        pending = _pending_migrations(alias)
        version = run(substrate.installed_version(), alias)
    except DatabaseError as exc:
        return [
            Error(f"awa_django could not inspect database {alias!r}: {exc}", id="awa_django.E003")
        ]
    needed = substrate.SCHEMA_VERSION
    if version is None:
        state = f"the awa substrate is not installed in database {alias!r}"
    elif version < needed:
        state = f"the awa substrate in {alias!r} is version {version}; this code needs {needed}"
    elif pending:
        state = f"the awa substrate in {alias!r} is up to date"
    else:
        return []
    if pending:
        if _migrate_applies_awa():
            return []
        return [
            CheckWarning(
                f"{state}; {pending} awa_django migration(s) pending",
                hint=f"Run: {migrate}",
                id="awa_django.W002",
            )
        ]
    return [
        Error(
            f"{state}, yet every awa_django migration is recorded as applied",
            hint="The database was changed outside migrations, so migrate has nothing to "
            "apply. Restore the awa schema, or mark awa_django unapplied with python manage.py "
            f"migrate {APP_LABEL} zero --fake --skip-checks --database {alias} and then run "
            f"{migrate} (the substrate SQL is idempotent).",
            id="awa_django.E003" if version is None else "awa_django.E004",
        )
    ]


@register(Tags.database)
def check_outbox(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """W006: outbox mode is on and ``OUTBOX_DATABASE`` holds no outbox (a
    database migrated before outbox mode was turned on: ``migrate`` has
    nothing left to apply there).  A warning, since ``migrate`` runs the
    database checks first and may be about to install it."""
    parsed, errors = _parsed()
    alias = parsed.outbox_database
    if errors or alias is None or not databases or alias not in databases:
        return []
    from .storage import outbox

    try:
        if run(outbox.installed(), alias):
            return []
    except DatabaseError as exc:
        return [
            CheckWarning(f"could not inspect the outbox in {alias!r}: {exc}", id="awa_django.W006")
        ]
    return [
        CheckWarning(
            f"AWA[OUTBOX_DATABASE] is {alias!r}, which holds no outbox: enqueue will fail",
            hint=f"Run: python manage.py migrate --database {alias}; if awa_django's "
            "migrations are already applied there, python manage.py awa_relay --install",
            id="awa_django.W006",
        )
    ]


# Doctor findings another check already reports: the substrate state
# (check_substrate) and the heartbeat ratio (W003).
_REPORTED_ELSEWHERE = {"awa.D000", "awa.D009"}
_CHECK_LEVEL = {"error": Error, "warning": CheckWarning, "info": Info}


@register("awa", Tags.database, deploy=True)
def check_doctor(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """The doctor's findings as check messages (``awa_django.D001`` ...).

    A deploy check, so plain ``manage.py check`` and ``migrate`` never run
    it, and it touches the database only when ``--database`` names the awa
    alias.  Its NOTIFY round trip waits at most ``NOTIFY_TIMEOUT`` seconds.
    """
    parsed, errors = _parsed()
    alias = parsed.database
    if errors or not databases or alias not in databases:
        return []
    # Imported here: every manage.py command loads this module, few run the doctor.
    from .doctor import diagnose

    return [
        _CHECK_LEVEL[finding.severity](
            finding.title,
            hint=finding.fix,
            id=finding.code.replace("awa.", f"{APP_LABEL}.", 1),
        )
        for finding in diagnose(alias)
        if finding.code not in _REPORTED_ELSEWHERE
    ]


def _encrypted_kinds_and_queues(parsed: AwaSettings) -> list[str]:
    """What asks for encryption: queues with ``encrypt`` and registered
    ``@job(encrypt=True)`` kinds (by name, for the message)."""
    from .jobs import registry

    asked = [f"queue {name!r}" for name, queue in parsed.queues.items() if queue.encrypt]
    return asked + [f"job kind {job.kind!r}" for job in registry if job.encrypt]


@register(APP_LABEL)
def check_atomic_in_outbox_mode(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """W007: outbox mode and ``@job(atomic=True)`` kinds.  An atomic handler's
    transaction is on the queue's database; with the queue in a database of
    its own, the ORM writes it makes to the application's are not part of it."""
    from .jobs import registry

    parsed, errors = _parsed()
    if errors or parsed.outbox_database is None:
        return []
    atomic = sorted(job.kind for job in registry if job.atomic)
    if not atomic:
        return []
    return [
        CheckWarning(
            f"job kind(s) {', '.join(atomic)} are @job(atomic=True), but the queue is in a "
            f"database of its own (AWA['DATABASE'] = {parsed.database!r}): their handlers' "
            f"writes to {parsed.outbox_database!r} do not commit with their completion",
            hint="Keep such handlers idempotent, or keep the queue in the application's "
            "database (see the queue-database how-to).",
            id="awa_django.W007",
        )
    ]


@register(APP_LABEL, Tags.security)
def check_encryption(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    """E006: encryption is asked for without a key or without the ``crypto`` extra."""
    parsed, errors = _parsed()
    if errors:
        return []
    messages: list[CheckMessage] = []
    asked = _encrypted_kinds_and_queues(parsed)
    if asked and parsed.encryption_keys:
        try:
            importlib.import_module("cryptography.fernet")
        except ImportError:
            messages.append(
                Error(
                    f"{', '.join(asked)} asks for encryption, but the cryptography package "
                    "is not installed",
                    hint="pip install 'awa-django[crypto]'",
                    id="awa_django.E006",
                )
            )
    elif asked:
        messages.append(
            Error(
                f"{', '.join(asked)} asks for encryption, but AWA['ENCRYPTION_KEYS'] is not set",
                hint="Generate a key with python -c 'from cryptography.fernet import Fernet; "
                "print(Fernet.generate_key().decode())' and list it in AWA['ENCRYPTION_KEYS'] "
                "(read it from the environment, e.g. with django-environ).",
                id="awa_django.E006",
            )
        )
    return messages


@register(APP_LABEL, Tags.database, deploy=True)
def check_encryption_keys_in_use(
    app_configs: Sequence[AppConfig] | None = None,
    databases: Sequence[str] | None = None,
    **kwargs: Any,
) -> list[CheckMessage]:
    """E007: a key id that stored jobs still need is not in
    ``ENCRYPTION_KEYS`` -- a key dropped too soon, whose jobs no worker
    could open.  A deploy check with ``--database`` (``manage.py check
    --deploy --database ALIAS``): it reads every table that can hold a
    sealed value, which ``migrate`` should not wait for."""
    parsed, errors = _parsed()
    alias = parsed.database
    if errors or not databases or alias not in databases:
        return []
    from . import ops

    messages: list[CheckMessage] = []
    try:
        version = run(substrate.installed_version(), alias)
        if version is None or version < substrate.SCHEMA_VERSION:
            return []  # the substrate check reports it
        usages = ops.key_status(database=alias)
    except DatabaseError as exc:
        return [Error(f"could not read the stored encryption key ids: {exc}", id="awa_django.E007")]
    for usage in usages:
        if usage.missing:
            where = ", ".join(f"{n} {place}" for place, n in usage.jobs.items() if n)
            messages.append(
                Error(
                    f"stored jobs need encryption key id {usage.key_id} ({where}), which "
                    "AWA['ENCRYPTION_KEYS'] does not hold: no worker could open them",
                    hint="Put the key back in ENCRYPTION_KEYS (after the sealing one) until "
                    "`manage.py awa_keys status` shows no job needs it.",
                    id="awa_django.E007",
                )
            )
    return messages
