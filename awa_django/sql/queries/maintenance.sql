-- Maintenance-leader statements, run on the leader's dedicated connection.

-- name: try_lead
SELECT pg_try_advisory_lock(%s)

-- name: holds_lead
SELECT EXISTS (
    SELECT 1 FROM pg_locks l
     WHERE l.locktype = 'advisory' AND l.granted AND l.pid = pg_backend_pid()
       AND ((l.classid::bigint << 32) | l.objid::bigint) = %s)

-- name: release_lead
SELECT pg_advisory_unlock(%s)

-- name: depose_silent_leader
-- A standby's check on the leader (runtime/leadership/leader.py): terminate the session
-- holding the leader lock when it has run no statement for that many seconds.  A
-- live leader checks its lock every election interval; a session that stays
-- idle much longer belongs to a stopped process or a host that vanished
-- while its TCP connection still looks open.  pg_terminate_backend sits in
-- the select list, so it runs only for the row the conditions chose; a
-- session this role may not signal is left alone.
SELECT a.pid, pg_terminate_backend(a.pid)
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.classid::bigint << 32) | l.objid::bigint) = %s
   AND a.pid <> pg_backend_pid()
   AND a.state = 'idle'
   AND a.state_change < clock_timestamp() - make_interval(secs => %s)
   AND pg_has_role(a.usesysid, 'MEMBER')

-- name: ensure_ring_partitions
SELECT awa.ensure_ring_partitions(%s, %s)

-- name: rotate_ring
SELECT awa.rotate_ring(%s)

-- name: prune_detach_target
-- The DETACH statement to run before a prune of this ring, or NULL.
SELECT awa.prune_detach_target(%s)

-- name: prune_ring
SELECT awa.prune_ring(%s, %s, make_interval(secs => %s))

-- name: prune_horizon
-- Whether prune can read every session's transaction horizon: the role its
-- gate reads pg_stat_activity as (awa.horizon_reader, the owner of the
-- SECURITY DEFINER awa.horizon_pinned) and whether that role is a superuser
-- or has pg_read_all_stats; then the same two for the maintenance leader's
-- prunes (NULLs when no process leads).  The gate does not depend on the
-- role a session runs as.
SELECT awa.horizon_reader()::text, awa.horizon_readable(awa.horizon_reader()),
       CASE WHEN a.pid IS NOT NULL THEN awa.horizon_reader()::text END,
       CASE WHEN a.pid IS NOT NULL THEN awa.horizon_readable(awa.horizon_reader()) END
  FROM (SELECT 1) AS one
  LEFT JOIN (pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid)
    ON l.locktype = 'advisory' AND l.granted
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.classid::bigint << 32) | l.objid::bigint) = %s
 LIMIT 1

-- name: rescue_attempts
SELECT awa.rescue(%s, make_interval(secs => %s), %s, %s::text[], %s::text[], %s)

-- name: closed_attempts
SELECT job_id, run_lease, claim_nonce
  FROM awa.closed_attempts(%s::smallint[], %s::bigint[], %s::integer[], %s::bigint[],
                              %s::bigint[], %s::bigint[])

-- name: cleanup_unique_claims
SELECT awa.cleanup_unique_claims(make_interval(secs => %s), %s)

-- name: cleanup
SELECT awa.cleanup(make_interval(secs => %s), make_interval(secs => %s), %s)

-- name: leader
SELECT a.application_name, a.pid, a.backend_start
  FROM pg_locks l
  JOIN pg_stat_activity a ON a.pid = l.pid
 WHERE l.locktype = 'advisory' AND l.granted
   AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
   AND ((l.classid::bigint << 32) | l.objid::bigint) = %s

-- name: maintenance_lease
-- The election behind a pooler (runtime/leadership/lease.py): its holder, while unexpired.
SELECT holder, generation, won_at, expires_at FROM awa.maintenance_lease
 WHERE expires_at > clock_timestamp()

-- name: ring_cursors
SELECT ring, (awa.ring_cursor(ring)).slot, (awa.ring_cursor(ring)).generation,
       (awa.ring_cursor(ring)).rotated_at, slot_count
  FROM awa.ring_config ORDER BY ring

-- name: ring_status
SELECT ring, action, outcome, slot, generation, at, truncations, rotations,
       last_prune_exclusive_ms
  FROM awa.ring_status ORDER BY ring, action

-- name: table_stats
SELECT s.relname, s.n_live_tup, s.n_dead_tup, s.n_tup_upd, s.n_tup_del, s.n_tup_ins,
       pg_total_relation_size(s.relid)
  FROM pg_stat_user_tables s
 WHERE s.schemaname = 'awa'
 ORDER BY s.relname

-- name: schema_size
SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0)::bigint
  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
 WHERE n.nspname = 'awa' AND c.relkind IN ('r', 'm')

-- name: backlog
SELECT (SELECT count(*) FROM awa.deferred_jobs),
       (SELECT count(*) FROM awa.deferred_jobs WHERE run_at <= clock_timestamp()),
       (SELECT count(*) FROM awa.open_receipts),
       (SELECT count(*) FROM awa.runtime_instances),
       (SELECT count(*) FROM awa.dlq_entries)

-- name: pg_counters
SELECT pg_current_wal_lsn()::text,
       (SELECT xact_commit FROM pg_stat_database WHERE datname = current_database())

-- name: wal_bytes_between
SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint

-- name: transaction_read_only
-- True on a hot standby (or for a role defaulting to read-only transactions).
SELECT current_setting('transaction_read_only') = 'on'

-- name: claim_maintenance_lease
-- The lease election (runtime/leadership/lease.py): renew or take the lease.
SELECT awa.claim_maintenance_lease(%s, %s, make_interval(secs => %s))

-- name: holds_maintenance_lease
SELECT awa.holds_maintenance_lease(%s, %s)

-- name: release_maintenance_lease
SELECT awa.release_maintenance_lease(%s, %s)
