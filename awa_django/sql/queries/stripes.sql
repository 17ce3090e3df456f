-- Queue stripes (awa_django/domain/stripes.py).

-- name: stripes_with_jobs
-- Which of these physical queues hold a job still to run: a lane with
-- committed rows beyond its claim cursor, or a deferred job.
SELECT q.name
  FROM unnest(%s::text[]) AS q(name)
 WHERE EXISTS (SELECT 1
                 FROM awa.queue_claim_heads h
                 JOIN awa.ready_segments g
                   ON g.queue = h.queue AND g.priority = h.priority AND g.shard = h.shard
                  AND g.end_seq > h.claim_seq
                WHERE h.queue = q.name)
    OR EXISTS (SELECT 1 FROM awa.deferred_jobs d WHERE d.queue = q.name)
 ORDER BY q.name
