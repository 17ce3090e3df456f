-- Undo version 21: awa.jobs, awa.job_window and awa.queues_have_work get
-- their previous bodies back (they read the tables dropped here), then what
-- this version added goes.  Jobs held for a concurrency slot at that moment are put
-- back into their lanes first, so a downgrade loses none of them.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DO $$
BEGIN
    IF to_regclass('awa.concurrency_waiting') IS NOT NULL THEN
        UPDATE awa.concurrency_slots SET job_id = NULL, batch_id = NULL;
        FOR v_round IN 1 .. 1000 LOOP
            EXIT WHEN NOT EXISTS (SELECT 1 FROM awa.concurrency_waiting);
            PERFORM awa.release_concurrency(ARRAY(SELECT DISTINCT w.queue
                                                    FROM awa.concurrency_waiting w), 100000);
        END LOOP;
        IF EXISTS (SELECT 1 FROM awa.concurrency_waiting) THEN
            RAISE EXCEPTION 'jobs held for a concurrency slot sit in lanes a producer holds; '
                            'retry the downgrade' USING ERRCODE = 'lock_not_available';
        END IF;
    END IF;
END
$$;
CREATE OR REPLACE VIEW awa.jobs AS
SELECT r.job_id AS id, r.kind, r.queue, 'available'::text AS state, r.priority,
       r.attempt, r.max_attempts, r.run_lease, r.args, r.kwargs, r.metadata, r.tags,
       r.errors, r.progress, NULL::json AS return_value, r.created_at, r.run_at,
       NULL::timestamptz AS attempted_at, NULL::timestamptz AS finalized_at
  FROM awa.ready_entries r
  JOIN awa.queue_claim_heads h
    ON h.queue = r.queue AND h.priority = r.priority AND h.shard = r.shard
 WHERE r.lane_seq >= h.claim_seq
   AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                    WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                      AND t.priority = r.priority AND t.shard = r.shard
                      AND t.lane_seq = r.lane_seq)
UNION ALL
SELECT c.job_id, r.kind, c.queue, 'running'::text, c.effective_priority,
       c.attempt, r.max_attempts, c.run_lease, r.args, r.kwargs, r.metadata,
       r.tags, r.errors, COALESCE(s.progress, r.progress), NULL::json, r.created_at,
       r.run_at, c.claimed_at, NULL::timestamptz
  FROM awa.open_receipts c
  JOIN awa.ready_entries r
    ON r.ready_slot = c.ready_slot AND r.queue = c.queue AND r.priority = c.priority
   AND r.shard = c.shard AND r.lane_seq = c.lane_seq
  LEFT JOIN awa.attempt_state s ON s.job_id = c.job_id AND s.run_lease = c.run_lease
UNION ALL
SELECT l.job_id, r.kind, l.queue, l.state, l.effective_priority, l.attempt, r.max_attempts,
       l.run_lease, r.args, r.kwargs, r.metadata, r.tags, r.errors,
       COALESCE(s.progress, r.progress), NULL::json, r.created_at, r.run_at, l.claimed_at,
       NULL::timestamptz
  FROM awa.leases l
  JOIN awa.ready_entries r
    ON r.ready_slot = l.ready_slot AND r.queue = l.queue AND r.priority = l.priority
   AND r.shard = l.shard AND r.lane_seq = l.lane_seq
  LEFT JOIN awa.attempt_state s ON s.job_id = l.job_id AND s.run_lease = l.run_lease
UNION ALL
SELECT d.job_id, d.kind, d.queue, d.state, d.priority, d.attempt, d.max_attempts,
       d.run_lease, d.args, d.kwargs, d.metadata, d.tags, d.errors, d.progress, NULL::json,
       d.created_at, d.run_at, d.attempted_at, NULL::timestamptz
  FROM awa.deferred_jobs d
UNION ALL
SELECT t.id, t.kind, t.queue, t.state, t.priority, t.attempt, t.max_attempts, t.run_lease,
       t.args, t.kwargs, t.metadata, t.tags, t.errors, t.progress, t.return_value,
       t.created_at, t.run_at, t.attempted_at, t.finalized_at
  FROM awa.terminal_jobs t
