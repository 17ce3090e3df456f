"""External callbacks: finish, fail, retry or resume an attempt from outside.

A handler that registered a callback (``ctx.register_callback``) waits for
one of these, called by the callback views (``awa_django.views.callbacks``)
or by code.  Each resolves the attempt in one statement that also checks
the attempt still waits for that callback, so a late or repeated call
raises ``CallbackNotFound`` and changes nothing.
"""

from __future__ import annotations

import uuid
from typing import Any

from asgiref.sync import sync_to_async

from ..conf import awa_settings
from ..domain import sealing
from ..domain.payload import to_json
from ..domain.pgtext import clean_text
from ..exceptions import CallbackNotFound, InvalidJob
from ..storage import jobs as job_store
from ..storage import leases
from ..storage.base import run
from .audit import audited


def _resolve(
    callback_id: uuid.UUID | str,
    action: str,
    *,
    payload: Any = None,
    error: str | None = None,
    actor: str | None,
    database: str | None,
) -> str:
    try:
        key = callback_id if isinstance(callback_id, uuid.UUID) else uuid.UUID(str(callback_id))
    except ValueError:
        raise CallbackNotFound(f"no callback {callback_id!r}") from None
    text = None if payload is None else to_json(payload, "callback payload")
    shown_error = error
    if (text is not None or error is not None) and _sealed_job(key, database):
        # The waiting job is encrypted: what arrives for it is sealed too.
        ring = sealing.keyring()
        text = None if text is None else ring.seal_json(text)
        error = None if error is None else ring.seal(error)
        shown_error = None if error is None else "<sealed>"
    with audited(
        actor,
        f"{action}_external",
        f"callback {key}",
        detail={"error": shown_error},
        database=database,
    ) as audit:
        state = _resolve_checked(key, action, text, error, database)
        audit.done(1)
    return state


def _sealed_job(key: uuid.UUID, database: str | None) -> bool:
    """Whether the job waiting for callback ``key`` is encrypted."""
    job_id = run(leases.callback_job(key), database)
    info = None if job_id is None else run(job_store.get_job(job_id), database)
    return info is not None and sealing.is_sealed(info.kwargs)


def _resolve_checked(
    key: uuid.UUID, action: str, text: str | None, error: str | None, database: str | None
) -> str:
    settings = awa_settings()
    state = run(
        leases.resolve_callback(
            key,
            action,
            payload=text,
            error=error,
            dlq_default=settings.dlq_enabled_by_default,
            dlq_on=[q for q, on in settings.queue_dlq.items() if on],
            dlq_off=[q for q, on in settings.queue_dlq.items() if not on],
        ),
        database,
    )
    if state is None:
        raise CallbackNotFound(f"no attempt is waiting for callback {key}")
    return state


def complete_external(
    callback_id: uuid.UUID | str,
    payload: Any = None,
    *,
    actor: str | None = None,
    database: str | None = None,
) -> None:
    """Complete the attempt waiting for ``callback_id``; ``payload`` (JSON) is its return value."""
    _resolve(callback_id, "complete", payload=payload, actor=actor, database=database)


def fail_external(
    callback_id: uuid.UUID | str,
    error: str,
    *,
    actor: str | None = None,
    database: str | None = None,
) -> None:
    """Fail the attempt waiting for ``callback_id`` (terminal: failed, or the DLQ)."""
    if not isinstance(error, str) or not error:
        raise InvalidJob("error must be a non-empty string")
    # Kept as text and in the jsonb error history: NUL and lone surrogates
    # escaped (awa_django.domain.pgtext), or the closure could not be written.
    _resolve(callback_id, "fail", error=clean_text(error), actor=actor, database=database)


def retry_external(
    callback_id: uuid.UUID | str, *, actor: str | None = None, database: str | None = None
) -> None:
    """Run the job waiting for ``callback_id`` again now (a new attempt)."""
    _resolve(callback_id, "retry", actor=actor, database=database)


def resume_external(
    callback_id: uuid.UUID | str,
    payload: Any = None,
    *,
    actor: str | None = None,
    database: str | None = None,
) -> None:
    """Hand ``payload`` to the handler blocked in ``ctx.wait_for_callback(callback_id)``.

    A parked attempt (the handler returned ``WaitForCallback``) has no
    handler to hand it to: it is completed with ``payload`` instead.
    """
    _resolve(callback_id, "resume", payload=payload, actor=actor, database=database)


acomplete_external = sync_to_async(complete_external)
afail_external = sync_to_async(fail_external)
aretry_external = sync_to_async(retry_external)
aresume_external = sync_to_async(resume_external)
