"""``manage.py awa_job show|retry|cancel ID``: one job, from the command line."""

from __future__ import annotations

import dataclasses
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.domain import sealing
from awa_django.domain.records import JobInfo
from awa_django.management.options import (
    add_database_argument,
    add_json_argument,
    add_yes_argument,
)
from awa_django.management.output import (
    Output,
    confirm_change,
    not_found,
    operator_errors,
)


class Command(BaseCommand):
    help = (
        "Show, retry or cancel one job by id. Example: manage.py awa_job show 42 --json; "
        "manage.py awa_job cancel 42"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        actions = {
            "show": "Print the job: state, attempts, arguments, errors with tracebacks, "
            "progress, return value and timestamps (an encrypted job's sealed, unless "
            "--decrypt).",
            "retry": "Run a failed or cancelled job again (same id, fresh attempt count, due "
            "now). Any other state is left as it is.",
            "cancel": "Cancel the job in whatever live state it is: an available or scheduled "
            "job never runs, a running handler is told to stop. A finished job is left as it is.",
        }
        for name, about in actions.items():
            action = sub.add_parser(name, help=about, description=about)
            action.add_argument("job_id", type=int, metavar="ID", help="The job's id.")
            if name == "show":
                add_json_argument(action, "the job")
                action.add_argument(
                    "--decrypt",
                    action="store_true",
                    help="Show an encrypted job's arguments, return value, progress and error "
                    "messages opened with AWA['ENCRYPTION_KEYS'] (recorded in the audit log, "
                    "with you as actor). Without it they are shown sealed.",
                )
            else:
                add_yes_argument(action)
            add_database_argument(action)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        job_id, database = options["job_id"], options["database"]
        with operator_errors():
            if options["action"] == "show":
                info: JobInfo | None
                if options["decrypt"]:
                    info = ops.decrypt_job(job_id, actor=ops.command_actor(), database=database)
                else:
                    info = ops.get_job(job_id, database=database)
                if info is None:
                    raise not_found(f"no job with id {job_id}")
                self._show(out, info, as_json=options["json"])
                return
            self._change(out, options)

    @staticmethod
    def _change(out: Output, options: dict[str, Any]) -> None:
        action, job_id, database = options["action"], options["job_id"], options["database"]
        current = ops.get_job(job_id, database=database)
        if current is None:
            raise not_found(f"no job with id {job_id}")
        confirm_change(
            out,
            database,
            f"{action} job {job_id} ({current.kind} on queue {current.queue}, now {current.state})",
            assume_yes=options["yes"],
        )
        change = ops.retry_job if action == "retry" else ops.cancel_job
        changed = change(
            job_id, actor=ops.command_actor(), database=database
        )  # JobNotFound if it went meanwhile
        info = ops.get_job(job_id, database=database)
        state = info.state if info else "gone"
        if changed:
            out.line(f"job {job_id}: {action} done; it is now {state}")
        else:
            out.line(f"job {job_id} is {state}: nothing to {action}")

    @staticmethod
    def _show(out: Output, info: JobInfo, *, as_json: bool) -> None:
        if as_json:
            out.json(info)
            return
        data = {key: _shown(value) for key, value in dataclasses.asdict(info).items()}
        out.table(
            f"job {info.id}",
            ["field", "value"],
            [[key, value] for key, value in data.items() if key != "errors"],
            header=False,
        )
        for entry in info.errors:
            out.heading(
                f"attempt {entry.get('attempt')} {entry.get('type')}: "
                f"{_shown(entry.get('message'))} ({entry.get('at')})"
            )
            if entry.get("traceback"):
                out.line(str(_shown(entry["traceback"])))


def _shown(value: Any) -> Any:
    """A sealed value as its key id and size (the sealed text says no more)."""
    if sealing.is_sealed(value):
        return f"<encrypted with key {sealing.sealed_key_id(value)}, {len(value)} characters>"
    return value