UNION ALL
SELECT q.job_id, q.kind, q.queue, 'dlq'::text, q.priority, q.attempt, q.max_attempts,
       q.run_lease, q.args, q.kwargs, q.metadata, q.tags, q.errors, q.progress, NULL::json,
       q.created_at, q.run_at, q.attempted_at, q.moved_at
  FROM awa.dlq_entries q;

CREATE OR REPLACE FUNCTION awa.queues_have_work(p_queues text[]) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (
        SELECT 1 FROM awa.queue_claim_heads h
          JOIN awa.ready_segments g
            ON g.queue = h.queue AND g.priority = h.priority AND g.shard = h.shard
           AND g.end_seq > h.claim_seq
         WHERE h.queue = ANY (p_queues)
    ) OR EXISTS (
        SELECT 1 FROM awa.open_receipts c WHERE c.queue = ANY (p_queues)
    ) OR EXISTS (
        SELECT 1 FROM awa.deferred_jobs d
         WHERE d.queue = ANY (p_queues) AND d.run_at <= clock_timestamp()
    )
$$;

CREATE OR REPLACE FUNCTION awa.job_window(p_lo bigint, p_hi bigint)
RETURNS TABLE (id bigint, kind text, queue text, state text, priority smallint,
               attempt smallint, max_attempts smallint, run_lease bigint, args json,
               kwargs json, metadata jsonb, tags text[], errors jsonb, progress jsonb,
               return_value json, created_at timestamptz, run_at timestamptz,
               attempted_at timestamptz, finalized_at timestamptz)
