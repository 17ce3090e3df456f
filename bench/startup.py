"""Where a worker's start-up goes: a timeline from process start to first claim.

    python bench/startup.py [--runs 5] [--job] [--tree DIR ...] [-- WORKER ARGS]

Starts ``bench/systems/awa/manage.py awa_worker --queue bench:512 --burst``
(the bench's "worker start-up s": spawn to exit on an empty queue) RUNS
times per tree, the trees taking turns (A B A B ...) so a drift of the
machine's speed hits them alike, and prints min / median of each
milestone in milliseconds since the spawn.  ``--tree DIR`` runs the
awa_django of another checkout (``PYTHONPATH=DIR``, e.g. an export of the
base commit), for a paired before/after; by default the one installed.
``--job`` enqueues one no-op job before each run, so the timeline reaches
the first handler.  ``DATABASE_URL`` names the (migrated) database.

The child is this file again (``--child``): it reads the wall clock its
parent stamped just before the spawn, then runs ``manage.py`` in-process
with a few wrappers and one observer that note the time of each milestone:

    interpreter   this script's first line (interpreter and site start-up)
    django        ``django.setup()`` returned (settings, apps, jobs modules)
    config        the command handed its config to ``run_worker``
    pool          the connection pool is open
    ready         registration, overrides and stripe check done
    claim_sent    the first claim statement was sent
    claim_back    ... and returned
    listening     LISTEN is in place
    handler       the first handler starts (``--job`` only)
    exit          ``manage.py`` returned (burst: the queue was empty)
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

T0 = time.time()
HERE = os.path.dirname(os.path.abspath(__file__))
MANAGE = os.path.join(HERE, "systems", "awa", "manage.py")
DEFAULT_ARGS = ["awa_worker", "--queue", "bench:512", "--burst"]
ORDER = [
    "interpreter",
    "django",
    "config",
    "pool",
    "ready",
    "claim_sent",
    "claim_back",
    "listening",
    "handler",
    "exit",
]


def child(argv: list[str]) -> None:
    spawned = float(os.environ["AWA_STARTUP_SPAWNED"])
    marks: dict[str, float] = {"interpreter": T0 - spawned}
    base = time.perf_counter() - (time.time() - spawned)

    def mark(name: str, at: float | None = None) -> None:
        marks.setdefault(name, (time.perf_counter() if at is None else at) - base)

    sys.path.insert(0, os.path.dirname(MANAGE))
    sys.path.append(os.path.dirname(os.path.dirname(MANAGE)))  # benchlib
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "benchsite.settings")
    import django

    setup = django.setup

    def timed_setup(*args, **kwargs):
        setup(*args, **kwargs)
        mark("django")
        _instrument(mark)

    django.setup = timed_setup
    from django.core.management import execute_from_command_line

    try:
        execute_from_command_line([MANAGE, *argv])
    except SystemExit as exc:
        marks["code"] = exc.code or 0
    mark("exit")
    print("AWA-STARTUP " + json.dumps(marks), file=sys.stderr, flush=True)


def _instrument(mark) -> None:
    """Wrap the worker's start-up steps (after django.setup: the app is loaded)."""
    from psycopg_pool import AsyncConnectionPool

    from awa_django.observability.hooks import Observer, observers
    from awa_django.runtime.process import notifier, worker

    def after(owner, name, label):
        original = getattr(owner, name)

        async def wrapped(*args, **kwargs):
            result = await original(*args, **kwargs)
            mark(label)
            return result

        setattr(owner, name, wrapped)

    after(AsyncConnectionPool, "open", "pool")
    after(worker.Worker, "_ready_to_claim", "ready")
    after(notifier.Notifier, "_listen", "listening")
    run_worker = worker.run_worker

    def timed_run_worker(*args, **kwargs):
        mark("config")
        return run_worker(*args, **kwargs)

    worker.run_worker = timed_run_worker

    class Marks(Observer):
        scoped = True  # so that attempt_scope is called

        def claimed(self, queue, wanted, claimed, seconds):
            now = time.perf_counter()
            mark("claim_sent", now - seconds)
            mark("claim_back", now)

        def attempt_scope(self, job):
            mark("handler")
            return None

    observers.add(Marks())


def parent(args: argparse.Namespace) -> None:
    trees = args.tree or [None]
    runs: dict[str, list[dict[str, float]]] = {str(t): [] for t in trees}
    worker_args = args.worker_args or DEFAULT_ARGS
    for number in range(args.runs + 1):  # the first round warms caches, not counted
        for tree in trees:
            env = dict(os.environ)
            if tree is not None:
                env["PYTHONPATH"] = tree
            if args.job:
                subprocess.run(  # noqa: S603 - this interpreter, the bench's adapter
                    [sys.executable, os.path.join(HERE, "systems", "awa", "adapter.py"), "probe"],
                    env=env,
                    check=True,
                    capture_output=True,
                )
            env["AWA_STARTUP_SPAWNED"] = repr(time.time())
            done = subprocess.run(  # noqa: S603 - this interpreter, this script
                [sys.executable, __file__, "--child", *worker_args],
                env=env,
                capture_output=True,
                text=True,
            )
            line = [x for x in done.stderr.splitlines() if x.startswith("AWA-STARTUP ")]
            if not line:
                sys.exit(f"no timeline from the worker:\n{done.stderr[-2000:]}")
            if number:
                runs[str(tree)].append(json.loads(line[0][len("AWA-STARTUP ") :]))
    for tree, timelines in runs.items():
        print(f"\n{tree if tree != 'None' else 'installed awa_django'}: {len(timelines)} runs, ms")
        print(f"{'milestone':<12} {'min':>8} {'median':>8}")
        for name in ORDER:
            values = [t[name] * 1000 for t in timelines if name in t]
            if values:
                print(f"{name:<12} {min(values):8.0f} {statistics.median(values):8.0f}")
        # The worker's own share, net of Django's set-up (the noisiest part).
        values = [(t["claim_sent"] - t["django"]) * 1000 for t in timelines if "claim_sent" in t]
        if values:
            print(f"{'django->claim':<12} {min(values):8.0f} {statistics.median(values):8.0f}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2:])
    else:
        parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
        parser.add_argument("--runs", type=int, default=5)
        parser.add_argument("--job", action="store_true")
        parser.add_argument("--tree", action="append")
        parser.add_argument("worker_args", nargs="*")
        parent(parser.parse_args())
