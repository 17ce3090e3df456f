-- awa_django substrate, version 24: rescue looks at whole claim batches first.
--
-- awa.rescue_attempts joined awa.open_receipts to ready_entries in one
-- statement.  The view skips a batch whose every item has closure evidence
-- after one count per batch, but only if the planner applies that count
-- before it unnests the batch's items; with the claim ring grown large and
-- its partitions' statistics stale (a ring that was not pruned for a
-- while, every batch owned by a stopped runtime: burst workers run one
-- after another), the planner unnested every item of every batch first and
-- tested each against the closure rows in a nested loop: one rescue of a
-- 3.4-million-item claim ring with nothing to rescue ran for more than ten
-- minutes.  Meanwhile its reads kept every prune's ACCESS EXCLUSIVE lock
-- timing out, so the rings could not shrink and the next rescue was as
-- slow: the rings jammed.
--
-- Version 2 of the candidate search picks the batches first, in a
-- materialized step: owned by a runtime whose heartbeat is stale (or past
-- their deadline), and not fully closed by the per-batch count; only the
-- items of those batches are unnested and tested one by one.  The same
-- attempts are rescued, in the same order; with nothing to rescue the cost
-- is one count per batch of a stopped runtime (0.6 s over that ring).

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 24);

CREATE OR REPLACE FUNCTION awa.rescue_attempts(
    p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[],
    p_dlq_off text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_rescued integer;
BEGIN
    WITH batches AS MATERIALIZED (
        SELECT b.claim_slot, b.batch_id, b.queue, b.job_ids, b.run_leases, b.attempts,
               b.priorities, b.shards, b.lane_seqs, b.ready_slots
          FROM awa.lease_claim_batches b
         WHERE CASE p_reason
                 WHEN 'deadline_expired' THEN b.deadline_at < clock_timestamp()
                 ELSE NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                   WHERE i.id = b.runtime_id
                                     AND i.heartbeat_at > clock_timestamp() - p_staleness)
               END
           AND (SELECT count(DISTINCT e.item)
                  FROM (SELECT unnest(y.items) AS item
                          FROM awa.lease_claim_closure_batches y
                         WHERE y.batch_id = b.batch_id AND y.claim_slot = b.claim_slot
                        UNION ALL
                        SELECT x.item
                          FROM awa.lease_claim_closures x
                         WHERE x.batch_id = b.batch_id AND x.claim_slot = b.claim_slot) e)
               < cardinality(b.job_ids)
    ), candidates AS MATERIALIZED (
        SELECT b.claim_slot, b.batch_id, i.item::integer AS item, i.job_id, i.run_lease,
               i.attempt, b.queue, i.priority, i.shard, i.lane_seq, i.ready_slot
          FROM batches b
         CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.attempts, b.priorities,
                                   b.shards, b.lane_seqs, b.ready_slots)
               WITH ORDINALITY AS i(job_id, run_lease, attempt, priority, shard, lane_seq,
                                    ready_slot, item)
         WHERE NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                            WHERE x.batch_id = b.batch_id AND x.item = i.item
                              AND x.claim_slot = b.claim_slot)
           AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                            WHERE y.batch_id = b.batch_id AND y.claim_slot = b.claim_slot
                              AND i.item = ANY (y.items))
         LIMIT p_limit
    ), routed AS (
        SELECT c.claim_slot, c.batch_id, c.item, c.job_id, c.run_lease, c.attempt,
               CASE WHEN c.attempt < r.max_attempts THEN 'retryable'
                    WHEN c.queue = ANY (p_dlq_on)
                      OR (p_dlq_default AND NOT c.queue = ANY (p_dlq_off)) THEN 'dlq'
                    ELSE 'failed' END AS target,
               (COALESCE(r.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                   'attempt', c.attempt,
                   'type', 'awa_django.' || p_reason,
                   'message', CASE p_reason
                       WHEN 'deadline_expired' THEN 'attempt passed its deadline'
                       ELSE 'worker stopped heartbeating' END,
                   'traceback', '',
                   'at', clock_timestamp())))::text AS history
          FROM candidates c
          JOIN awa.ready_entries r
            ON r.ready_slot = c.ready_slot AND r.queue = c.queue AND r.priority = c.priority
           AND r.shard = c.shard AND r.lane_seq = c.lane_seq
    ), ordered AS (
        SELECT * FROM routed ORDER BY batch_id, item
    )
    SELECT count(*) INTO v_rescued
      FROM awa.close_attempts(
          ARRAY(SELECT claim_slot FROM ordered), ARRAY(SELECT batch_id FROM ordered),
          ARRAY(SELECT item FROM ordered), ARRAY(SELECT job_id FROM ordered),
          ARRAY(SELECT run_lease FROM ordered), ARRAY(SELECT target FROM ordered),
          ARRAY(SELECT p_reason FROM ordered), ARRAY(SELECT clock_timestamp() FROM ordered),
          ARRAY(SELECT attempt FROM ordered), ARRAY(SELECT history FROM ordered),
          ARRAY(SELECT NULL::text FROM ordered), ARRAY(SELECT p_reason FROM ordered),
          ARRAY(SELECT NULL::text FROM ordered));
    RETURN v_rescued;
END
$$;
