-- awa_django substrate, version 7: closes that lock only what they touch.
--
-- awa.close_attempts (version 2) locked ~130 relations per call: every
-- claim-ring partition (its joins have no slot predicate, and generic plans
-- lock every partition) and all of ready_entries through the join that
-- reads job bodies for non-success outcomes, even when every item of the
-- batch completed.  A prune's ACCESS EXCLUSIVE request on any of those,
-- queued behind one in-flight transaction, then stalled every close.
--
-- awa.close_attempts_v2 takes the same arguments and returns the same rows:
--
-- * an all-success batch (p_targets NULL or all 'completed') writes compact
--   evidence and completion rows and never reads the queue ring;
-- * claim-ring reads carry `claim_slot = ANY (p_claim_slots)`, the body
--   join carries the ready slots of the attempts, and the statements are
--   planned with their actual values, so partitions are pruned at plan time
--   and only those read are locked.
--
-- awa.record_progress_v2 takes the claim-batch lock before writing, like a
-- close, so progress can never be written after its attempt closed.  The
-- closes delete the attempt's attempt_state row.
--
-- awa.close_attempts and awa.record_progress stay for workers of the
-- previous release.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 7);

CREATE OR REPLACE FUNCTION awa.close_attempts_v2(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_targets text[], p_outcomes text[], p_run_ats timestamptz[],
    p_attempts smallint[], p_errors text[], p_results text[], p_reasons text[],
    p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_ready_slots smallint[];
BEGIN
    -- Planned with the actual arrays: the slot predicates below prune the
    -- claim ring (and, for failures, the queue ring) at plan time, so only
    -- the partitions this close writes or reads are locked.
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);

    -- The guard: one closer at a time per claim batch (ordered: no deadlocks).
    PERFORM 1
       FROM awa.lease_claim_batches b
      WHERE b.claim_slot = ANY (p_claim_slots)
        AND (b.batch_id, b.claim_slot) IN (SELECT DISTINCT x.batch_id, x.claim_slot
                                             FROM unnest(p_batch_ids, p_claim_slots)
                                                  AS x(batch_id, claim_slot))
      ORDER BY b.batch_id
        FOR UPDATE;

    IF p_targets IS NULL OR 'completed' = ALL (p_targets) THEN
        -- All successes (the common batch): compact evidence and completion
        -- rows only; no job body is needed, so the queue ring is not read.
        RETURN QUERY
        WITH input AS (
            SELECT DISTINCT ON (i.batch_id, i.item, i.claim_slot)
                   i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease, i.result
              FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases,
                          p_results)
                   AS i(claim_slot, batch_id, item, job_id, run_lease, result)
        ), touched AS (
            SELECT DISTINCT i.batch_id, i.claim_slot FROM input i
        ), evidence AS (
            SELECT x.batch_id, x.claim_slot, x.item
              FROM touched t
              JOIN awa.lease_claim_closures x
                ON x.batch_id = t.batch_id AND x.claim_slot = t.claim_slot
             WHERE x.claim_slot = ANY (p_claim_slots)
            UNION ALL
            SELECT y.batch_id, y.claim_slot, unnest(y.items)
              FROM touched t
              JOIN awa.lease_claim_closure_batches y
                ON y.batch_id = t.batch_id AND y.claim_slot = t.claim_slot
             WHERE y.claim_slot = ANY (p_claim_slots)
        ), won AS (
            SELECT i.*, b.queue, b.priorities[i.item] AS priority, b.shards[i.item] AS shard,
                   b.lane_seqs[i.item] AS lane_seq, b.ready_slots[i.item] AS ready_slot,
                   b.claimed_at, b.attempts[i.item] AS claim_attempt
              FROM input i
              JOIN awa.lease_claim_batches b
                ON b.batch_id = i.batch_id AND b.claim_slot = i.claim_slot
              LEFT JOIN evidence e
                ON e.batch_id = i.batch_id AND e.claim_slot = i.claim_slot AND e.item = i.item
             WHERE b.claim_slot = ANY (p_claim_slots)
               AND b.job_ids[i.item] = i.job_id AND b.run_leases[i.item] = i.run_lease
               AND e.item IS NULL
        ), compact AS (
            INSERT INTO awa.lease_claim_closure_batches (claim_slot, batch_id, items)
            SELECT w.claim_slot, w.batch_id, array_agg(w.item ORDER BY w.item)
              FROM won w
             GROUP BY w.claim_slot, w.batch_id
        ), completions AS (
            INSERT INTO awa.receipt_completion_batches (ready_slot, queue, attempted_at, job_ids,
                                                        run_leases, attempts, priorities, shards,
                                                        lane_seqs, return_values)
            SELECT w.ready_slot, w.queue, w.claimed_at, array_agg(w.job_id ORDER BY w.item),
                   array_agg(w.run_lease ORDER BY w.item),
                   array_agg(w.claim_attempt ORDER BY w.item),
                   array_agg(w.priority ORDER BY w.item), array_agg(w.shard ORDER BY w.item),
                   array_agg(w.lane_seq ORDER BY w.item), array_agg(w.result ORDER BY w.item)
              FROM won w
             GROUP BY w.ready_slot, w.queue, w.batch_id, w.claimed_at
        ), forgotten AS (
            -- A closed attempt's mutable state goes with it (its progress
            -- is cleared on completion).
            DELETE FROM awa.attempt_state s
             USING won w
             WHERE s.job_id = w.job_id AND s.run_lease = w.run_lease
        )
        SELECT w.job_id, w.run_lease FROM won w;
        RETURN;
    END IF;

    -- Mixed outcomes: the queue ring slots holding these attempts' ready rows
    -- (their bodies are carried into deferred, done and DLQ rows).
    SELECT array_agg(DISTINCT b.ready_slots[x.item]) INTO v_ready_slots
      FROM unnest(p_claim_slots, p_batch_ids, p_items) AS x(claim_slot, batch_id, item)
      JOIN awa.lease_claim_batches b ON b.batch_id = x.batch_id AND b.claim_slot = x.claim_slot
     WHERE b.claim_slot = ANY (p_claim_slots);

    RETURN QUERY
    WITH input AS (
        SELECT DISTINCT ON (i.batch_id, i.item, i.claim_slot)
               i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease,
               COALESCE(i.target, 'completed') AS target,
               COALESCE(i.outcome, i.target, 'completed') AS outcome,
               i.run_at, COALESCE(i.attempt, 0)::smallint AS attempt, i.errors, i.result,
               i.reason, i.progress
          FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases, p_targets,
                      p_outcomes, p_run_ats, p_attempts, p_errors, p_results, p_reasons,
                      p_progress)
               AS i(claim_slot, batch_id, item, job_id, run_lease, target, outcome, run_at,
                    attempt, errors, result, reason, progress)
    ), touched AS (
        SELECT DISTINCT i.batch_id, i.claim_slot FROM input i
    ), evidence AS (
        -- Items of the touched claim batches that are already closed, read
        -- once per batch rather than probed once per item.
        SELECT x.batch_id, x.claim_slot, x.item
          FROM touched t
          JOIN awa.lease_claim_closures x
            ON x.batch_id = t.batch_id AND x.claim_slot = t.claim_slot
         WHERE x.claim_slot = ANY (p_claim_slots)
        UNION ALL
        SELECT y.batch_id, y.claim_slot, unnest(y.items)
          FROM touched t
          JOIN awa.lease_claim_closure_batches y
            ON y.batch_id = t.batch_id AND y.claim_slot = t.claim_slot
         WHERE y.claim_slot = ANY (p_claim_slots)
    ), won AS (
        SELECT i.*, b.queue, b.priorities[i.item] AS priority, b.shards[i.item] AS shard,
               b.lane_seqs[i.item] AS lane_seq, b.ready_slots[i.item] AS ready_slot,
               b.claimed_at, b.attempts[i.item] AS claim_attempt
          FROM input i
          JOIN awa.lease_claim_batches b
            ON b.batch_id = i.batch_id AND b.claim_slot = i.claim_slot
          LEFT JOIN evidence e
            ON e.batch_id = i.batch_id AND e.claim_slot = i.claim_slot AND e.item = i.item
         WHERE b.claim_slot = ANY (p_claim_slots)
           AND b.job_ids[i.item] = i.job_id AND b.run_leases[i.item] = i.run_lease
           AND e.item IS NULL
    ), compact AS (
        INSERT INTO awa.lease_claim_closure_batches (claim_slot, batch_id, items)
        SELECT w.claim_slot, w.batch_id, array_agg(w.item ORDER BY w.item)
          FROM won w
         WHERE w.target = 'completed'
         GROUP BY w.claim_slot, w.batch_id
    ), completions AS (
        INSERT INTO awa.receipt_completion_batches (ready_slot, queue, attempted_at, job_ids,
                                                    run_leases, attempts, priorities, shards,
                                                    lane_seqs, return_values)
        SELECT w.ready_slot, w.queue, w.claimed_at, array_agg(w.job_id ORDER BY w.item),
               array_agg(w.run_lease ORDER BY w.item),
               array_agg(w.claim_attempt ORDER BY w.item),
               array_agg(w.priority ORDER BY w.item), array_agg(w.shard ORDER BY w.item),
               array_agg(w.lane_seq ORDER BY w.item), array_agg(w.result ORDER BY w.item)
          FROM won w
         WHERE w.target = 'completed'
         GROUP BY w.ready_slot, w.queue, w.batch_id, w.claimed_at
    ), settled AS (
        -- Non-success outcomes, with the job body and the progress they keep.
        SELECT w.*, r.kind, r.args, r.kwargs, r.metadata, r.tags, r.max_attempts,
               r.ordering_key, r.created_at, r.run_at AS ready_run_at,
               COALESCE(w.errors::jsonb, r.errors) AS history,
               COALESCE(w.progress::jsonb, s.progress, r.progress) AS last_progress
          FROM won w
          JOIN awa.ready_entries r
            ON r.ready_slot = w.ready_slot AND r.queue = w.queue AND r.priority = w.priority
           AND r.shard = w.shard AND r.lane_seq = w.lane_seq
           AND r.ready_slot = ANY (v_ready_slots)
          LEFT JOIN awa.attempt_state s ON s.job_id = w.job_id AND s.run_lease = w.run_lease
         WHERE w.target <> 'completed'
    ), explicit AS (
        -- Evidence only for the attempts whose next row is written below: an
        -- attempt whose ready row could not be found stays open (and visible
        -- to rescue) instead of being closed with nothing to show for it.
        INSERT INTO awa.lease_claim_closures (claim_slot, batch_id, item, job_id, run_lease,
                                              outcome)
        SELECT t.claim_slot, t.batch_id, t.item, t.job_id, t.run_lease, t.outcome
          FROM settled t
    ), terminal AS (
        INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                      queue, priority, shard, lane_seq, attempt, errors,
                                      progress, return_value, attempted_at)
        SELECT t.ready_slot, 0, t.job_id, t.run_lease, t.target, t.queue, t.priority, t.shard,
               t.lane_seq, t.claim_attempt, t.errors::jsonb, t.last_progress, t.result::json,
               t.claimed_at
          FROM settled t
         WHERE t.target IN ('failed', 'cancelled')
    ), deferred AS (
        INSERT INTO awa.deferred_jobs (job_id, state, queue, priority, kind, args, kwargs,
                                       metadata, tags, attempt, max_attempts, run_lease,
                                       ordering_key, errors, progress, created_at, run_at,
                                       attempted_at)
        SELECT t.job_id, t.target, t.queue, t.priority, t.kind, t.args, t.kwargs, t.metadata,
               t.tags, t.attempt, t.max_attempts, t.run_lease, t.ordering_key, t.history,
               t.last_progress, t.created_at, COALESCE(t.run_at, clock_timestamp()),
               t.claimed_at
          FROM settled t
         WHERE t.target IN ('retryable', 'scheduled')
    ), dead AS (
        INSERT INTO awa.dlq_entries (job_id, queue, priority, kind, args, kwargs, metadata,
                                     tags, attempt, max_attempts, run_lease, ordering_key,
                                     errors, progress, reason, created_at, run_at,
                                     attempted_at)
        SELECT t.job_id, t.queue, t.priority, t.kind, t.args, t.kwargs, t.metadata, t.tags,
               t.claim_attempt, t.max_attempts, t.run_lease, t.ordering_key, t.history,
               t.last_progress, COALESCE(t.reason, 'failed'), t.created_at, t.ready_run_at,
               t.claimed_at
          FROM settled t
         WHERE t.target = 'dlq'
    ), closed AS (
        SELECT w.job_id, w.run_lease FROM won w WHERE w.target = 'completed'
        UNION ALL
        SELECT t.job_id, t.run_lease FROM settled t
    ), forgotten AS (
        -- Progress was carried into the deferred / done / DLQ row above.
        DELETE FROM awa.attempt_state s
         USING closed c
         WHERE s.job_id = c.job_id AND s.run_lease = c.run_lease
    )
    SELECT c.job_id, c.run_lease FROM closed c;
END
$$;

-- Record progress of live attempts (one statement for many) under the same
-- claim-batch lock as close_attempts_v2, so a progress write can never land
-- after its attempt closed.  Only attempts whose receipt is still open are
-- written; returns the ones written.
CREATE OR REPLACE FUNCTION awa.record_progress_v2(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    PERFORM 1
       FROM awa.lease_claim_batches b
      WHERE b.claim_slot = ANY (p_claim_slots)
        AND (b.batch_id, b.claim_slot) IN (SELECT DISTINCT x.batch_id, x.claim_slot
                                             FROM unnest(p_batch_ids, p_claim_slots)
                                                  AS x(batch_id, claim_slot))
      ORDER BY b.batch_id
        FOR UPDATE;
    RETURN QUERY
    INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, updated_at)
    SELECT i.job_id, i.run_lease, i.progress::jsonb, now()
      FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases, p_progress)
           AS i(claim_slot, batch_id, item, job_id, run_lease, progress)
     WHERE awa.attempt_is_open(i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease)
    ON CONFLICT ON CONSTRAINT attempt_state_pkey
    DO UPDATE SET progress = EXCLUDED.progress, updated_at = EXCLUDED.updated_at
    RETURNING s.job_id, s.run_lease;
END
$$;
