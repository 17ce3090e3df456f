"""Compare the squashed 0.1.0 substrate with the migration chain it replaced.

Builds two scratch databases on the server named by ``--dsn``: one by
running the old ``sql/schema/vNNN_*.sql`` files of a git revision in order
(each in its own transaction, as the old migrations did), one by running
the files the current initial migration lists.  Both are dumped with
``pg_dump --schema-only --schema=awa``, cut into one block per object, the
old dump renamed with :data:`RENAMED` and stripped of :data:`REMOVED`, and
the two compared object by object.  Prints the counts per object type and
every block that still differs; exits 1 when something differs beyond
:data:`EXPECTED`, :data:`FOLDED` and :data:`HARDENED`.

    python scripts/compare_substrate.py --old-rev <commit before the squash>

Kept in the repository as the record of what the squash renamed and
removed; it is not part of the package.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MIGRATION = ROOT / "awa_django" / "migrations" / "0001_initial.py"
SCHEMA = ROOT / "awa_django" / "sql" / "schema"

# Old name -> name in the 0.1.0 substrate.  Applied all at once, so a name
# that moved on (close_attempts -> close_rescued_attempts) and the version
# that took it over (close_attempts_v4 -> close_attempts) do not collide.
RENAMED = {
    "claim_ready_v8": "claim_ready",
    "claim_ready_v7": "claim_queue",
    "close_attempts_v4": "close_attempts",
    "close_attempts_v3": "close_attempts_checked",
    "close_attempts_v2": "close_attempts_unchecked",
    "close_attempts": "close_rescued_attempts",
    "closed_attempts_v2": "closed_attempts",
    "attempt_is_open_v2": "attempt_is_open",
    "record_progress_v3": "record_progress",
    "prune_ring_v5": "prune_ring",
    "prune_ring_v4": "prune_ring_unchecked",
    "rescue_v3": "rescue",
    "rescue_v2": "rescue_unchecked",
    "state_counts_v3": "state_counts",
    "state_counts_v2": "ring_state_counts",
    "state_counts": "queue_state_counts",
    "cancel_job_v2": "cancel_job",
    "cancel_job": "cancel_ring_job",
    "drain_queue_v2": "drain_queue",
    "drain_queue": "drain_ring_queue",
    "job_page_v2": "job_page",
    "reserve_ready_batch_v2": "reserve_ready_batch",
    "record_ring_outcome_v2": "record_ring_outcome",
    "record_ring_outcome": "record_rotation_outcome",
}

# Superseded functions nothing called any more (no statement in
# sql/queries, no function body, no trigger); the squash drops them.
REMOVED = (
    "attempt_is_open",
    "claim_ready",
    "claim_ready_v2",
    "claim_ready_v3",
    "claim_ready_v4",
    "claim_ready_v5",
    "claim_ready_v6",
    "closed_attempts",
    "job_page",
    "lock_ring_slot",
    "min_id",
    "promote_due",
    "prune_ring",
    "prune_ring_v2",
    "prune_ring_v3",
    "record_progress",
    "record_progress_v2",
    "reserve_ready_batch",
    "truncate_ring_slot",
)

_PRUNE_ARGS = "p_ring text, p_lock_timeout_ms integer, p_failed_retention interval"
_RESCUE_ARGS = (
    "p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[], "
    "p_dlq_off text[], p_limit integer"
)

# Differences the squash makes on purpose.
EXPECTED = {
    # The maintenance list named prune_ring and rescue_v2, so the entry points
    # that superseded them (prune_ring_v4/_v5, rescue_v3) escaped it; under
    # their final names they are listed and restricted to maintainers.
    ("ACL", f"FUNCTION prune_ring({_PRUNE_ARGS})"),
    ("ACL", f"FUNCTION prune_ring_unchecked({_PRUNE_ARGS})"),
    ("ACL", f"FUNCTION rescue({_RESCUE_ARGS})"),
    # Leader helpers the list did not name (issue 30): now maintainers only.
    ("ACL", "FUNCTION batch_op_step(p_id bigint, p_limit integer, p_lock_timeout_ms integer)"),
    ("ACL", "FUNCTION recheck_dependencies(p_limit integer)"),
    # The list itself: removed functions out, the functions above in, and
    # whatever calls a listed function found in pg_proc.
    ("FUNCTION", "maintenance_functions()"),
    # The column comment named a removed function.
    ("COMMENT", "COLUMN lease_claim_batches.claim_nonce"),
}

# The folds of issue 35 (near-copies the squash had kept): the checked,
# unchecked and rescue closes became awa.close_attempts, whose outcome rows
# awa.write_outcomes writes for the lease close too; cancel_ring_job and
# drain_ring_queue were folded into cancel_job and drain_queue over
# awa.cancel_backlog; retry_job and move_failed_to_dlq share
# awa.supersede_terminal.  Objects removed, added or rewritten by them:
_CLOSE_ARGS = (
    "smallint[], bigint[], integer[], bigint[], bigint[], {}text[], text[], "
    "timestamp with time zone[], smallint[], text[], text[], text[], text[]"
)
FOLDED = {
    ("FUNCTION", "array_pick(anyarray, integer[])"),
    ("FUNCTION", f"close_attempts_checked({_CLOSE_ARGS.format('bigint[], ')})"),
    ("FUNCTION", f"close_attempts_unchecked({_CLOSE_ARGS.format('')})"),
    ("FUNCTION", f"close_rescued_attempts({_CLOSE_ARGS.format('')})"),
    ("FUNCTION", f"close_attempts({_CLOSE_ARGS.format('bigint[], ')})"),
    (
        "FUNCTION",
        "close_leases(bigint[], bigint[], bigint[], text[], text[], "
        "timestamp with time zone[], smallint[], text[], text[], text[], text[])",
    ),
    ("FUNCTION", "rescue_attempts(text, interval, boolean, text[], text[], integer)"),
    ("TYPE", "won_closure"),
    # grant_roles hands that type to the owner role like the tables.
    ("FUNCTION", "grant_roles(name, name, name)"),
    ("FUNCTION", "write_outcomes(awa.won_closure[])"),
    ("FUNCTION", "cancel_ring_job(bigint, text)"),
    ("FUNCTION", "cancel_job(bigint, text)"),
    ("FUNCTION", "drain_ring_queue(text, text)"),
    ("FUNCTION", "drain_queue(text, text)"),
    ("FUNCTION", "cancel_backlog(bigint, text, text)"),
    ("FUNCTION", "already_state(bigint)"),
    ("FUNCTION", "retry_job(bigint, text)"),
    ("FUNCTION", "move_failed_to_dlq(bigint, text)"),
    ("FUNCTION", "supersede_terminal(bigint, text[], text)"),
    ("FUNCTION", "job_ordering_key(bigint)"),
    # The rotation records its outcome through the prune's
    # awa.record_ring_outcome (no lock hold): one writer of ring_status.
    ("FUNCTION", "record_rotation_outcome(text, text, text, integer, bigint)"),
    (
        "ACL",
        "FUNCTION record_rotation_outcome(p_ring text, p_action text, p_outcome text, "
        "p_slot integer, p_generation bigint)",
    ),
    ("FUNCTION", "rotate_ring(text)"),
    # The one-queue counts read through the list-of-queues counts.
    ("FUNCTION", "queue_state_counts(text)"),
    # A claim batch's count of closed items, asked by what runs, the
    # counts, the gauges and rescue.
    ("FUNCTION", "claim_batch_closed(smallint, bigint)"),
    ("FUNCTION", "ring_state_counts(text[])"),
    ("VIEW", "open_receipts"),
}

# Changes made on the squashed substrate since, for the least-privilege work
# (issue 30): prune reads the xmin horizon through awa.horizon_pinned, a
# SECURITY DEFINER function of the owner (who holds pg_read_all_stats), so
# the worker role no longer needs to read every session's activity.
HARDENED = {
    ("FUNCTION", "horizon_pinned(timestamp with time zone)"),
    ("ACL", "FUNCTION horizon_pinned(p_before timestamp with time zone)"),
    ("FUNCTION", "horizon_reader()"),
    ("FUNCTION", "prune_ring(text, integer, interval)"),
    ("FUNCTION", "restrict_maintenance()"),
    ("FUNCTION", "ring_slot_busy(text, integer, timestamp with time zone)"),
    (
        "ACL",
        "FUNCTION ring_slot_busy(p_ring text, p_slot integer, "
        "p_sealed_at timestamp with time zone)",
    ),
    ("FUNCTION", "ring_slot_pinned(timestamp with time zone)"),
    ("ACL", "FUNCTION ring_slot_pinned(p_sealed_at timestamp with time zone)"),
}

_NAME = re.compile(r"\b({})\b".format("|".join(sorted(RENAMED, key=len, reverse=True))))
_HEADER = re.compile(r"^-- Name: (?P<name>.*?); Type: (?P<type>[^;]*);", re.MULTILINE)


def uncomment(line: str) -> str:
    """``line`` without its ``--`` comment (one outside a string literal)."""
    quoted = False
    for index, char in enumerate(line):
        if char == "'":
            quoted = not quoted
        elif not quoted and line.startswith("--", index):
            return line[:index]
    return line


def rename(text: str) -> str:
    return _NAME.sub(lambda match: RENAMED[match.group(1)], text)


def psql(dsn: str, *args: str, stdin: str | None = None) -> str:
    command = ["psql", dsn, "-X", "-q", "-v", "ON_ERROR_STOP=1", *args]
    done = subprocess.run(command, input=stdin, text=True, check=False, capture_output=True)  # noqa: S603
    if done.returncode:
        raise SystemExit(f"psql failed: {done.stderr.strip()}")
    return done.stdout


def database_dsn(dsn: str, name: str) -> str:
    return re.sub(r"/[^/?]*(\?|$)", rf"/{name}\1", dsn.split("://", 1)[1]).join(
        [dsn.split("://", 1)[0] + "://", ""]
    )


def old_files(rev: str) -> list[str]:
    listing = subprocess.run(  # noqa: S603
        ["git", "-C", str(ROOT), "ls-tree", "--name-only", f"{rev}:awa_django/sql/schema/"],  # noqa: S607
        text=True,
        check=True,
        capture_output=True,
    ).stdout.split()
    names = sorted(n for n in listing if re.match(r"v\d{3}_.*\.sql$", n) and "_down" not in n)
    return [
        subprocess.run(  # noqa: S603
            ["git", "-C", str(ROOT), "show", f"{rev}:awa_django/sql/schema/{name}"],  # noqa: S607
            text=True,
            check=True,
            capture_output=True,
        ).stdout
        for name in names
    ]


def new_files() -> list[str]:
    listed = re.findall(r'RunAwaSQL\(\s*"([^"]+)"', MIGRATION.read_text())
    return [(SCHEMA / name).read_text() for name in listed]


def build(dsn: str, files: list[str], *, one_transaction: bool) -> None:
    if one_transaction:
        psql(dsn, "-1", "-f", "-", stdin="\n;\n".join(files))
    else:
        for text in files:
            psql(dsn, "-1", "-f", "-", stdin=text)


def objects(dsn: str, *, old: bool) -> dict[tuple[str, str], str]:
    done = subprocess.run(  # noqa: S603
        ["pg_dump", "--schema-only", "--schema=awa", "--no-owner", dsn],  # noqa: S607
        text=True,
        check=False,
        capture_output=True,
    )
    if done.returncode:
        raise SystemExit(f"pg_dump failed: {done.stderr.strip()}")
    dump = done.stdout
    headers = list(_HEADER.finditer(dump))
    found: dict[tuple[str, str], str] = {}
    for index, match in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(dump)
        body = dump[match.end() : end]
        body = "\n".join(
            line
            for line in body.splitlines()
            # \restrict / \unrestrict carry a random key per dump.
            if line.strip() and not line.startswith(("--", "\\restrict", "\\unrestrict"))
        )
        # Comments inside function bodies were rewritten (they told the
        # history); the code is what must match.
        body = "\n".join(
            stripped for line in body.splitlines() if (stripped := uncomment(line).rstrip())
        )
        kind, name = match["type"], match["name"]
        if old:
            function = re.match(r"(?:FUNCTION )?(\w+)\(", name)
            if function and function.group(1) in REMOVED and kind in ("FUNCTION", "ACL"):
                continue
            name, body = rename(name), rename(body)
        found[(kind, name)] = body
    return found


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--old-rev", required=True, help="git revision holding the vNNN files")
    parser.add_argument("--dsn", default="postgres://postgres@127.0.0.1:5432/postgres")
    parser.add_argument("--keep", action="store_true", help="keep the scratch databases")
    args = parser.parse_args()
    suffix = uuid.uuid4().hex[:8]
    names = {"old": f"awa_compare_old_{suffix}", "new": f"awa_compare_new_{suffix}"}
    try:
        for name in names.values():
            psql(args.dsn, "-c", f'CREATE DATABASE "{name}"')
        build(database_dsn(args.dsn, names["old"]), old_files(args.old_rev), one_transaction=False)
        build(database_dsn(args.dsn, names["new"]), new_files(), one_transaction=True)
        old = objects(database_dsn(args.dsn, names["old"]), old=True)
        new = objects(database_dsn(args.dsn, names["new"]), old=False)
    finally:
        if not args.keep:
            for name in names.values():
                psql(args.dsn, "-c", f'DROP DATABASE IF EXISTS "{name}"')
    counts = collections.Counter(
        (kind, side) for side, found in (("old", old), ("new", new)) for kind, _ in found
    )
    print(f"{'object type':32} {'old chain':>10} {'squashed':>10}")
    for kind in sorted({kind for kind, _ in counts}):
        print(f"{kind:32} {counts[(kind, 'old')]:>10} {counts[(kind, 'new')]:>10}")
    differing = 0
    for key in sorted(set(old) | set(new)):
        if old.get(key) == new.get(key):
            continue
        if key in EXPECTED:
            print(f"\n(expected) {key[0]} {key[1]}")
            continue
        if key in FOLDED:
            print(f"\n(folded) {key[0]} {key[1]}")
            continue
        if key in HARDENED:
            print(f"\n(hardened) {key[0]} {key[1]}")
            continue
        differing += 1
        print(
            f"\n=== {key[0]} {key[1]}: "
            + (
                "only in the old chain"
                if key not in new
                else "only in the squash"
                if key not in old
                else "differs"
            )
        )
        if key in old and key in new:
            import difflib

            sys.stdout.writelines(
                difflib.unified_diff(
                    old[key].splitlines(True), new[key].splitlines(True), "old", "new", n=1
                )
            )
            print()
    print(f"\n{differing} unexpected difference(s)")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
