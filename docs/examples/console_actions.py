"""A project's own console page: the job browser with one more action.

The console how-to includes the marked parts; the test suite registers
this page in place of awa's and runs the action in a browser.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpRequest

from awa_django import ops
from awa_django.admin import JobAdmin
from awa_django.models import Job


# [action]
@admin.action(description="Cancel selected jobs as spam", permissions=["operate"])
def cancel_as_spam(page: JobAdmin, request: HttpRequest, queryset: Any) -> None:
    """Cancel each selected job with the reason "spam" (a one-click triage)."""
    who = page.actor(request)  # the Django user: recorded in awa's audit log
    cancelled = [job.id for job in queryset if ops.cancel_job(job.id, reason="spam", actor=who)]
    page.record(request, cancelled, "Cancelled as spam")  # the jobs' History pages
    page.message_user(request, f"{len(cancelled)} job(s) cancelled as spam")


class ProjectJobAdmin(JobAdmin):
    actions = [*JobAdmin.actions, cancel_as_spam]


# [/action]


# [register]
def register(site: admin.AdminSite = admin.site) -> None:
    """What the project's ``admin.py`` does: swap awa's jobs page for its own."""
    site.unregister(Job)
    site.register(Job, ProjectJobAdmin)


# [/register]
