"""The console's half of the audit trail: Django's ``LogEntry``.

Every console action runs an :mod:`awa_django.ops` function with the
signed-in user as ``actor``, so awa's own audit log (``ops.audit_log``)
records it like a command's or a script's.  The console also writes
Django's ``LogEntry`` for what the action changed, so the admin's "Recent
actions" box and an object's History page show it with the operator's
name -- where a Django team looks first.  An action that changed nothing
(refused, or the object was already in that state) writes no
``LogEntry``; awa's audit log still has it with its outcome.

Actions on jobs are logged against the Job model whichever page ran them
(the DLQ page included: a dead letter keeps its job id), so one job's
History page tells its whole story.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.http import HttpRequest

#: ``LogEntry.object_repr`` holds at most this many characters.
REPR_LENGTH = 200


def actor(request: HttpRequest) -> str:
    """Who acts, for ``ops``' ``actor=``: the Django username."""
    user = request.user
    return user.get_username() or f"user #{user.pk}"


def log_change(
    request: HttpRequest,
    model: type[models.Model],
    keys: Iterable[object],
    message: str,
) -> None:
    """One ``LogEntry`` (CHANGE) per object key of ``model``, saying ``message``."""
    user: Any = request.user  # signed in: the admin's views require it
    content_type = ContentType.objects.get_for_model(model)
    noun = model._meta.verbose_name
    LogEntry.objects.bulk_create(
        LogEntry(
            user_id=user.pk,
            content_type_id=content_type.pk,
            object_id=str(key),
            object_repr=f"{noun} {key}"[:REPR_LENGTH],
            action_flag=CHANGE,
            change_message=message,
        )
        for key in keys
    )


def log_bulk(request: HttpRequest, model: type[models.Model], target: str, message: str) -> None:
    """A ``LogEntry`` for an action over a filter (no single object): ``target`` names it."""
    user: Any = request.user
    LogEntry.objects.create(
        user_id=user.pk,
        content_type_id=ContentType.objects.get_for_model(model).pk,
        object_id=None,
        object_repr=target[:REPR_LENGTH],
        action_flag=CHANGE,
        change_message=message,
    )
