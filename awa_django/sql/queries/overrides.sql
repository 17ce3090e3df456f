-- Live per-queue overrides (see schema/queues.sql).

-- name: set_overrides
-- Upserts every (key, value) pair given for one queue in one statement.
INSERT INTO awa.queue_overrides AS o (queue, key, value)
SELECT %(queue)s, k, v::jsonb
  FROM unnest(%(keys)s::text[], %(values)s::text[]) AS t (k, v)
ON CONFLICT (queue, key) DO UPDATE SET value = EXCLUDED.value, updated_at = now()

-- name: read_overrides
-- Every override, or those of the given queues; (queue, key, value as JSON text, updated_at).
SELECT queue, key, value::text, updated_at
  FROM awa.queue_overrides
 WHERE %(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[])
 ORDER BY queue, key

-- name: clear_overrides
-- Deletes the given keys of one queue (every key when NULL); returns the keys deleted.
DELETE FROM awa.queue_overrides
 WHERE queue = %(queue)s AND (%(keys)s::text[] IS NULL OR key = ANY (%(keys)s::text[]))
RETURNING key
