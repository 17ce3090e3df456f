"""Encrypted jobs on the job page: sealed for everyone, opened on request.

A job of an encrypted kind or queue (``@job(encrypt=True)``) stores its
arguments, return value, progress and error messages sealed.  The job page
shows what is safe to show of them -- that they are encrypted, with which
key id, and how many bytes are stored -- and, to a user holding
``awa_django.view_job_arguments``, a "Show decrypted" button: a ``POST`` to
``<id>/decrypt/`` that renders the page once with the values opened, through
:func:`awa_django.ops.decrypt_job`, so every such view is an entry of the
audit log (action ``view_job_arguments``, the user as actor).  Nothing
decrypted is kept or cached; reloading the page shows it sealed again.
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse
from django.urls import URLPattern, path

from .. import ops
from ..domain import sealing
from ..domain.records import JobInfo
from ..exceptions import EncryptionError, JobNotFound
from .audit import actor
from .base import ConsoleAdmin, parse_id

#: The permission that shows encrypted jobs decrypted.
VIEW_ARGUMENTS = "awa_django.view_job_arguments"
#: What an error message of an encrypted job shows until it is decrypted.
SEALED_MESSAGE = "(encrypted)"


def describe(value: Any) -> str:
    """What the page shows of a sealed value: its key id and stored size."""
    return f"Encrypted with key {sealing.sealed_key_id(value)} ({len(value)} characters stored)"


def sealed_error(entry: dict[str, Any]) -> dict[str, Any]:
    """An error entry as shown while sealed: its type, attempt and time."""
    shown = dict(entry)
    for field in ("message", "traceback"):
        if sealing.is_sealed(shown.get(field)):
            shown[field] = SEALED_MESSAGE if field == "message" else ""
    return shown


class SealedPayloadMixin(ConsoleAdmin):
    """The job page's handling of encrypted jobs (see the module docstring)."""

    def may_decrypt(self, request: HttpRequest) -> bool:
        return bool(request.user.has_perm(VIEW_ARGUMENTS))

    def payload_context(
        self, request: HttpRequest, job: JobInfo, *, decrypted: bool = False
    ) -> dict[str, Any]:
        """The ``sealed``/``decrypted`` flags of the page and, for a sealed
        job not decrypted, the placeholders of its sealed values (the caller
        shows the rest as JSON)."""
        if decrypted:
            return {"sealed": True, "decrypted": True}
        if not sealing.is_sealed(job.kwargs):
            return {"sealed": False}
        placeholders = {
            name: describe(value)
            for name, value in (
                ("args", job.args),
                ("kwargs", job.kwargs),
                ("progress", job.progress),
                ("return_value", job.return_value),
            )
            if sealing.is_sealed(value)
        }
        return {
            "sealed": True,
            "decrypted": False,
            "sealed_values": placeholders,
            "sealed_key": sealing.sealed_key_id(str(job.kwargs)),
            "may_decrypt": self.may_decrypt(request),
            "decrypt_url": self.url("decrypt", job.id),
        }

    def extra_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        return [
            *super().extra_urls(),
            path(
                "<path:object_id>/decrypt/",
                self.admin_site.admin_view(self.decrypt_view),
                name="{}_{}_decrypt".format(*info),
            ),
        ]

    def decrypt_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """``POST``: the job page once, decrypted (an audited read)."""
        self.check_view(request)
        if request.method != "POST" or not self.may_decrypt(request):
            raise PermissionDenied("showing encrypted jobs decrypted is not allowed here")
        wanted = parse_id(object_id)
        if wanted is None:
            raise Http404("no such job")
        try:
            job = ops.decrypt_job(wanted, actor=actor(request))
        except JobNotFound:
            raise Http404(f"no job with id {wanted}") from None
        except EncryptionError as exc:
            raise PermissionDenied(f"this job cannot be decrypted here: {exc}") from None
        return self.render(request, self.detail_template, self.job_context(request, job, True))

    def job_context(self, request: HttpRequest, job: JobInfo, decrypted: bool) -> dict[str, Any]:
        raise NotImplementedError
