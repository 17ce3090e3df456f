"""``manage.py awa_queue stats|pause|resume|drain|shards|overrides``: queues from the
command line."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from awa_django import ops
from awa_django.domain.overrides import OVERRIDABLE, check_keys, check_overrides
from awa_django.domain.records import JOB_STATES, QueueInfo
from awa_django.management.options import (
    add_database_argument,
    add_json_argument,
    add_yes_argument,
)
from awa_django.management.output import (
    Column,
    Output,
    confirm_change,
    not_found,
    operator_errors,
    usage_error,
)

#: The states ``drain`` cancels (running and waiting attempts finish).
DRAINED_STATES = ("available", "scheduled", "waiting", "retryable")


def _state(info: QueueInfo) -> str:
    return "paused" if info.paused else "active"


def _assignments(pairs: list[str]) -> dict[str, Any]:
    """``KEY=VALUE`` arguments, each VALUE parsed as JSON (exit 2 otherwise)."""
    values: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise usage_error(f"{pair!r}: expected KEY=VALUE, e.g. max_workers=5")
        try:
            values[key] = json.loads(text)
        except ValueError:
            raise usage_error(
                f"{pair!r}: the value is not JSON (a number, null, or a list such as [50,50])"
            ) from None
    return values


def _shown(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={json.dumps(value)}" for key, value in sorted(values.items()))


class Command(BaseCommand):
    help = (
        "Show queue statistics, pause, resume or drain a queue, set its enqueue shards, "
        "override its dispatch options live. Examples: manage.py awa_queue stats --json; "
        "manage.py awa_queue pause email; manage.py awa_queue drain email --yes; "
        "manage.py awa_queue overrides set email max_workers=5 rate_limit=[50,50]"
    )

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
        about = (
            "Every queue the settings declare or the database knows of (or only QUEUE): "
            "jobs per state and whether it is paused."
        )
        stats = sub.add_parser("stats", help=about, description=about)
        stats.add_argument(
            "queue", nargs="?", metavar="QUEUE", help="Only this queue (exit 1 if unknown)."
        )
        add_json_argument(stats, "the queues")
        add_database_argument(stats)
        actions = {
            "pause": "Stop every worker claiming the queue, in every process, until it is "
            "resumed (workers notice within one poll interval; running attempts finish; "
            "jobs can still be enqueued).",
            "resume": "Let workers claim a paused queue again.",
            "drain": "Cancel every available, scheduled and retry-waiting job of the queue; "
            "running and waiting attempts finish as they would.",
        }
        for name, text in actions.items():
            action = sub.add_parser(name, help=text, description=text)
            action.add_argument(
                "queue",
                metavar="QUEUE",
                help="The queue's name (one the settings declare or the database knows of).",
            )
            if name == "drain":
                action.add_argument(
                    "--reason",
                    default="drained by an operator",
                    metavar="TEXT",
                    help="Kept in each cancelled job's error history "
                    "(default: 'drained by an operator').",
                )
            add_yes_argument(action)
            add_database_argument(action)
        about = (
            "Give the queue N enqueue shards (1 to 64): producers spread its jobs over N "
            "lanes per priority, FIFO per lane instead of per queue (jobs of one ordering "
            "key keep their order)."
        )
        shards = sub.add_parser("shards", help=about, description=about)
        shards.add_argument("queue", metavar="QUEUE", help="The queue's name.")
        shards.add_argument("shards", metavar="N", type=int, help="Enqueue shards, 1 to 64.")
        add_yes_argument(shards)
        add_database_argument(shards)
        self._add_overrides(sub)

    @staticmethod
    def _add_overrides(sub: Any) -> None:
        keys = ", ".join(OVERRIDABLE)
        about = (
            f"Live per-queue overrides of {keys}: running workers apply them within a few "
            "seconds, without a restart; the settings are the default again once cleared."
        )
        overrides = sub.add_parser("overrides", help=about, description=about)
        what = overrides.add_subparsers(dest="overrides_action", required=True, metavar="ACTION")
        text = (
            "Override options of QUEUE (the others keep their current override): "
            "KEY=VALUE with VALUE as JSON, e.g. max_workers=5 poll_interval=0.5 "
            "rate_limit=[50,50] rate_limit=null deadline=600."
        )
        change = what.add_parser("set", help=text, description=text)
        change.add_argument("queue", metavar="QUEUE", help="The queue's name.")
        change.add_argument(
            "values", nargs="+", metavar="KEY=VALUE", help=f"An option to override: {keys}."
        )
        add_yes_argument(change)
        add_database_argument(change)
        text = "The overrides of QUEUE (default: of every queue)."
        show = what.add_parser("show", help=text, description=text)
        show.add_argument("queue", nargs="?", metavar="QUEUE", help="Only this queue.")
        add_json_argument(show, "the overrides (queue -> option -> value)")
        add_database_argument(show)
        text = "Drop overrides of QUEUE (the KEYs given, or every one): back to the settings."
        clear = what.add_parser("clear", help=text, description=text)
        clear.add_argument("queue", metavar="QUEUE", help="The queue's name.")
        clear.add_argument(
            "keys", nargs="*", metavar="KEY", help="Only these options (default: all)."
        )
        add_yes_argument(clear)
        add_database_argument(clear)

    def handle(self, *args: Any, **options: Any) -> None:
        out = Output.of(self.stdout, options)
        with operator_errors():
            if options["action"] == "stats":
                self._stats(out, options)
            elif options["action"] == "shards":
                self._shards(out, options)
            elif options["action"] == "overrides":
                self._overrides(out, options)
            else:
                self._change(out, options)

    @staticmethod
    def _find(queue: str, database: str | None) -> QueueInfo:
        for info in ops.list_queues(database=database):
            if info.name == queue:
                return info
        ops.get_queue(queue, database=database)  # InvalidJob (exit 2) for an invalid name
        raise not_found(
            f"no queue named {queue!r}: AWA['QUEUES'] does not declare it and the "
            "database has no trace of it"
        )

    def _stats(self, out: Output, options: dict[str, Any]) -> None:
        database = options["database"]
        if options["queue"] is not None:
            queues = [self._find(options["queue"], database)]
        else:
            queues = ops.list_queues(database=database)
        if options["json"]:
            out.json(queues)
            return
        out.table(
            "queues",
            [
                "queue",
                "state",
                *(Column(state.replace("_", " "), "right") for state in JOB_STATES),
                "configured",
            ],
            [
                [info.name, _state(info), *(info.counts[s] for s in JOB_STATES), info.configured]
                for info in queues
            ],
            empty="no queues",
        )

    def _change(self, out: Output, options: dict[str, Any]) -> None:
        action, database = options["action"], options["database"]
        info = self._find(options["queue"], database)
        name = info.name
        if action == "drain":
            pending = ", ".join(f"{info.counts[s]} {s}" for s in DRAINED_STATES)
            summary = f"drain queue {name}: cancels {pending} job(s); running ones finish"
        else:
            summary = f"{action} queue {name} (now {_state(info)})"
        confirm_change(out, database, summary, assume_yes=options["yes"])
        if action == "drain":
            count = ops.drain_queue(
                name, reason=options["reason"], actor=ops.command_actor(), database=database
            )
            out.line(f"queue {name} drained: {count} job(s) cancelled")
            return
        change = ops.pause_queue if action == "pause" else ops.resume_queue
        if change(name, actor=ops.command_actor(), database=database):
            out.line(f"queue {name} {action}d")
        elif action == "pause":
            out.line(f"queue {name} is already paused: nothing to pause")
        else:
            out.line(f"queue {name} is not paused: nothing to resume")

    def _shards(self, out: Output, options: dict[str, Any]) -> None:
        database, count = options["database"], options["shards"]
        if not 1 <= count <= ops.MAX_ENQUEUE_SHARDS:
            raise usage_error(f"N must be 1 to {ops.MAX_ENQUEUE_SHARDS}, got {count}")
        info = self._find(options["queue"], database)
        confirm_change(
            out,
            database,
            f"queue {info.name}: {info.enqueue_shards} -> {count} enqueue shard(s)",
            assume_yes=options["yes"],
        )
        before = ops.set_enqueue_shards(
            info.name, count, actor=ops.command_actor(), database=database
        )
        if before == count:
            out.line(f"queue {info.name} already has {count} enqueue shard(s): nothing changed")
        else:
            out.line(f"queue {info.name}: {count} enqueue shard(s) (was {before})")

    def _overrides(self, out: Output, options: dict[str, Any]) -> None:
        action, database, queue = options["overrides_action"], options["database"], options["queue"]
        if action == "show":
            found = ops.queue_overrides(queue, database=database)
            if options["json"]:
                out.json(found)
                return
            out.table(
                "queue overrides",
                ["queue", "option", "value"],
                [
                    [name, key, json.dumps(value)]
                    for name, values in sorted(found.items())
                    for key, value in sorted(values.items())
                ],
                empty="no queue overrides" if queue is None else f"queue {queue}: no overrides",
            )
            return
        if action == "set":
            values = _assignments(options["values"])
            name = self._find(queue, database).name
            checked = check_overrides(values)  # refused before anything is asked
            summary = f"override on queue {name}: {_shown(checked)}"
            confirm_change(out, database, summary, assume_yes=options["yes"])
            now = ops.set_queue_override(
                name, actor=ops.command_actor(), database=database, **values
            )
            out.line(f"queue {name} overrides: {_shown(now)}")
            return
        keys = check_keys(tuple(options["keys"]))
        current = ops.queue_overrides(queue, database=database).get(queue, {})
        dropped = sorted(current) if not keys else sorted(set(keys) & set(current))
        if not dropped:
            out.line(f"queue {queue}: no such override to clear")
            return
        confirm_change(
            out,
            database,
            f"clear on queue {queue}: {', '.join(dropped)} (back to the settings)",
            assume_yes=options["yes"],
        )
        cleared = ops.clear_queue_override(
            queue, *keys, actor=ops.command_actor(), database=database
        )
        out.line(f"queue {queue}: cleared {', '.join(cleared) or 'nothing'}")
