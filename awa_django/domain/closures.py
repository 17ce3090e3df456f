"""The pure mapping from what a handler did to the closure of its attempt.

No I/O here: each function takes the claimed attempt (and the outcome) and
returns the :class:`~awa_django.records.Closure` the completer will write,
so the mapping is unit-tested on its own (the documented outcome table):

* return -> completed (a JSON-able return value is kept);
* ``RetryAfter`` / any other exception -> retryable with backoff, or failed
  (DLQ when the queue has one) once ``max_attempts`` is reached;
* ``Snooze`` -> scheduled, the attempt not counted;
* ``Cancel`` -> cancelled; ``TerminalError`` -> failed (or DLQ) now;
* shutdown giving up -> handed back, due now and uncounted.

:func:`raised` picks among them for an exception a handler raised; the
worker's executor and the test kit's ``drain()`` both use it.  Every
failed attempt appends an entry to the job's error history, which survives
retries.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import traceback
from typing import Any

from ..exceptions import EncryptionError, InvalidJob
from ..outcomes import Cancel, RetryAfter, Snooze, TerminalError, WaitForCallback
from . import clock, sealing
from .backoff import retry_delay
from .payload import to_json
from .pgtext import clean_text
from .records import (
    CANCELLED,
    COMPLETED,
    DLQ,
    FAILED,
    RETRYABLE,
    SCHEDULED,
    ClaimedJob,
    Closure,
    OpenReceipt,
)

log = logging.getLogger("awa_django.worker")

MAX_TRACEBACK_CHARS = 20_000


def _now() -> dt.datetime:
    return clock.now()


def error_entry(
    job: ClaimedJob, exc: BaseException | None, message: str | None = None
) -> dict[str, Any]:
    """One failed attempt, as kept in the job's error history."""
    if exc is None:
        kind, text, trace = "awa_django.Error", message or "", ""
    else:
        kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
        text = message or _text_of(exc)
        trace = "".join(traceback.format_exception(exc))[-MAX_TRACEBACK_CHARS:]
    # The history is jsonb: a NUL or a lone surrogate would make the whole
    # closure unwritable (see awa_django.domain.pgtext).
    entry = {
        "attempt": job.attempt,
        "type": clean_text(kind),
        "message": clean_text(text),
        "traceback": clean_text(trace),
        "at": _now().isoformat(),
    }
    if is_sealed_job(job):
        return sealing.seal_error_entry(entry, exc)
    return entry


def is_sealed_job(job: ClaimedJob | OpenReceipt) -> bool:
    """Whether ``job``'s payload is sealed (:mod:`.sealing`): its kwargs
    arrived as the sealed text, where a plain job's are a dict."""
    return isinstance(getattr(job, "kwargs", None), str)


class _Withheld:
    """An exception in a log line without its message (see :func:`shown`)."""

    def __init__(self, exc: BaseException) -> None:
        self.text = f"{type(exc).__qualname__}(<message sealed>)"

    def __repr__(self) -> str:
        return self.text


def shown(job: ClaimedJob, exc: BaseException) -> Any:
    """What a log line may say of ``exc``: the exception, or only its type
    for a sealed job (its message may hold the payload)."""
    if is_sealed_job(job) and not isinstance(exc, EncryptionError):
        return _Withheld(exc)
    return exc


def _text_of(exc: BaseException) -> str:
    """``str(exc)``, or a stand-in when the exception's own ``__str__`` fails."""
    try:
        return str(exc)
    except Exception:
        return f"<{type(exc).__qualname__}: str() failed>"


def last_error(closure: Closure) -> str | None:
    """``"type: message"`` of the attempt's error (the last of the closure's
    history), or None when the closure records none."""
    if not closure.errors:
        return None
    history = json.loads(closure.errors)
    if not history:
        return None
    entry = history[-1]
    message = entry.get("message", "")
    if sealing.is_sealed(message):  # an encrypted job's: the type says enough
        message = "<message sealed>"
    return f"{entry.get('type', 'error')}: {message}"


def _history(job: ClaimedJob, entry: dict[str, Any]) -> str:
    return json.dumps([*job.errors, entry], default=str)


