-- Worker runtime statements, run on the worker's own psycopg connections
-- (autocommit: each statement is its own short transaction).

-- name: claim_ready
-- One queue, or one logical queue over its stripes visited in the order
-- given (an unstriped queue is its own only stripe).  Jobs with a
-- concurrency key are handed out only with a slot of their key.
SELECT job_id, run_lease, kind, priority, effective_priority, attempt, max_attempts,
       args, kwargs, metadata, tags, errors, progress, claim_slot, batch_id, item, deadline_at
  FROM awa.claim_ready(%s, %s::text[], %s, %s, make_interval(secs => %s),
                          make_interval(secs => %s), %s)

-- name: close_attempts
SELECT job_id, run_lease
  FROM awa.close_attempts(%s::smallint[], %s::bigint[], %s::integer[], %s::bigint[],
                          %s::bigint[], %s::bigint[], %s::text[], %s::text[],
                          %s::timestamptz[], %s::smallint[], %s::text[], %s::text[],
                          %s::text[], %s::text[])

-- name: complete_receipt
-- An atomic handler's close, inside its transaction (close.sql).
SELECT awa.complete_receipt(%s::smallint, %s::bigint, %s::integer, %s::bigint, %s::bigint,
                            %s::bigint, %s::text)

-- name: record_progress
SELECT job_id, run_lease
  FROM awa.record_progress(%s::smallint[], %s::bigint[], %s::integer[], %s::bigint[],
                           %s::bigint[], %s::bigint[], %s::text[])

-- name: promote_due
-- Busy lanes (a producer's open transaction) are skipped, never waited for.
SELECT awa.promote_due_skip_busy(%s)

-- name: queues_have_work
SELECT awa.queues_have_work(%s::text[])

-- name: register_runtime
INSERT INTO awa.runtime_instances (id, hostname, pid, queues, role, connection_mode)
VALUES (%s, %s, %s, %s, %s, %s)

-- name: list_runtimes
-- Every registered runtime, newest first, with whether its heartbeat is
-- fresh and whether it leads: its election session holds the leader's lock
-- (the session's application_name carries the runtime id, see
-- runtime/leadership/leader.py), or it holds the unexpired maintenance
-- lease (the election through a pooler, runtime/leadership/lease.py).
SELECT r.id, r.hostname, r.pid, r.queues, r.role, r.started_at, r.heartbeat_at,
       r.heartbeat_at > now() - make_interval(secs => %(staleness)s),
       EXISTS (SELECT 1
                 FROM pg_locks l
                 JOIN pg_stat_activity a ON a.pid = l.pid
                WHERE l.locktype = 'advisory' AND l.granted
                  AND l.database = (SELECT oid FROM pg_database
                                     WHERE datname = current_database())
                  AND ((l.classid::bigint << 32) | l.objid::bigint) = %(lock)s
                  AND a.application_name LIKE '%%' || r.id::text)
       OR EXISTS (SELECT 1 FROM awa.maintenance_lease m
                   WHERE m.holder = r.id AND m.expires_at > clock_timestamp()),
       r.connection_mode
  FROM awa.runtime_instances r
 ORDER BY r.started_at DESC, r.id

-- name: heartbeat_runtime
UPDATE awa.runtime_instances SET heartbeat_at = now() WHERE id = %s RETURNING id

-- name: unregister_runtime
DELETE FROM awa.runtime_instances WHERE id = %s

-- name: orphaned_receipts
-- Open receipts of one runtime claimed before a grace period: the runtime
-- compares them with what it runs (a claim whose response was lost leaves
-- receipts nobody runs).  The job's error history comes along: a counted
-- hand-back appends an entry to it (see closures.handed_back).
SELECT r.claim_slot, r.batch_id, r.item, r.job_id, r.run_lease, r.attempt, b.claim_nonce,
       e.errors
  FROM awa.open_receipts r
  JOIN awa.lease_claim_batches b ON b.claim_slot = r.claim_slot AND b.batch_id = r.batch_id
  LEFT JOIN awa.ready_entries e
    ON e.ready_slot = r.ready_slot AND e.queue = r.queue AND e.priority = r.priority
   AND e.shard = r.shard AND e.lane_seq = r.lane_seq
 WHERE r.runtime_id = %s AND r.claimed_at < clock_timestamp() - make_interval(secs => %s)
 ORDER BY r.batch_id, r.item
