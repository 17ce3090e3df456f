-- Read-only probes of awa_django.doctor: the PostgreSQL hazards that hurt a
-- queue.  Ages are measured with clock_timestamp(), not now(): the doctor
-- may run inside a long transaction of its caller, and now() would be the
-- start of that transaction.

-- name: clear_stats_snapshot
-- pg_stat_* views are read once per transaction and then cached; drop the
-- cache so a probe sees sessions and counters as they are now.
SELECT pg_stat_clear_snapshot()

-- name: horizon_sessions
-- Sessions of this database that hold back the xmin horizon (a snapshot,
-- backend_xmin, or a transaction id, backend_xid), the one holding it back
-- furthest first.  pinned_since: for a client backend with a snapshot, the
-- first ring rotation after its transaction began -- every slot sealed from
-- then on stays unprunable while it is open (awa.ring_slot_pinned).
-- Autovacuum workers hold a snapshot too, but never the horizon.
SELECT a.pid, a.application_name, a.usename::text, a.state, a.backend_type, a.xact_start,
       round(extract(epoch FROM clock_timestamp() - a.xact_start), 1)::float8,
       a.backend_xmin::text, a.backend_xid::text,
       GREATEST(age(a.backend_xmin), age(a.backend_xid)),
       left(a.query, %(excerpt)s),
       CASE WHEN a.backend_type = 'client backend' AND a.backend_xmin IS NOT NULL
            THEN (SELECT min(r.rotated_at)
                    FROM (SELECT rotated_at FROM awa.queue_ring_rotations
                          UNION ALL SELECT rotated_at FROM awa.claim_ring_rotations
                          UNION ALL SELECT rotated_at FROM awa.lease_ring_rotations) AS r
                   WHERE r.rotated_at > a.xact_start)
       END,
       clock_timestamp()
  FROM pg_stat_activity a
 WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
   AND a.backend_type IS DISTINCT FROM 'autovacuum worker'
   AND (a.backend_xmin IS NOT NULL OR a.backend_xid IS NOT NULL)
 ORDER BY GREATEST(age(a.backend_xmin), age(a.backend_xid)) DESC, a.xact_start
 LIMIT %(limit)s

-- name: prepared_transactions
-- Two-phase transactions of this database waiting for COMMIT/ROLLBACK
-- PREPARED: they hold the horizon like an open session, with no session.
SELECT p.gid, p.owner::text, p.prepared,
       round(extract(epoch FROM clock_timestamp() - p.prepared), 1)::float8, age(p.transaction)
  FROM pg_prepared_xacts p
 WHERE p.database = current_database()
 ORDER BY p.prepared
 LIMIT %(limit)s

-- name: idle_replication_slots
-- Slots no consumer is connected to that still hold a data xmin (physical
-- slots with hot_standby_feedback, or logical slots): the horizon stays
-- where it was when the consumer left, for every database.
SELECT s.slot_name::text, s.slot_type, s.database::text, s.xmin::text, age(s.xmin)
  FROM pg_replication_slots s
 WHERE NOT s.active AND s.xmin IS NOT NULL
 ORDER BY age(s.xmin) DESC

-- name: table_health
-- Tuples, vacuum history and size of every table of schema awa (estimates
-- from the statistics collector, no scan).
SELECT s.relname::text, s.n_live_tup, s.n_dead_tup, s.last_vacuum, s.last_autovacuum,
       s.autovacuum_count, pg_table_size(s.relid)
  FROM pg_stat_user_tables s
 WHERE s.schemaname = 'awa'
 ORDER BY s.n_dead_tup DESC, s.relname

-- name: waiting_queues
-- Queues with available jobs (awa.queue_state_counts, the console's exact
-- counters), the oldest ready segment beyond each lane's claim cursor, and
-- whether the queue is paused.
SELECT c.queue, c.n, o.oldest, round(extract(epoch FROM clock_timestamp() - o.oldest), 1)::float8,
       m.paused_at
  FROM awa.queue_state_counts(NULL) c
  LEFT JOIN LATERAL (
        SELECT min(s.run_at) AS oldest
          FROM awa.queue_claim_heads h
          JOIN awa.ready_segments s
            ON s.queue = h.queue AND s.priority = h.priority AND s.shard = h.shard
           AND s.end_seq > h.claim_seq
         WHERE h.queue = c.queue) AS o ON true
  LEFT JOIN awa.queue_meta m ON m.queue = c.queue
 WHERE c.state = 'available' AND c.n > 0
 ORDER BY c.queue

-- name: earliest_samples
-- Per queue, the earliest sample of the leader's counters in the window.
SELECT DISTINCT ON (q.queue) q.queue, q.sampled_at, COALESCE((q.counts ->> 'available')::bigint, 0)
  FROM awa.queue_samples q
 WHERE q.sampled_at >= clock_timestamp() - make_interval(secs => %(window)s)
   AND q.queue = ANY(%(queues)s::text[])
 ORDER BY q.queue, q.sampled_at

-- name: role_visibility
-- Whether this role can read every session's activity (superuser or
-- pg_read_all_stats), and the sessions of this database it cannot: their
-- backend_type, state and xact_start read as NULL.
SELECT current_user::text, r.rolsuper, pg_has_role(current_user, 'pg_read_all_stats', 'USAGE'),
       count(a.pid), count(a.pid) FILTER (WHERE a.backend_xmin IS NOT NULL),
       COALESCE(array_agg(DISTINCT a.usename::text) FILTER (WHERE a.usename IS NOT NULL), '{}')
  FROM pg_roles r
  LEFT JOIN pg_stat_activity a
    ON a.datname = current_database() AND a.pid <> pg_backend_pid() AND a.backend_type IS NULL
 WHERE r.rolname = current_user
 GROUP BY r.rolsuper

-- name: connection_budget
-- What bounds the connections this role may open to this database.
-- reserved_connections exists from PostgreSQL 16 on (NULL before).
SELECT current_setting('max_connections')::int,
       current_setting('superuser_reserved_connections')::int,
       COALESCE(current_setting('reserved_connections', true)::int, 0),
       r.rolsuper, r.rolconnlimit, d.datconnlimit,
       (SELECT count(*) FROM pg_stat_activity a
         WHERE a.backend_type = 'client backend' OR (a.backend_type IS NULL AND a.datid IS NOT NULL))
  FROM pg_roles r, pg_database d
 WHERE r.rolname = current_user AND d.datname = current_database()

-- name: backend_pid
SELECT pg_backend_pid()

-- name: listen
-- {channel} is composed with psycopg.sql.Identifier.
LISTEN {channel}

-- name: notify
SELECT pg_notify(%s, %s)