def _base(job: ClaimedJob | OpenReceipt, target: str, outcome: str, **fields: Any) -> Closure:
    return Closure(
        job_id=job.job_id,
        run_lease=job.run_lease,
        claim_slot=job.claim_slot,
        batch_id=job.batch_id,
        item=job.item,
        claim_nonce=job.claim_nonce,
        target=target,
        outcome=outcome,
        **fields,
    )


def completed(job: ClaimedJob, value: Any) -> Closure:
    result = None
    if value is not None:
        try:
            result = to_json(value, "return value")
        except InvalidJob:
            log.debug("job %s: return value of %s is not JSON; not kept", job.job_id, job.kind)
        else:
            if is_sealed_job(job):
                result = _sealed_result(job, result)
    return _base(job, COMPLETED, COMPLETED, result=result)


def _sealed_result(job: ClaimedJob, result: str) -> str | None:
    """A sealed job's return value sealed, or not kept when this process
    cannot seal (it could then not have opened the arguments either)."""
    try:
        return sealing.keyring().seal_json(result)
    except EncryptionError:
        log.debug("job %s: no key to seal the return value of %s; not kept", job.job_id, job.kind)
        return None


def failed(job: ClaimedJob, entry: dict[str, Any], *, dlq: bool, reason: str) -> Closure:
    """Terminal failure: failed, or moved to the DLQ when the queue has one."""
    target = DLQ if dlq else FAILED
    return _base(job, target, FAILED, errors=_history(job, entry), reason=reason)


def retry_or_fail(
    job: ClaimedJob, entry: dict[str, Any], delay: float | None, *, dlq: bool
) -> Closure:
    if job.attempt >= job.max_attempts:
        return failed(job, entry, dlq=dlq, reason="max_attempts exhausted")
    if delay is None:
        delay = retry_delay(job.attempt)
    return _base(
        job,
        RETRYABLE,
        RETRYABLE,
        run_at=_now() + dt.timedelta(seconds=delay),
        attempt=job.attempt,
        errors=_history(job, entry),
    )


#: The error type recorded when an attempt's outcome could not be stored.
UNSTORABLE = "awa_django.UnstorableOutcome"
MAX_UNSTORABLE_DETAIL = 500


def unstorable(
    job: ClaimedJob, closure: Closure, exc: BaseException, *, dlq: bool, permanent: bool = True
) -> Closure:
    """What to write instead of ``closure`` when the database refused it
    even alone, its history saying why (an :data:`UNSTORABLE` entry).

    ``permanent`` (the closure's values were refused: see
    :func:`~.completer.refused_for_good`): the attempt failed, or moved to
    the DLQ.  Otherwise (a refusal that outlasted its retries) the attempt
    is retried while attempts remain, as if it had raised.  A cancellation
    stays a cancellation either way, its reason replaced by that entry.
    Progress and result are left out (one of them may be what was refused);
    the error history is the one the claim read, which the database
    accepted once already.
    """
    detail = clean_text(f"{type(exc).__name__}: {_text_of(exc)}")[:MAX_UNSTORABLE_DETAIL]
    message = f"the {closure.outcome} outcome of this attempt could not be stored ({detail})"
    entry = error_entry(job, None, message)
    entry["type"] = UNSTORABLE
    if closure.target == CANCELLED:
        fallback = _base(job, CANCELLED, CANCELLED, errors=_history(job, entry), reason="cancelled")
    elif permanent:
        fallback = failed(job, entry, dlq=dlq, reason="outcome could not be stored")
    else:
        fallback = retry_or_fail(job, entry, None, dlq=dlq)
    fallback.leased = closure.leased
    return fallback


def snoozed(job: ClaimedJob, delay: float) -> Closure:
    # The next claim adds one to the stored count: store this attempt's
    # predecessor so the re-run sees the same attempt number.
    return _base(
        job,
        SCHEDULED,
        "snoozed",
        run_at=_now() + dt.timedelta(seconds=delay),
        attempt=job.attempt - 1,
    )