LANGUAGE sql STABLE AS $$
    SELECT r.job_id, r.kind, r.queue, 'available'::text, r.priority,
           r.attempt, r.max_attempts, r.run_lease, r.args, r.kwargs, r.metadata, r.tags,
           r.errors, r.progress, NULL::json, r.created_at, r.run_at,
           NULL::timestamptz, NULL::timestamptz
      FROM awa.ready_entries r
      JOIN awa.queue_claim_heads h
        ON h.queue = r.queue AND h.priority = r.priority AND h.shard = r.shard
     WHERE r.job_id BETWEEN p_lo AND p_hi
       AND r.lane_seq >= h.claim_seq
       AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                        WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                          AND t.priority = r.priority AND t.shard = r.shard
                          AND t.lane_seq = r.lane_seq)
    UNION ALL
    SELECT c.job_id, r.kind, c.queue, 'running'::text, c.effective_priority,
           c.attempt, r.max_attempts, c.run_lease, r.args, r.kwargs, r.metadata,
           r.tags, r.errors, COALESCE(s.progress, r.progress), NULL::json, r.created_at,
           r.run_at, c.claimed_at, NULL::timestamptz
      FROM (SELECT b.claim_slot, b.batch_id, i.item::integer AS item, i.job_id, i.run_lease,
                   i.attempt, i.priority, i.effective_priority, i.shard, i.lane_seq,
                   i.ready_slot, b.queue, b.claimed_at
              FROM awa.lease_claim_batches b
             CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.attempts, b.priorities,
                                       b.effective_priorities, b.shards, b.lane_seqs,
                                       b.ready_slots)
                   WITH ORDINALITY AS i(job_id, run_lease, attempt, priority,
                                        effective_priority, shard, lane_seq, ready_slot, item)
             WHERE awa.max_id(b.job_ids) >= p_lo AND i.job_id BETWEEN p_lo AND p_hi) c
      JOIN awa.ready_entries r
        ON r.ready_slot = c.ready_slot AND r.queue = c.queue AND r.priority = c.priority
       AND r.shard = c.shard AND r.lane_seq = c.lane_seq
      LEFT JOIN awa.attempt_state s ON s.job_id = c.job_id AND s.run_lease = c.run_lease
     WHERE NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                        WHERE x.batch_id = c.batch_id AND x.item = c.item
                          AND x.claim_slot = c.claim_slot)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                        WHERE y.batch_id = c.batch_id AND y.claim_slot = c.claim_slot
                          AND c.item = ANY (y.items))
    UNION ALL
    SELECT l.job_id, r.kind, l.queue, l.state, l.effective_priority, l.attempt, r.max_attempts,
           l.run_lease, r.args, r.kwargs, r.metadata, r.tags, r.errors,
           COALESCE(s.progress, r.progress), NULL::json, r.created_at, r.run_at, l.claimed_at,
           NULL::timestamptz
      FROM awa.leases l
      JOIN awa.ready_entries r
        ON r.ready_slot = l.ready_slot AND r.queue = l.queue AND r.priority = l.priority
       AND r.shard = l.shard AND r.lane_seq = l.lane_seq
      LEFT JOIN awa.attempt_state s ON s.job_id = l.job_id AND s.run_lease = l.run_lease
     WHERE l.job_id BETWEEN p_lo AND p_hi
    UNION ALL
    SELECT d.job_id, d.kind, d.queue, d.state, d.priority, d.attempt, d.max_attempts,
           d.run_lease, d.args, d.kwargs, d.metadata, d.tags, d.errors, d.progress, NULL::json,
           d.created_at, d.run_at, d.attempted_at, NULL::timestamptz
      FROM awa.deferred_jobs d
     WHERE d.job_id BETWEEN p_lo AND p_hi
    UNION ALL
    SELECT d.job_id, COALESCE(d.kind, r.kind), d.queue, d.state,
           COALESCE(d.priority, r.priority), d.attempt, COALESCE(d.max_attempts, r.max_attempts),
           d.run_lease, COALESCE(d.args, r.args), COALESCE(d.kwargs, r.kwargs),
           COALESCE(d.metadata, r.metadata), COALESCE(d.tags, r.tags),
           COALESCE(d.errors, r.errors), d.progress, d.return_value,
           COALESCE(d.created_at, r.created_at), COALESCE(d.run_at, r.run_at), d.attempted_at,
           d.finalized_at
      FROM awa.done_entries d
      LEFT JOIN awa.ready_entries r
        ON r.ready_slot = d.ready_slot AND r.queue = d.queue AND r.priority = d.priority
       AND r.shard = d.shard AND r.lane_seq = d.lane_seq
     WHERE d.job_id BETWEEN p_lo AND p_hi
       AND NOT EXISTS (SELECT 1 FROM awa.done_supersessions x
                        WHERE x.job_id = d.job_id AND x.run_lease = d.run_lease
                          AND x.finalized_at = d.finalized_at)
    UNION ALL
    SELECT c.job_id, r.kind, b.queue, 'completed'::text, c.priority, c.attempt, r.max_attempts,
           c.run_lease, r.args, r.kwargs, r.metadata, r.tags, r.errors, NULL::jsonb,
           c.return_value::json, r.created_at, r.run_at, b.attempted_at, b.finalized_at
      FROM awa.receipt_completion_batches b
     CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.attempts, b.priorities, b.shards,
                               b.lane_seqs, b.return_values)
           AS c(job_id, run_lease, attempt, priority, shard, lane_seq, return_value)
      LEFT JOIN awa.ready_entries r
        ON r.ready_slot = b.ready_slot AND r.queue = b.queue AND r.priority = c.priority
       AND r.shard = c.shard AND r.lane_seq = c.lane_seq
     WHERE awa.max_id(b.job_ids) >= p_lo AND c.job_id BETWEEN p_lo AND p_hi
    UNION ALL
    SELECT q.job_id, q.kind, q.queue, 'dlq'::text, q.priority, q.attempt, q.max_attempts,
           q.run_lease, q.args, q.kwargs, q.metadata, q.tags, q.errors, q.progress, NULL::json,
           q.created_at, q.run_at, q.attempted_at, q.moved_at
      FROM awa.dlq_entries q
     WHERE q.job_id BETWEEN p_lo AND p_hi
$$;

DROP FUNCTION IF EXISTS awa.claim_ready_v6(text, text[], integer, uuid, interval, interval,
                                           bigint);
DROP FUNCTION IF EXISTS awa.claim_ready_v5(text, integer, uuid, interval, interval);
DROP FUNCTION IF EXISTS awa.cancel_job_v2(bigint, text);
DROP FUNCTION IF EXISTS awa.release_concurrency(text[], integer);
DROP FUNCTION IF EXISTS awa.concurrency_slot_busy(awa.concurrency_slots, bigint);
DROP FUNCTION IF EXISTS awa.concurrency_limit(jsonb);
DROP TABLE IF EXISTS awa.concurrency_waiting;
ALTER TABLE awa.queue_meta DROP COLUMN IF EXISTS holds_keyed;
DROP TABLE IF EXISTS awa.concurrency_slots;
UPDATE awa.substrate_info SET schema_version = 20;
