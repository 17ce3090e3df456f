-- Leases, callbacks and cancellation (see schema/leases.sql).

-- name: materialize_lease
SELECT awa.materialize_lease(%s, %s, %s, %s, %s, %s, %s, %s, make_interval(secs => %s))

-- name: park_lease
SELECT awa.park_lease(%s, %s, %s, %s)

-- name: close_leases
SELECT job_id, run_lease
  FROM awa.close_leases(%s::bigint[], %s::bigint[], %s::bigint[], %s::text[], %s::text[],
                        %s::timestamptz[], %s::smallint[], %s::text[], %s::text[], %s::text[],
                        %s::text[])

-- name: heartbeat_leases
SELECT awa.heartbeat_leases(%s, %s::bigint[], %s::bigint[])

-- name: callback_result
-- The payload a resume handed to this callback of a sequential wait.
SELECT (s.callback_result -> 'payload')::text
  FROM awa.attempt_state s
 WHERE s.job_id = %s AND s.run_lease = %s AND s.callback_result ->> 'callback_id' = %s

-- name: mark_callback_wait
-- Enter (true) or leave (false) a sequential wait; the payload if resumed.
SELECT awa.mark_callback_wait(%s, %s, %s, %s)

-- name: resolve_callback
SELECT awa.resolve_callback(%s, %s, %s, %s, %s, %s::text[], %s::text[])

-- name: cancel_job
-- Held jobs (waiting for a concurrency slot) too, see schema/concurrency.sql.
SELECT awa.cancel_job(%s, %s)

-- name: lease_callback
-- The callback a live attempt of this job waits for, if any.
SELECT l.callback_id FROM awa.leases l WHERE l.job_id = %s AND l.callback_id IS NOT NULL

-- name: retry_job
SELECT awa.retry_job(%s, %s)

-- name: edit_and_retry
-- New args/kwargs as JSON text (NULL: keep); see schema/0006_edit_and_retry.sql.
SELECT e.outcome, e.old_args::text, e.old_kwargs::text
  FROM awa.edit_and_retry(%s, %s::json, %s::json, %s) e

-- name: callback_job
-- The job whose live attempt waits for this callback, if any.
SELECT l.job_id FROM awa.leases l WHERE l.callback_id = %s
