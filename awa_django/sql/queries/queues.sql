-- Queue control and the queue list (see v015_console.sql).

-- name: ensure_queue_meta
INSERT INTO awa.queue_meta (queue) VALUES (%(queue)s) ON CONFLICT (queue) DO NOTHING

-- name: pause_queue
-- Returns a row when this call paused it (none: it already was).
UPDATE awa.queue_meta SET paused_at = clock_timestamp(), updated_at = now()
 WHERE queue = %(queue)s AND paused_at IS NULL
RETURNING queue

-- name: resume_queue
-- Returns a row when the queue was paused.
UPDATE awa.queue_meta SET paused_at = NULL, updated_at = now()
 WHERE queue = %(queue)s AND paused_at IS NOT NULL
RETURNING queue

-- name: drain_queue
SELECT awa.drain_queue(%(queue)s, %(reason)s)

-- name: queue_meta
SELECT queue, paused_at, enqueue_shards FROM awa.queue_meta

-- name: set_enqueue_shards
-- Returns the previous count.
WITH old AS (SELECT m.enqueue_shards FROM awa.queue_meta m WHERE m.queue = %(queue)s)
INSERT INTO awa.queue_meta AS m (queue, enqueue_shards) VALUES (%(queue)s, %(shards)s)
ON CONFLICT (queue) DO UPDATE SET enqueue_shards = EXCLUDED.enqueue_shards, updated_at = now()
RETURNING COALESCE((SELECT enqueue_shards FROM old), 1)

-- name: known_queues
-- Every queue the database knows of: lanes, control rows, descriptors.
SELECT queue FROM awa.queue_enqueue_heads
 UNION SELECT queue FROM awa.queue_meta
 UNION SELECT name FROM awa.queue_descriptors
 UNION SELECT queue FROM awa.queue_terminal_rollups

-- name: sample_queues
SELECT awa.sample_queues(make_interval(secs => %s))

-- name: queue_samples
-- Samples since a moment, oldest first (one queue, or every queue when NULL).
SELECT sampled_at, queue, counts::text
  FROM awa.queue_samples
 WHERE sampled_at >= %(since)s AND (%(queue)s::text IS NULL OR queue = %(queue)s::text)
 ORDER BY sampled_at, queue
