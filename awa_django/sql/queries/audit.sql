-- The audit log (see schema/0002_audit_log.sql).  JSON columns as text.

-- name: audit_record
INSERT INTO awa.audit_log (actor, action, target, job_ids, queue, count, outcome, detail)
VALUES (%s, %s, %s, %s::bigint[], %s, %s, %s, %s::jsonb)
RETURNING id

-- name: audit_list
-- Newest first; each filter is an index lookup (job_ids GIN, queue btree).
SELECT id, at, actor, action, target, job_ids, queue, count, outcome, detail::text
  FROM awa.audit_log
 WHERE (%(job_id)s::bigint IS NULL OR job_ids @> ARRAY[%(job_id)s::bigint])
   AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
   AND (%(actor)s::text IS NULL OR actor = %(actor)s::text)
 ORDER BY id DESC
 LIMIT %(limit)s

-- name: audit_cleanup
-- Rows older than the retention, oldest first, a bounded batch.
DELETE FROM awa.audit_log
 WHERE id IN (SELECT a.id FROM awa.audit_log a
               WHERE a.at < now() - make_interval(secs => %s)
               ORDER BY a.at
               LIMIT %s)
RETURNING id
