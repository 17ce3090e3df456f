-- Queue control and the queue list (see schema/console.sql).

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

-- name: queue_paused
-- A row when the queue is paused.
SELECT paused_at FROM awa.queue_meta WHERE queue = %(queue)s AND paused_at IS NOT NULL

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
 WHERE sampled_at >= %(since)s
   AND (%(queues)s::text[] IS NULL OR queue = ANY (%(queues)s::text[]))
 ORDER BY sampled_at, queue

-- name: queue_gauges
-- (queue, available, scheduled, running, lag seconds, paused) of every queue
-- with lanes, a control row or live jobs: the telemetry gauges, read every
-- few seconds, so nothing here walks the ready ring.  A lane's committed
-- sequences are gap-free, so it holds next_seq - claim_seq jobs beyond its
-- claim cursor, less the tombstones there (a primary-key range); its oldest
-- one is in the first segment past the cursor (one probe of
-- ready_segments_lane_idx, as the claim makes).  Scheduled counts the
-- deferred jobs (scheduled and waiting to retry); running counts open
-- receipts and running leases (a sequential wait is waiting_external), as
-- awa.queue_state_counts does.
WITH lanes AS MATERIALIZED (  -- each lane probed once
    SELECT h.queue,
           e.next_seq - h.claim_seq - (
               SELECT count(*) FROM awa.ready_tombstones t
                WHERE t.queue = h.queue AND t.priority = h.priority AND t.shard = h.shard
                  AND t.lane_seq >= h.claim_seq) AS available,
           (SELECT g.run_at FROM awa.ready_segments g
             WHERE g.queue = h.queue AND g.priority = h.priority AND g.shard = h.shard
               AND g.end_seq > h.claim_seq
             ORDER BY g.end_seq
             LIMIT 1) AS head_at
      FROM awa.queue_claim_heads h
      JOIN awa.queue_enqueue_heads e
        ON e.queue = h.queue AND e.priority = h.priority AND e.shard = h.shard
     WHERE e.next_seq > h.claim_seq
), ready AS (
    SELECT l.queue, sum(l.available) AS n,
           min(l.head_at) FILTER (WHERE l.available > 0) AS head_at
      FROM lanes l
     GROUP BY l.queue
), deferred AS (
    SELECT d.queue, count(*) AS n FROM awa.deferred_jobs d GROUP BY d.queue
), receipts AS (
    SELECT b.queue,
           sum(cardinality(b.job_ids)
               - (SELECT k.closed FROM awa.claim_batch_closed(b.claim_slot, b.batch_id) k)) AS n
      FROM awa.lease_claim_batches b
     GROUP BY b.queue
), leased AS (
    SELECT l.queue, count(*) AS n
      FROM awa.leases l
     WHERE awa.lease_state(l.state, l.callback_id, l.waiting_for) = 'running'
     GROUP BY l.queue
), names AS (
    SELECT queue FROM awa.queue_enqueue_heads
    UNION SELECT queue FROM awa.queue_meta
    UNION SELECT queue FROM deferred
    UNION SELECT queue FROM receipts
    UNION SELECT queue FROM leased
)
SELECT q.queue,
       GREATEST(COALESCE(r.n, 0), 0)::bigint,
       COALESCE(d.n, 0)::bigint,
       (COALESCE(c.n, 0) + COALESCE(x.n, 0))::bigint,
       COALESCE(GREATEST(extract(epoch FROM clock_timestamp() - r.head_at), 0), 0)::float8,
       m.paused_at IS NOT NULL
  FROM names q
  LEFT JOIN ready r ON r.queue = q.queue
  LEFT JOIN deferred d ON d.queue = q.queue
  LEFT JOIN receipts c ON c.queue = q.queue
  LEFT JOIN leased x ON x.queue = q.queue
  LEFT JOIN awa.queue_meta m ON m.queue = q.queue
 ORDER BY q.queue

-- name: available_depth
-- (queue, available, paused) of each named physical queue: the producers'
-- backpressure check (awa_django.backpressure), run before every guarded
-- batch and on every poll while one waits, so it reads the lane counters
-- only -- each lane's next_seq - claim_seq, less the tombstones beyond its
-- claim cursor (a primary-key range), exact as in queue_gauges -- and never
-- the ready ring or its segments.  A queue without lanes has 0.
SELECT q.queue,
       GREATEST(COALESCE((
           SELECT sum(e.next_seq - h.claim_seq - (
                      SELECT count(*) FROM awa.ready_tombstones t
                       WHERE t.queue = h.queue AND t.priority = h.priority AND t.shard = h.shard
                         AND t.lane_seq >= h.claim_seq))
             FROM awa.queue_claim_heads h
             JOIN awa.queue_enqueue_heads e
               ON e.queue = h.queue AND e.priority = h.priority AND e.shard = h.shard
            WHERE h.queue = q.queue AND e.next_seq > h.claim_seq), 0), 0)::bigint,
       EXISTS (SELECT FROM awa.queue_meta m WHERE m.queue = q.queue AND m.paused_at IS NOT NULL)
  FROM unnest(%(queues)s::text[]) AS q(queue)
