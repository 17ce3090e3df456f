"""Edit and retry: correct a finished job's arguments and run it again.

A job that failed, was cancelled or was dead-lettered because of bad
arguments (a wrong customer id, a typo in an address) is fixed in place
rather than enqueued anew: it keeps its id, error history, queue and
options, so whatever points at it (a dependency, a link in a ticket, the
console's History page) still tells the whole story.

The new arguments pass the checks an enqueue of the kind makes (the handler's
signature, JSON, ``AWA["MAX_PAYLOAD_BYTES"]``) before anything is written;
:func:`check_edit` is that check alone, which the console runs before it
shows its confirmation page.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from asgiref.sync import sync_to_async

from ..conf import awa_settings
from ..domain.payload import encode_arguments
from ..domain.records import JobInfo
from ..domain.sealing import is_sealed
from ..exceptions import EncryptionError, InvalidJob, JobNotFound
from ..jobs import registry
from ..storage import jobs as job_store
from ..storage import leases
from ..storage.base import run
from .arguments import check_id
from .audit import audited

#: The states a job can be edited and retried from.
EDITABLE = ("failed", "cancelled", "dlq")


@dataclass(frozen=True, slots=True)
class Edit:
    """Checked new arguments of a job: the values, and the JSON text to store
    (None where the value is kept as it is stored)."""

    args: list[Any]
    kwargs: dict[str, Any]
    args_json: str | None
    kwargs_json: str | None


def check_edit(info: JobInfo, args: Sequence[Any] | None, kwargs: Mapping[str, Any] | None) -> Edit:
    """The edit of ``info`` to ``args`` / ``kwargs`` (None: keep), checked as an
    enqueue of its kind would be; ``InvalidJob`` saying why otherwise.

    A new value needs the kind registered in this process (its signature is
    the check); a kind this process cannot import is refused unless nothing
    new is given.
    """
    if info.state not in EDITABLE:
        raise InvalidJob(
            f"job {info.id} is {info.state}: only a failed, cancelled or dead-lettered job "
            "can be edited and retried"
        )
    if is_sealed(info.kwargs):
        raise EncryptionError(
            f"job {info.id} is encrypted: its arguments cannot be edited (retry it as it is, "
            "or enqueue a new job)"
        )
    if args is not None and (isinstance(args, str | bytes) or not isinstance(args, Sequence)):
        raise InvalidJob(f"args must be a list, got {type(args).__name__}")
    if kwargs is not None and not isinstance(kwargs, Mapping):
        raise InvalidJob(f"kwargs must be a dict (a JSON object), got {type(kwargs).__name__}")
    new_args = list(info.args if args is None else args)
    new_kwargs = dict(info.kwargs if kwargs is None else kwargs)
    if args is None and kwargs is None:
        return Edit(new_args, new_kwargs, None, None)
    job = registry.find(info.kind, info.metadata)
    if job is None:
        raise InvalidJob(
            f"job kind {info.kind!r} is not registered in this process, so new arguments "
            "cannot be checked against its signature; edit it where its jobs module is imported"
        )
    job.check_arguments(tuple(new_args), new_kwargs)
    args_json, kwargs_json = encode_arguments(
        tuple(new_args), new_kwargs, awa_settings().max_payload_bytes
    )
    return Edit(
        new_args,
        new_kwargs,
        None if args is None else args_json,
        None if kwargs is None else kwargs_json,
    )


def edit_and_retry(
    job_id: int,
    args: Sequence[Any] | None = None,
    kwargs: Mapping[str, Any] | None = None,
    *,
    actor: str | None = None,
    database: str | None = None,
) -> JobInfo:
    """Run a failed, cancelled or dead-lettered job again with new arguments;
    returns the revived job.

    ``args`` / ``kwargs`` replace the job's positional / keyword arguments
    (None keeps them).  They are checked like an enqueue of the job's kind
    (its handler's signature, JSON, ``AWA["MAX_PAYLOAD_BYTES"]``); a kind not
    registered in this process is refused when anything new is given, since
    its signature cannot be checked.  A job in any other state, or arguments
    the checks refuse, raise ``InvalidJob`` and nothing changes; an unknown
    id raises ``JobNotFound``.

    The job keeps its id, queue, priority, metadata and error history, gets
    a fresh attempt count and is ``available`` as the call returns.  Its
    error history gains an ``awa_django.edited`` entry (with the old
    arguments when their JSON is at most 1 KiB), and the audit entry
    written for ``actor`` holds the old and new arguments in full
    (``detail``: ``old_args``, ``old_kwargs``, ``args``, ``kwargs``).  A
    uniqueness key or concurrency key derived from the arguments at enqueue
    stays as it was.
    """
    job_id = check_id(job_id)
    with audited(
        actor, "edit_and_retry", f"job {job_id}", job_ids=[job_id], database=database
    ) as action:
        info = run(job_store.get_job(job_id), database)
        if info is None:
            raise JobNotFound(f"no job with id {job_id}")
        edit = check_edit(info, args, kwargs)
        note = f"arguments edited by {actor or 'an operator'} and retried."
        done = run(leases.edit_and_retry(job_id, edit.args_json, edit.kwargs_json, note), database)
        if done is None:
            raise JobNotFound(f"no job with id {job_id}")
        outcome, old_args, old_kwargs = done
        if outcome != "retried":  # another operator revived it meanwhile
            state = outcome.removeprefix("already_")
            raise InvalidJob(f"job {job_id} is {state} now: it was not edited")
        action.detail.update(
            old_args=old_args, old_kwargs=old_kwargs, args=edit.args, kwargs=edit.kwargs
        )
        action.done(1)
        revived = run(job_store.get_job(job_id), database)
        if revived is None:  # purged between the two statements: nothing to return
            raise JobNotFound(f"no job with id {job_id}")
    return revived


aedit_and_retry = sync_to_async(edit_and_retry)