def handed_back(job: ClaimedJob | OpenReceipt, *, counted: bool = False) -> Closure:
    """Run this attempt again soon: uncounted when shutdown gave up on it,
    ``counted`` when it is an orphaned receipt (its runtime no longer runs
    it: the claim's answer was lost, or its closure could not be written).

    Counting orphans is what bounds the hand-backs of one attempt: a job
    whose every closure were refused would otherwise come back at the same
    attempt forever; counted, it reaches ``max_attempts`` and is then
    failed without running (:func:`~awa_django.runtime.attempts.attempt.definition_for`).  The price
    is one attempt for a claim whose answer was lost, which is rare.

    A counted hand-back appends a :data:`HANDED_BACK` entry to the error
    history: that mark, not the count alone, is what makes the next claim
    fail an attempt past the limit.  Other ways back at the same count (a
    callback's ``retry``) run as a new attempt, as documented.
    """
    if not counted:
        return _base(job, SCHEDULED, "handed_back", run_at=_now(), attempt=job.attempt - 1)
    entry = error_entry_at(job.attempt, HANDED_BACK, "handed back: its runtime no longer ran it")
    history = json.dumps([*(job.errors or []), entry], default=str)
    return _base(job, SCHEDULED, "handed_back", run_at=_now(), attempt=job.attempt, errors=history)


#: The error type of a counted hand-back (see :func:`handed_back`).
HANDED_BACK = "awa_django.HandedBack"


def error_entry_at(attempt: int, kind: str, message: str) -> dict[str, Any]:
    """A history entry with no exception, for ``attempt``."""
    return {
        "attempt": attempt,
        "type": kind,
        "message": message,
        "traceback": "",
        "at": _now().isoformat(),
    }


def handed_back_past_limit(job: ClaimedJob) -> bool:
    """Whether ``job`` came back through a counted hand-back of its last
    attempt (its count is past ``max_attempts``, its history's last entry is
    that hand-back's mark): it is failed without running."""
    if job.attempt <= job.max_attempts or not job.errors:
        return False
    last = job.errors[-1]
    return last.get("type") == HANDED_BACK and last.get("attempt") == job.attempt - 1


def cancelled(job: ClaimedJob, reason: str) -> Closure:
    reason = clean_text(str(reason))
    entry = error_entry(job, None, reason)
    entry["type"] = "awa_django.Cancel"
    if is_sealed_job(job):
        reason = "cancelled (the reason is sealed in the error history)"
    return _base(job, CANCELLED, CANCELLED, errors=_history(job, entry), reason=reason)


def not_parked(job: ClaimedJob, *, dlq: bool) -> Closure:
    """``WaitForCallback`` without a registered callback: nothing to wait for."""
    message = "WaitForCallback raised without ctx.register_callback()"
    log.error("job %s (%s): %s", job.job_id, job.kind, message)
    return failed(job, error_entry(job, None, message), dlq=dlq, reason=message)


def raised(job: ClaimedJob, exc: Exception, *, dlq: bool) -> Closure:
    """The closure of an attempt whose handler raised ``exc`` (the outcome table).

    A ``WaitForCallback`` that parked its attempt never gets here (the
    runtime holds the attempt on its lease); one that reaches this point had
    no callback to wait for.
    """
    if isinstance(exc, Snooze):
        return snoozed(job, exc.delay)
    if isinstance(exc, RetryAfter):
        return retry_or_fail(job, error_entry(job, exc), exc.delay, dlq=dlq)
    if isinstance(exc, Cancel):
        return cancelled(job, exc.reason)
    if isinstance(exc, WaitForCallback):
        return not_parked(job, dlq=dlq)
    if isinstance(exc, TerminalError):
        log.warning(
            "job %s (%s) attempt %s failed terminally: %s",
            job.job_id,
            job.kind,
            job.attempt,
            shown(job, exc),
        )
        return failed(job, error_entry(job, exc), dlq=dlq, reason="terminal error")
    log.warning(
        "job %s (%s) attempt %s/%s raised %r",
        job.job_id,
        job.kind,
        job.attempt,
        job.max_attempts,
        shown(job, exc),
    )
    return retry_or_fail(job, error_entry(job, exc), None, dlq=dlq)
