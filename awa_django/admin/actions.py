"""The console's bulk actions are Django admin actions.

Each page lists its actions through ``ModelAdmin.get_actions(request)``:
the built-in ones (retry, cancel, purge, move to the DLQ, pause, resume,
drain, run now...), the site's (``admin.site.add_action``) and whatever a
project's subclass adds to ``actions``.  Django filters them by their
``allowed_permissions`` (``has_<name>_permission`` of the page: see
:class:`~awa_django.admin.base.ConsoleAdmin`) and a read-only console
offers none.

An action receives ``(modeladmin, request, queryset)``.  The console's
pages are not ORM changelists -- a view over every job cannot be filtered
or counted cheaply -- so ``queryset`` is a :class:`Selection`: the ticked
keys, checked, that iterates the rows through :mod:`awa_django.ops`
(``JobInfo`` on the jobs and DLQ pages, ``QueueInfo``, ``PeriodicInfo``)
and answers the queryset calls an action usually makes (``filter(pk__in=)``,
``values_list("pk", flat=True)``, ``count()``, ``exists()``, ``len``).
An action marked ``across`` (the DLQ's "everything matching") gets the
page's filter instead of ticked keys (``selection.filters``).

Built-in actions ask first (:func:`ask`): without ``confirm`` in the POST
they answer with the console's confirmation page, which posts the same
selection back; then :func:`each` runs one ``ops`` call per row with the
operator as ``actor`` (awa's audit log) and logs the rows it changed to
Django's ``LogEntry``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse

from ..exceptions import CallbackNotFound, JobNotFound

if TYPE_CHECKING:
    from .base import ConsoleAdmin

#: The checkbox name Django's admin uses for the selection.
SELECTED = "_selected_action"

Action = Callable[["ConsoleAdmin", HttpRequest, "Selection"], HttpResponse | None]


class Selection:
    """The rows an action works on (see the module docstring)."""

    def __init__(
        self,
        page: ConsoleAdmin,
        keys: Sequence[Any] = (),
        *,
        filters: Mapping[str, Any] | None = None,
    ) -> None:
        self.page = page
        self.keys = list(keys)
        #: The page's filter, for an action over everything matching it.
        self.filters = dict(filters or {})

    def filter(self, pk__in: Iterable[object] = (), **unsupported: object) -> Selection:
        """The selection narrowed to these keys (those the page's key type accepts)."""
        if unsupported:
            raise TypeError(
                f"a console selection filters by pk__in only, not {sorted(unsupported)}"
            )
        parsed = (self.page.parse_key(str(key)) for key in pk__in)
        # In key order (numbers as numbers: job 99 before job 100); one page's
        # keys are of one type, the type name only keeps a mixed set sortable.
        keys = sorted({key for key in parsed if key is not None}, key=_key_order)
        return Selection(self.page, keys, filters=self.filters)

    def values_list(self, *fields: str, flat: bool = False) -> list[Any]:
        if fields not in (("pk",), (self.page.opts.pk.name,)) or not flat:
            raise TypeError('a console selection gives values_list("pk", flat=True) only')
        return list(self.keys)

    def __iter__(self) -> Iterator[Any]:
        for key in self.keys:
            row = self.page.load_row(key)
            if row is not None:
                yield row

    def __len__(self) -> int:
        return len(self.keys)

    def count(self) -> int:
        return len(self.keys)

    def exists(self) -> bool:
        return bool(self.keys)

    def __repr__(self) -> str:
        return f"<Selection of {self.page.opts.model_name}: {self.keys or self.filters}>"


def ask(
    page: ConsoleAdmin,
    request: HttpRequest,
    selection: Selection,
    *,
    verb: str,
    question: str,
    fields: list[tuple[str, str, str]] | None = None,
) -> HttpResponse | None:
    """The confirmation page, or None once the operator confirmed."""
    if "confirm" in request.POST:
        return None
    hidden: list[tuple[str, Any]] = [("action", request.POST.get("action", ""))]
    hidden += [(SELECTED, key) for key in selection.keys]
    hidden += [("select_across", request.POST.get("select_across", "0"))]
    hidden += [(name, value) for name, value in selection.filters.items() if value is not None]
    return page.render(
        request,
        "confirm.html",
        {
            "title": question,
            "question": question,
            "items": [f"{page.opts.verbose_name} {key}" for key in selection.keys],
            "hidden": hidden,
            "fields": fields or [],
            "next": request.POST.get("next", ""),
            "post_url": page.url("action"),
            "verb": verb,
        },
    )


def each(
    page: ConsoleAdmin,
    request: HttpRequest,
    selection: Selection,
    call: Callable[[Any, str], bool],
    *,
    verb: str,
    past: str,
) -> HttpResponse:
    """Run ``call(key, actor)`` for every selected row, log the rows it changed
    (it returned True) to ``LogEntry`` and tell the operator how it went.

    A row whose state does not allow the action is left alone and counted,
    not refused: a selection made a minute ago may be stale.
    """
    who = page.actor(request)
    done: list[Any] = []
    missing = 0
    for key in selection.keys:
        try:
            if call(key, who):
                done.append(key)
        except (JobNotFound, CallbackNotFound):
            missing += 1
    page.record(request, done, f"{verb} (bulk action)")
    note = f"{plural(len(done), str(page.opts.verbose_name))} {past}"
    unchanged = len(selection) - len(done) - missing
    if unchanged:
        note += f"; {unchanged} left as they were (state did not allow it)"
    if missing:
        note += f"; {missing} not found"
    messages.success(request, note)
    return page.back(request, page.url("changelist"))


def console_action(
    *,
    description: str,
    permissions: Sequence[str] = ("operate",),
    across: bool = False,
) -> Callable[[Action], Action]:
    """``@admin.action`` for the console: ``across`` marks an action over the
    page's whole filter rather than the ticked rows."""

    def mark(func: Action) -> Action:
        func = admin.action(description=description, permissions=list(permissions))(func)
        func.across = across  # type: ignore[attr-defined]
        return func

    return mark


def plural(n: int, noun: str, many: str | None = None) -> str:
    """``"1 job"``, ``"2 jobs"``."""
    return f"{n} {noun if n == 1 else (many or noun + 's')}"


def _key_order(key: Any) -> tuple[str, Any]:
    return type(key).__name__, key
