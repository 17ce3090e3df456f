"""Health probes: ``healthz`` (liveness) and ``readyz`` (readiness).

Each probe runs a short list of checks against the awa database (the
URLconf's ``database`` kwarg, default ``AWA["DATABASE"]``) and answers
``200 {"status": "ok"}`` when all pass, or ``503 {"status": "unavailable",
"reason": "..."}`` naming the first that failed in general terms only: the
probes need no login, and a driver's error names the database host, port
and role.  The detail goes to the log (logger ``awa_django.health``,
WARNING) and to ``manage.py awa_health``.  A check is a function taking the
database alias that returns nothing or raises :class:`Unavailable` (a
``DatabaseError`` or ``ImproperlyConfigured`` is turned into one); add a
check by adding a function to the probe's tuple.

The checks are cheap on purpose -- no ORM model, no table scan: probes run
every few seconds on every instance.

These are the probes of a web process.  A worker answers its own on its
health listener (``awa_worker --health-addr``, :mod:`awa_django.runtime.health.listener`),
where liveness is its event loop and readiness adds what only the worker
knows (registered, dispatching, not shutting down).  :func:`workers_serving`
is deliberately not a web readiness check: a site whose workers are down
still takes requests and enqueues, and taking it out of the load balancer
would turn a backlog into an outage.  ``manage.py awa_health
--require-workers`` runs it for monitoring.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from contextlib import nullcontext

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError, transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache

from .. import ops
from ..conf import awa_settings
from . import method_not_allowed

SAFE_METHODS = ("GET", "HEAD")
logger = logging.getLogger("awa_django.health")


class Unavailable(Exception):  # noqa: N818 - a probe result, not an error of the caller
    """A health check failed; the message is the probe's ``reason``."""


HealthCheck = Callable[[str], None]


def database_answers(alias: str) -> None:
    """The database answers ``SELECT 1`` on Django's connection for ``alias``."""
    connection = ops.database_connection(alias)
    connection.ensure_connection()
    # is_usable() runs SELECT 1 on the open connection, outside Django's
    # cursor wrapper (so no query is logged or counted).
    if not connection.is_usable():
        if not connection.in_atomic_block:
            # Drop the dead connection so that the next probe reconnects.
            connection.close()
        raise Unavailable(f"database {alias!r} did not answer SELECT 1")


def substrate_installed(alias: str) -> None:
    """The awa substrate is installed, at least at the version this code needs.

    A newer substrate is ready: during a rolling deploy the previous release
    keeps running against the schema the new release migrated to.
    """
    version = ops.substrate_version(database=alias)
    needed = ops.required_substrate_version()
    if version is None:
        raise Unavailable(f"the awa substrate is not installed in database {alias!r}")
    if version < needed:
        raise Unavailable(
            f"the awa substrate in database {alias!r} is version {version}; "
            f"this code needs {needed} (run manage.py migrate awa_django)"
        )


def workers_serving(alias: str) -> None:
    """Every queue of ``AWA["QUEUES"]`` is listed by a live runtime (a heartbeat
    within ``HEARTBEAT_STALENESS``).  Not a web readiness check (see above)."""
    settings = awa_settings()
    live = ops.list_runtimes(database=alias)
    served = {queue for info in live if info.alive for queue in info.queues}
    missing = [queue for queue in settings.queues if queue not in served]
    if missing:
        raise Unavailable(f"no live worker serves {', '.join(missing)}")


LIVENESS_CHECKS: Sequence[HealthCheck] = (database_answers,)
READINESS_CHECKS: Sequence[HealthCheck] = (database_answers, substrate_installed)


def _first_failure(
    checks: Sequence[HealthCheck], database: str | None
) -> tuple[HealthCheck | None, str] | None:
    """Run ``checks`` in order: the first that fails and why (None: the set-up)."""
    failing: HealthCheck | None = None
    try:
        alias = ops.database_alias(database)
        # Under ATOMIC_REQUESTS the probe runs in the request's transaction:
        # each check gets a savepoint, so a failed statement cannot abort it.
        in_transaction = ops.database_connection(alias).in_atomic_block
        for check in checks:
            failing = check
            with transaction.atomic(using=alias) if in_transaction else nullcontext():
                check(alias)
    except Unavailable as exc:
        return failing, str(exc)
    except (DatabaseError, ImproperlyConfigured) as exc:
        first_line = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        return failing, f"{type(exc).__name__}: {first_line}"
    return None


def failed_check(checks: Sequence[HealthCheck], database: str | None = None) -> str | None:
    """Run ``checks`` in order; the detailed reason of the first that fails, or None.

    For operators (``manage.py awa_health``): it may name the database's
    host, port and role.  The HTTP probes answer :data:`PUBLIC_REASONS`.
    """
    failure = _first_failure(checks, database)
    return None if failure is None else failure[1]


#: What an HTTP probe answers when a check fails (nothing about the set-up).
PUBLIC_REASONS: Mapping[HealthCheck | None, str] = {
    None: "the probe cannot reach its database (see the server log)",
    database_answers: "the database does not answer",
    substrate_installed: "the awa substrate is not installed or is older than this code needs",
    workers_serving: "not every queue has a live worker",
}

#: What each check is called in ``manage.py awa_health`` and its JSON.
CHECK_NAMES: Mapping[HealthCheck, str] = {
    database_answers: "database",
    substrate_installed: "substrate",
    workers_serving: "workers",
}


def check_each(
    checks: Sequence[HealthCheck], database: str | None = None
) -> dict[str, dict[str, object]]:
    """Run every check; ``{name: {"ok": True} | {"ok": False, "error": reason}}``.

    Unlike a probe, a failing check does not hide the next ones -- except
    that nothing else is tried once the database does not answer.
    """
    results: dict[str, dict[str, object]] = {}
    unreachable = False
    for check in checks:
        name = CHECK_NAMES.get(check, check.__name__)
        if unreachable:
            results[name] = {"ok": False, "error": "not checked: the database does not answer"}
            continue
        reason = failed_check([check], database)
        results[name] = {"ok": True} if reason is None else {"ok": False, "error": reason}
        unreachable = reason is not None and check is database_answers
    return results


def _probe(
    request: HttpRequest, checks: Sequence[HealthCheck], database: str | None
) -> HttpResponse:
    if request.method not in SAFE_METHODS:
        return method_not_allowed(request.method, SAFE_METHODS)
    failure = _first_failure(checks, database)
    if failure is not None:
        check, detail = failure
        logger.warning("%s answered 503: %s", request.path, detail)
        public = PUBLIC_REASONS.get(check, "a health check failed (see the server log)")
        return JsonResponse({"status": "unavailable", "reason": public}, status=503)
    return JsonResponse({"status": "ok"})


@never_cache
def healthz(request: HttpRequest, database: str | None = None) -> HttpResponse:
    """Liveness: 200 when the awa database answers, else 503 with the reason."""
    return _probe(request, LIVENESS_CHECKS, database)


@never_cache
def readyz(request: HttpRequest, database: str | None = None) -> HttpResponse:
    """Readiness: the liveness check, and the substrate is installed and current."""
    return _probe(request, READINESS_CHECKS, database)
