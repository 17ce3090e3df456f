-- Worker runtime statements, run on the worker's own psycopg connections
-- (autocommit: each statement is its own short transaction).

-- name: claim_ready
SELECT job_id, run_lease, kind, priority, effective_priority, attempt, max_attempts,
       args, kwargs, metadata, tags, errors, progress, claim_slot, batch_id, item, deadline_at
  FROM awa.claim_ready_v3(%s, %s, %s, make_interval(secs => %s), make_interval(secs => %s),
                          %s)

-- name: close_attempts
SELECT job_id, run_lease
  FROM awa.close_attempts_v3(%s::smallint[], %s::bigint[], %s::integer[], %s::bigint[],
                          %s::bigint[], %s::bigint[], %s::text[], %s::text[],
                          %s::timestamptz[], %s::smallint[], %s::text[], %s::text[],
                          %s::text[], %s::text[])

-- name: record_progress
SELECT job_id, run_lease
  FROM awa.record_progress_v3(%s::smallint[], %s::bigint[], %s::integer[], %s::bigint[],
                           %s::bigint[], %s::bigint[], %s::text[])

-- name: promote_due
-- Busy lanes (a producer's open transaction) are skipped, never waited for.
SELECT awa.promote_due_skip_busy(%s)

-- name: queues_have_work
SELECT awa.queues_have_work(%s::text[])

-- name: register_runtime
INSERT INTO awa.runtime_instances (id, hostname, pid, queues) VALUES (%s, %s, %s, %s)

-- name: heartbeat_runtime
UPDATE awa.runtime_instances SET heartbeat_at = now() WHERE id = %s

-- name: unregister_runtime
DELETE FROM awa.runtime_instances WHERE id = %s

-- name: orphaned_receipts
-- Open receipts of one runtime claimed before a grace period: the runtime
-- compares them with what it runs (a claim whose response was lost leaves
-- receipts nobody runs).
SELECT r.claim_slot, r.batch_id, r.item, r.job_id, r.run_lease, r.attempt, b.claim_nonce
  FROM awa.open_receipts r
  JOIN awa.lease_claim_batches b ON b.claim_slot = r.claim_slot AND b.batch_id = r.batch_id
 WHERE r.runtime_id = %s AND r.claimed_at < clock_timestamp() - make_interval(secs => %s)
 ORDER BY r.batch_id, r.item
