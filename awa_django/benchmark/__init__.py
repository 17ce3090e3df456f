"""``manage.py awa_bench``: measure this installation on its own database.

Workloads (each optional): bulk enqueue with COPY and single-row enqueue;
drain of N no-op jobs (async or sync handler) with W worker permits and P
processes; pickup latency at a fixed offered rate; and the PostgreSQL cost of
it all (WAL bytes and commits per job, dead tuples, schema size).  Run it on
a dedicated database: WAL and commit counters are cluster/database wide.
"""
