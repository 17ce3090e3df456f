"""The driver's view of the PostgreSQL server: bench databases and the counters it reads.

WAL position, commit counters and table statistics are read around each
workload, so each system's Postgres-side cost comes from the server and not
from the adapter's own report.
"""

from __future__ import annotations

import psycopg


class Postgres:
    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")

    def url(self, database: str) -> str:
        return f"{self.base_url}/{database}"

    def connect(self, database: str = "postgres"):
        return psycopg.connect(self.url(database), autocommit=True)

    def one(self, sql: str, database: str = "postgres", params=None):
        with self.connect(database) as conn:
            return conn.execute(sql, params).fetchone()

    def create(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')

    def drop(self, name: str) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    def cluster_snapshot(self, database: str) -> dict:
        """WAL position and per-database commit counters (read from the postgres DB)."""
        with self.connect() as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            lsn = conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]
            rows = conn.execute(
                "SELECT datname, xact_commit FROM pg_stat_database WHERE datname IS NOT NULL"
            ).fetchall()
        commits = dict(rows)
        return {"lsn": lsn, "commits": commits.get(database, 0), "all": commits, "db": database}

    @staticmethod
    def other_commits(before: dict, after: dict) -> int:
        """Commits made meanwhile by other databases (the driver's own `postgres` excluded)."""
        skip = {before["db"], "postgres"}
        common = (set(before["all"]) & set(after["all"])) - skip
        return sum(after["all"][k] - before["all"][k] for k in common)

    def all_commits(self) -> dict:
        with self.connect() as conn:
            conn.execute("SELECT pg_stat_clear_snapshot()")
            rows = conn.execute(
                "SELECT datname, xact_commit FROM pg_stat_database WHERE datname IS NOT NULL"
            ).fetchall()
        return dict(rows)

    def wal_bytes(self, start: str, end: str) -> int:
        return int(
            self.one("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)", params=(end, start))[0]
        )

    def table_stats(self, database: str) -> dict:
        """Dead/live tuples and total size over every user table of the bench database."""
        with self.connect(database) as conn:
            conn.execute("SELECT pg_stat_force_next_flush()")
            conn.execute("SELECT pg_stat_clear_snapshot()")
            dead, live, size, tables = conn.execute(
                "SELECT coalesce(sum(n_dead_tup), 0), coalesce(sum(n_live_tup), 0),"
                " coalesce(sum(pg_total_relation_size(relid)), 0), count(*)"
                " FROM pg_stat_user_tables"
            ).fetchone()
        return {
            "dead_tuples": int(dead),
            "live_tuples": int(live),
            "total_bytes": int(size),
            "tables": int(tables),
        }

    def analyze(self, database: str) -> None:
        with self.connect(database) as conn:
            conn.execute("ANALYZE")

    def checkpoint(self) -> None:
        with self.connect() as conn:
            conn.execute("CHECKPOINT")

    def info(self) -> dict:
        with self.connect() as conn:
            version = conn.execute("SELECT version()").fetchone()[0]
            settings = dict(
                conn.execute(
                    "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name IN"
                    " ('autovacuum', 'synchronous_commit', 'fsync', 'full_page_writes',"
                    " 'wal_level', 'shared_buffers', 'max_connections', 'max_wal_size',"
                    " 'checkpoint_timeout', 'wal_compression')"
                ).fetchall()
            )
        return {"version": version, "settings": settings}
