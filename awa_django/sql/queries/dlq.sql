-- Dead-letter queue operations (see schema/dlq.sql).  JSON columns as text.

-- name: dlq_list
SELECT job_id, kind, queue, priority, args::text, kwargs::text, metadata::text, tags, attempt,
       max_attempts, errors::text, progress::text, reason, created_at, run_at, attempted_at,
       moved_at
  FROM awa.dlq_entries
 WHERE (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]))
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
 ORDER BY moved_at DESC, job_id DESC
 LIMIT %(limit)s

-- name: dlq_retry
-- Ready now.
SELECT awa.dlq_retry(%s::bigint[], %s, %s::smallint)

-- name: dlq_retry_at
-- Scheduled for a run_at (ready now when it is not in the future).
SELECT awa.dlq_retry_at(%s::bigint[], %s, %s::smallint, %s::timestamptz)

-- name: dlq_purge
SELECT awa.dlq_purge(%s::bigint[])

-- name: dlq_select
SELECT awa.dlq_select(%s, %s, %s, %s)

-- name: move_failed_to_dlq
SELECT awa.move_failed_to_dlq(%s, %s)

-- name: dlq_count
SELECT count(*)
  FROM awa.dlq_entries
 WHERE (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]))
   AND (%(kind)s::text IS NULL OR kind = %(kind)s::text)
   AND (%(moved_before)s::timestamptz IS NULL OR moved_at < %(moved_before)s::timestamptz)
