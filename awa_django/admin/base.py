"""What every console page shares: permissions, read-only mode, actions.

The console's pages are ModelAdmins of the read-only models (so they sit in
the admin index and use the admin's login, permissions and look), but they
render their own list and detail views from :mod:`awa_django.ops`: the
ORM changelist counts every row and sorts the whole view, which a large
job history cannot afford, and every change must go through the storage's
guarded operations anyway.

Who may do what:

* a page is visible to staff holding the model's ``view`` (or ``change``)
  permission -- Django's own rule;
* an action (retry, cancel, purge, pause, resume, drain, run now) needs the
  ``change`` permission of every model whose rows it changes -- by default
  the page's own, otherwise as listed in ``action_models`` (purging a dead
  letter from the job page needs ``change_deadletter``, as on the DLQ page;
  draining a queue cancels jobs, so it also needs ``change_job``) -- a POST
  with the CSRF token, and the console not being read-only.  The bulk
  actions of a list are Django admin actions (:mod:`.actions`) whose
  ``allowed_permissions`` name the ``has_<name>_permission`` methods below
  (``operate``, ``dead_letter``, ``move_to_dlq``, ``drain``), which apply
  the same rule;
* nobody adds, edits or deletes rows through admin forms.

Every action runs with the user as the ``actor`` of its ``ops`` call (awa's
audit log) and writes Django's ``LogEntry`` for what it acted on
(:mod:`.audit`); a page with a detail view also has Django's History page.

Read-only: ``AWA["ADMIN_READ_ONLY"]`` (``override_settings`` included), or
by itself when the awa database answers ``transaction_read_only = on`` (a
hot standby).  Actions are then neither offered nor accepted (403).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import ImproperlyConfigured, PermissionDenied, ValidationError
from django.db import DatabaseError, models
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.http import url_has_allowed_host_and_scheme

from .. import ops
from ..conf import awa_settings
from ..exceptions import CallbackNotFound, InvalidJob, JobNotFound
from .actions import Selection
from .audit import actor, log_change

#: The key of ``ConsoleAdmin.action_models`` for the list's bulk actions.
BULK = "bulk"
#: Ids are PostgreSQL bigints.
MAX_ID = 2**63 - 1
_DIGITS = re.compile(r"[0-9]{1,19}")


def parse_id(text: str, low: int = 1, high: int = MAX_ID) -> int | None:
    """``text`` as an integer from ``low`` to ``high``, or None.

    ASCII digits only: ``str.isdigit()`` also takes ``"²"``, which ``int()``
    then refuses, and a number past a bigint would reach the database.
    """
    text = text.strip()
    if not _DIGITS.fullmatch(text):
        return None
    value = int(text)
    return value if low <= value <= high else None


def read_only(request: HttpRequest) -> bool:
    """Whether the console refuses actions for this request (cached on it)."""
    cached = getattr(request, "_awa_read_only", None)
    if cached is None:
        cached = awa_settings().admin_read_only
        if not cached:
            try:
                cached = ops.read_only()
            except DatabaseError:
                cached = True  # cannot tell: do not offer writes
        request._awa_read_only = cached  # type: ignore[attr-defined]
    return bool(cached)


class ConsoleAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    """A console page over one read-only model (see the module docstring)."""

    #: Template of the list page (under ``templates/admin/awa_django/``).
    list_template = ""
    #: Template of the detail page; empty when the page has none.
    detail_template = ""
    #: ``name -> label`` of the per-object actions; ``act_<name>(request,
    #: key)`` performs one and returns the message shown to the operator.
    object_actions: Mapping[str, str] = {}
    #: ``action -> model names`` whose ``change`` permission the action needs,
    #: when it is not just the page's own model; :data:`BULK` for ``action/``.
    action_models: Mapping[str, tuple[str, ...]] = {}
    #: The model whose History an object action is logged to (default: the page's).
    log_model: type[models.Model] | None = None
    #: The list's admin actions (see :mod:`.actions`); a page without any
    #: keeps its own ``bulk_action`` form (the batch operations page).
    actions: Any = ()

    # --- permissions ---------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # No ORM change form exists; actions use may_act().
        return False

    def action_permissions(self, action: str | None = None) -> tuple[str, ...]:
        """The permissions ``action`` needs (None: the page's own model)."""
        models = self.action_models.get(action or "", (self.opts.model_name,))
        return tuple(f"{self.opts.app_label}.change_{model}" for model in models)

    def may_act(self, request: HttpRequest, action: str | None = None) -> bool:
        """Whether this user may run ``action`` (default: the page's actions) now."""
        return request.user.has_perms(self.action_permissions(action)) and not read_only(request)

    def _may_change(self, request: HttpRequest, *model_names: str) -> bool:
        perms = [f"{self.opts.app_label}.change_{name}" for name in model_names]
        return request.user.has_perms(perms) and not read_only(request)

    def has_operate_permission(self, request: HttpRequest) -> bool:
        """An action changing this page's rows: its model's ``change``."""
        return self._may_change(request, str(self.opts.model_name))

    def has_dead_letter_permission(self, request: HttpRequest) -> bool:
        """An action changing dead letters (retry or purge from the DLQ)."""
        return self._may_change(request, "deadletter")

    def has_move_to_dlq_permission(self, request: HttpRequest) -> bool:
        """Moving failed jobs into the DLQ: changes both."""
        return self._may_change(request, "job", "deadletter")

    def has_drain_permission(self, request: HttpRequest) -> bool:
        """Draining a queue cancels its jobs."""
        return self._may_change(request, "queue", "job")

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        """Django's rule (permissions, site-wide actions); none when read-only.

        ``action_location`` is Django 6.1's (the change list or the change
        form), passed through; Django 5.2 has none.
        """
        if read_only(request):
            return {}
        base: Any = super().get_actions
        if action_location is None:
            return dict(base(request))
        return dict(base(request, action_location=action_location))

    def check_act(self, request: HttpRequest, action: str | None = None) -> None:
        if request.method != "POST" or not self.may_act(request, action):
            raise PermissionDenied("this action is not allowed here")

    def check_view(self, request: HttpRequest) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    # --- URLs ----------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        wrap = self.admin_site.admin_view
        urls = [
            path("", wrap(self.changelist_view), name="{}_{}_changelist".format(*info)),
            path("action/", wrap(self.list_action_view), name="{}_{}_action".format(*info)),
        ]
        urls += self.extra_urls()
        if self.object_actions:
            urls.append(
                path(
                    "<path:object_id>/action/<str:action>/",
                    wrap(self.object_action_view),
                    name="{}_{}_object_action".format(*info),
                )
            )
        if self.detail_template:
            urls += [
                path(
                    "<path:object_id>/change/",
                    wrap(self.change_view),
                    name="{}_{}_change".format(*info),
                ),
                path(
                    "<path:object_id>/history/",
                    wrap(self.history_view),
                    name="{}_{}_history".format(*info),
                ),
            ]
        return urls

    def extra_urls(self) -> list[URLPattern]:
        return []

    def url(self, name: str, *args: Any) -> str:
        return reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_{name}", args=args)

    # --- rendering -----------------------------------------------------------

    def render(
        self, request: HttpRequest, template: str, context: dict[str, Any]
    ) -> TemplateResponse:
        choices = self.get_action_choices(request) if self.actions else []
        base = {
            "action_choices": choices,
            "may_select": len(choices) > 1,
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "app_label": self.opts.app_label,
            "may_act": self.may_act(request),
            "may_bulk": self.may_act(request, BULK),
            "may": {name: self.may_act(request, name) for name in self.object_actions},
            "read_only": read_only(request),
            "changelist_url": self.url("changelist"),
            "action_url": self.url("action"),
        }
        return TemplateResponse(request, f"admin/awa_django/{template}", {**base, **context})

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if request.method == "POST":  # Django's changelist takes its actions here
            return self.list_action_view(request)
        self.check_view(request)
        return self.render(request, self.list_template, self.list_context(request))

    def list_context(self, request: HttpRequest) -> dict[str, Any]:
        raise NotImplementedError

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        self.check_view(request)
        context = self.detail_context(request, object_id)
        return self.render(request, self.detail_template, context)

    def detail_context(self, request: HttpRequest, object_id: str) -> dict[str, Any]:
        raise NotImplementedError

    def get_object(
        self, request: HttpRequest, object_id: str, from_field: str | None = None
    ) -> Any:
        """An unsaved instance carrying only the key (for Django's History page).

        The history is Django's ``LogEntry`` rows for the key, which outlive
        the job itself (a pruned job still has its history), so nothing is
        read from the awa tables; a key the primary key field refuses is None.
        """
        key = self.parse_key(object_id)
        return None if key is None else self.model(**{self.opts.pk.attname: key})

    # --- actions -------------------------------------------------------------

    def object_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        """POST ``<id>/action/<name>/``: one action on one object."""
        self.check_act(request, action)
        handler = getattr(self, f"act_{action}", None)
        if action not in self.object_actions or handler is None:
            raise PermissionDenied(f"unknown action {action!r}")
        message = self._apply(request, lambda: handler(request, object_id))
        if message is not None:
            label = self.object_actions[action]
            log_change(request, self.log_model or self.model, [object_id], f"{label}: {message}")
        default = self.url("change", object_id) if self.detail_template else self.url("changelist")
        return self.back(request, default)

    def list_action_view(self, request: HttpRequest) -> HttpResponse:
        """POST ``action/`` (or the list itself): a bulk action, confirmed on a second page."""
        if not self.actions:
            self.check_act(request, BULK)
            return self.bulk_action(request)
        if request.method != "POST":
            raise PermissionDenied("actions are POSTed")
        offered = self.get_actions(request)
        name = request.POST.get("action", "")
        if name not in offered:
            known = {getattr(a, "__name__", a) for a in self.actions}
            known |= {site_name for site_name, _ in self.admin_site.actions}
            if name in known or not offered:  # not for this user, or read-only
                raise PermissionDenied(f"action {name!r:.60} is not offered here")
            messages.warning(request, "choose an action")
            return self.back(request, self.url("changelist"))
        # Django 6.1 gives Action objects (indexing them is deprecated), 5.2 tuples.
        chosen = offered[name]
        func = chosen.func if hasattr(chosen, "func") else chosen[0]
        if getattr(func, "across", False):
            post = request.POST.copy()
            post["select_across"] = "1"
            request.POST = post  # type: ignore[assignment]
        selection = Selection(self, filters=self.selection_filters(request))
        # Django's own dispatch: form check, the selection, the action's response.
        response = self.response_action(request, selection)  # type: ignore[arg-type]
        if response is None or (
            isinstance(response, HttpResponseRedirect) and response.url == request.get_full_path()
        ):
            return self.back(request, self.url("changelist"))
        return response

    # --- filters -------------------------------------------------------------

    #: Query parameters the page's paging applies (a filter must name one).
    filter_parameters: tuple[str, ...] = ()
    #: Filters whose choices open their sidebar section even when unused.
    open_filters: tuple[str, ...] = ()

    def filter_choices(self, name: str, request: HttpRequest) -> list[tuple[Any, str]]:
        """``(value, label)`` choices of the filter on ``name`` (see :mod:`.filters`)."""
        return []

    def sidebar(
        self, request: HttpRequest, query: Callable[..., str], current: Mapping[str, Any]
    ) -> list[dict[str, Any]]:
        """The sidebar of ``get_list_filter(request)``: ``query(**changes)`` builds a
        link with one parameter changed, ``current`` holds the values in use."""
        sections = []
        for declared in self.get_list_filter(request):
            if not (isinstance(declared, type) and issubclass(declared, admin.SimpleListFilter)):
                raise ImproperlyConfigured(
                    f"{type(self).__name__}.list_filter: the console takes SimpleListFilter "
                    f"classes (see awa_django.admin.filters), not {declared!r}"
                )
            spec = declared(request, {}, self.model, self)
            name = str(spec.parameter_name)
            if name not in self.filter_parameters:
                raise ImproperlyConfigured(
                    f"{type(self).__name__}: filter {declared.__name__} names {name!r}, "
                    f"which this page's paging does not apply ({', '.join(self.filter_parameters)})"
                )
            value = current.get(name)
            sections.append(
                {
                    "title": spec.title,
                    "parameter": name,
                    "value": value,
                    "free_text": getattr(spec, "free_text", False),
                    "open": value is not None or name in self.open_filters,
                    "all_url": query(**{name: None, "before": None}),
                    "choices": [
                        (label, query(**{name: key, "before": None}), str(key) == str(value))
                        for key, label in spec.lookup_choices
                    ],
                    "keep": [(k, v) for k, v in current.items() if v is not None and k != name],
                }
            )
        return sections

    def selection_filters(self, request: HttpRequest) -> dict[str, Any]:
        """The page's filter as POSTed with an action (for ``across`` actions)."""
        return {}

    def parse_key(self, text: str) -> Any:
        """A ticked row's key as the page's primary key, or None when it cannot be one."""
        try:
            return self.opts.pk.to_python(text)
        except ValidationError:
            return None

    def load_row(self, key: Any) -> Any:
        """The record an action's selection yields for ``key`` (None: gone)."""
        raise NotImplementedError(f"{type(self).__name__} lists no rows for actions")

    def record(self, request: HttpRequest, keys: list[Any], message: str) -> None:
        """Log an action on these rows to Django's ``LogEntry`` (for project actions:
        the built-in ones do it themselves)."""
        log_change(request, self.log_model or self.model, keys, message)

    @staticmethod
    def actor(request: HttpRequest) -> str:
        """Who acts, for ``ops``' ``actor=``."""
        return actor(request)

    def bulk_action(self, request: HttpRequest) -> HttpResponse:
        raise PermissionDenied("this page has no bulk actions")

    @staticmethod
    def selected_ids(request: HttpRequest) -> list[int]:
        """The ids ticked in a list's checkboxes, sorted, without duplicates."""
        parsed = (parse_id(v) for v in request.POST.getlist("_selected_action"))
        return sorted({v for v in parsed if v is not None})

    def _apply(self, request: HttpRequest, call: Callable[[], str]) -> str | None:
        """Run an action, tell the operator how it went; its message, or None if refused."""
        try:
            message = call()
        except (JobNotFound, CallbackNotFound) as exc:
            messages.error(request, str(exc))
        except InvalidJob as exc:
            messages.error(request, f"refused: {exc}")
        else:
            messages.success(request, message)
            return message
        return None

    def back(self, request: HttpRequest, default: str) -> HttpResponseRedirect:
        """Redirect to the POSTed ``next`` when it is a safe local URL."""
        target = request.POST.get("next", "")
        if target and url_has_allowed_host_and_scheme(
            target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
        ):
            return HttpResponseRedirect(target)
        return HttpResponseRedirect(default)
