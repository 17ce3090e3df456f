-- Batch operations (see schema/batch_ops.sql).  JSON columns as text.

-- name: batch_op_count
-- How many jobs the operation would change now.
SELECT awa.batch_op_count(%s, %s::jsonb, %s::jsonb, NULL)

-- name: submit_batch_operation
SELECT id, op_kind, filter::text, spec::text, state, total, done, created_at, started_at,
       finished_at, error
  FROM awa.submit_batch_operation(%s, %s::jsonb, %s::jsonb)

-- name: get_batch_operation
SELECT id, op_kind, filter::text, spec::text, state, total, done, created_at, started_at,
       finished_at, error
  FROM awa.batch_operations
 WHERE id = %s

-- name: list_batch_operations
-- Newest first.
SELECT id, op_kind, filter::text, spec::text, state, total, done, created_at, started_at,
       finished_at, error
  FROM awa.batch_operations
 ORDER BY id DESC
 LIMIT %s

-- name: cancel_batch_operation
-- Returns a row when this call cancelled it (waits for a chunk in flight).
UPDATE awa.batch_operations
   SET state = 'cancelled', finished_at = now()
 WHERE id = %s AND state IN ('pending', 'running')
RETURNING id

-- name: active_batch_operations
-- What the leader applies, oldest first.
SELECT id FROM awa.batch_operations WHERE state IN ('pending', 'running') ORDER BY id

-- name: batch_op_step
SELECT op_state, op_total, op_done, changed, busy FROM awa.batch_op_step(%s, %s, %s)

-- name: fail_batch_operation
UPDATE awa.batch_operations
   SET state = 'failed', error = %s, finished_at = now()
 WHERE id = %s AND state IN ('pending', 'running')
RETURNING id

-- name: cleanup_batch_operations
-- Finished operations older than the retention, oldest first, a bounded batch.
DELETE FROM awa.batch_operations
 WHERE id IN (SELECT b.id FROM awa.batch_operations b
               WHERE b.state IN ('completed', 'cancelled', 'failed')
                 AND b.finished_at < now() - make_interval(secs => %s)
               ORDER BY b.finished_at
               LIMIT %s)
RETURNING id
