"""Side-by-side peer benchmark: awa_django against other Python job queues.

Runs the same workloads for every system, one system after another, each in
a fresh PostgreSQL database ``bench_<system>_<random>`` (dropped afterwards),
and writes ``results.md``, ``results.json`` and ``results.png``.

    bash bench/run.sh [--quick] [--systems awa_async,celery] ...

(``run.sh`` creates the virtualenvs with ``setup.sh`` and then runs
``python -m bench.compare`` with ``bench/.venvs/driver/bin/python``.)
Workloads, per system:

- W1  bulk enqueue of N no-op jobs through the system's fastest bulk path
- W2  drain of those N jobs by one worker process (spawn to done)
- W3  single enqueues at --w3-rate jobs/s for --w3-seconds while one worker
      runs; pickup latency = handler start - enqueue call (p50/p95/p99)
- W4  --w4-rate jobs/s for --w4-seconds, one worker: achieved throughput,
      queue depth at the end, dead tuples and table size at --w4-sample-at s
      and at the end
- Postgres side of W1+W2: WAL bytes per job, commits per job, dead tuples
  right after the drain.

Each system runs through ``bench/systems/<system>/adapter.py`` under its own
virtualenv; see ``bench/systems/benchlib.py`` for the adapter command line.

The driver, one module per concern: ``peers`` (the systems table),
``processes`` (running adapters), ``postgres`` (the server's counters),
``measures`` (latencies, background work), ``workloads`` (W1-W4),
``provenance`` (versions, checkout, machine), ``report`` (results.md and
results.png) and ``__main__`` (the command line).
"""
