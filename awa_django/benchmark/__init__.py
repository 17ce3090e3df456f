"""``manage.py awa_bench``: measure this installation on its own database.

Workloads (each optional): bulk enqueue with COPY and single-row enqueue;
drain of N no-op jobs (async or sync handler) with W worker permits and P
processes; pickup latency at a fixed offered rate; and the PostgreSQL cost of
it all (WAL bytes and commits per job, dead tuples, schema size).  Drain and
latency also count claim statements per job.  Focused stages measure the hot
path on its own: 1-job claim latency over growing single-enqueue backlogs,
and a 1-permit worker next to the bare claim + close loop.  Run it on a
dedicated database: WAL and commit counters are cluster/database wide.
"""
