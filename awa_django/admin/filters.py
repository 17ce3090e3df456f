"""The console's sidebar filters, declared as Django admin list filters.

A page names its filters in ``list_filter`` (``get_list_filter(request)``
returns them, as for any ModelAdmin), and the sidebar is drawn from that
list: a project's subclass can drop, reorder or replace them, or narrow a
filter's choices by overriding its ``lookups()``.  The choices themselves
come from the page (``model_admin.filter_choices(name, request)``: the
storage's counters, the declared queues and kinds), and the chosen value is
applied by the page's bounded paging through :mod:`awa_django.ops`, not by
``queryset()`` (the pages are not ORM changelists), so a filter must name
a parameter the page's paging understands (:attr:`ConsoleAdmin.filter_parameters`).
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest


class ConsoleFilter(admin.SimpleListFilter):
    """A sidebar filter whose choices the page gives and whose value its paging applies."""

    #: A text box instead of a list of choices (tags, which are open-ended).
    free_text = False

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        return list(model_admin.filter_choices(self.parameter_name, request))

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset  # applied by the page's paging through ops


class StateFilter(ConsoleFilter):
    title = "state"
    parameter_name = "state"


class QueueFilter(ConsoleFilter):
    title = "queue"
    parameter_name = "queue"


class KindFilter(ConsoleFilter):
    title = "kind"
    parameter_name = "kind"


class PriorityFilter(ConsoleFilter):
    title = "priority"
    parameter_name = "priority"


class TagFilter(ConsoleFilter):
    title = "tag"
    parameter_name = "tag"
    free_text = True

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, str]]:
        return []
