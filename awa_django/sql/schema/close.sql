-- Closing attempts: the run_lease guard, receipts and their evidence.
--
-- A claim appends one compact row to the claim ring (lease_claim_batches)
-- listing every attempt it handed out, each with run_lease = previous + 1
-- and the claiming worker's random nonce.  An attempt in that row is a
-- receipt, named by (claim_slot, batch_id, item).  Every way an attempt
-- ends -- complete, retry, snooze, fail, cancel, hand back, rescue -- goes
-- through a close that locks the batch row, keeps only the items that have
-- no closure evidence yet and whose (job_id, run_lease, nonce) still
-- match, and writes evidence for exactly those.  One closer wins; the
-- others learn their attempt is stale and write nothing.
--
-- Why a nonce.  Claims commit with synchronous_commit off, so a server
-- crash can undo the last claims while their workers keep running.  The
-- job is claimed again with the same run_lease (and claim_batch_seq can
-- roll back too), so without the nonce the lost attempt's late completion
-- would close the attempt running now.  The claim passes its nonce through
-- the transaction-local setting awa.claim_nonce, which the column default
-- of lease_claim_batches.claim_nonce reads.
--
-- Evidence, not updates.  An all-success batch (the common case) writes one
-- receipt_completion_batches row and a closure row, and never reads the
-- queue ring; other outcomes write a narrow done_entries row that points at
-- the ready row in the same slot, a deferred_jobs row for a retry, or a
-- dead-letter row.  Reads of the claim ring carry `claim_slot = ANY (...)`
-- and the statements are planned with their actual values
-- (force_custom_plan), so partitions are pruned at plan time and only what
-- is read gets locked: a prune's ACCESS EXCLUSIVE request on some other
-- slot never queues a close.
--
-- One close serves every caller: awa.close_attempts is the worker's batched
-- close, and operator cancel and rescue close through it too (rescue reads
-- the nonces from the batches it rescues).  The outcome rows that need a
-- job body are written by awa.write_outcomes, which the lease close
-- (leases.sql) shares.  awa.record_progress takes the batch lock like a
-- close, so progress is never written after its attempt closed.
--
-- One exception to "one closer at a time per batch": awa.complete_receipt,
-- the close an atomic handler runs inside its own transaction (held until
-- that transaction commits).  It shares the batch row (FOR KEY SHARE, which
-- only FOR UPDATE conflicts with) and writes per-item evidence into
-- lease_claim_closures, whose primary key (batch_id, item, claim_slot)
-- keeps two closers of the same item apart.  So atomic closes of different
-- items of one batch never wait on each other, while every other closer
-- (FOR UPDATE) still waits for them and then sees their evidence.

-- Re-run by migration 0005_atomic_closures (awa.complete_receipt); the
-- substrate lock keeps it from interleaving with another `migrate`
-- (rings.sql takes it for 0001).
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
-- Substrate 5: awa.complete_receipt.
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 5);

-- ---------------------------------------------------------------------------
-- Closing attempts
-- ---------------------------------------------------------------------------

-- Only the receipt: is this claim item handed out and not closed?
CREATE OR REPLACE FUNCTION awa.receipt_is_open(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint, p_claim_nonce bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                    WHERE b.batch_id = p_batch_id AND b.claim_slot = p_claim_slot
                      AND b.job_ids[p_item] = p_job_id AND b.run_leases[p_item] = p_run_lease
                      AND b.claim_nonce IS NOT DISTINCT FROM p_claim_nonce)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                        WHERE x.batch_id = p_batch_id AND x.item = p_item
                          AND x.claim_slot = p_claim_slot)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                        WHERE y.batch_id = p_batch_id AND y.claim_slot = p_claim_slot
                          AND p_item = ANY (y.items))
$$;

-- An attempt is open while its receipt is, or once materialised, while its
-- lease lives (progress writes and the worker's "was I closed?" use this).
CREATE OR REPLACE FUNCTION awa.attempt_is_open(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint, p_claim_nonce bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT awa.receipt_is_open(p_claim_slot, p_batch_id, p_item, p_job_id, p_run_lease,
                               p_claim_nonce)
        OR EXISTS (SELECT 1 FROM awa.leases l
                    WHERE l.job_id = p_job_id AND l.run_lease = p_run_lease
                      AND l.claim_nonce IS NOT DISTINCT FROM p_claim_nonce)
$$;

CREATE OR REPLACE FUNCTION awa.record_progress(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_claim_nonces bigint[], p_progress text[])
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
      FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases, p_claim_nonces,
                  p_progress)
           AS i(claim_slot, batch_id, item, job_id, run_lease, claim_nonce, progress)
     WHERE awa.attempt_is_open(i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease,
                                  i.claim_nonce)
    ON CONFLICT ON CONSTRAINT attempt_state_pkey
    DO UPDATE SET progress = EXCLUDED.progress, updated_at = EXCLUDED.updated_at
    RETURNING s.job_id, s.run_lease;
END
$$;

-- Which of these attempts are no longer theirs to close: closed by someone
-- (rescue, cancel, hand-back), or never committed (a claim a crash reverted).
CREATE OR REPLACE FUNCTION awa.closed_attempts(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_claim_nonces bigint[])
RETURNS TABLE (job_id bigint, run_lease bigint, claim_nonce bigint)
LANGUAGE sql STABLE AS $$
    SELECT i.job_id, i.run_lease, i.claim_nonce
      FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases, p_claim_nonces)
           AS i(claim_slot, batch_id, item, job_id, run_lease, claim_nonce)
     WHERE NOT awa.attempt_is_open(i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease,
                                      i.claim_nonce)
$$;

-- One error-history entry written by the database (rescue, callbacks).
CREATE OR REPLACE FUNCTION awa.error_entry(
    p_history jsonb, p_attempt smallint, p_type text, p_message text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT (COALESCE(p_history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', p_attempt, 'type', p_type, 'message', p_message,
               'traceback', '', 'at', clock_timestamp())))::text
$$;

-- Where a failed attempt goes: retry while attempts remain, else DLQ or failed.
CREATE OR REPLACE FUNCTION awa.failure_target(
    p_attempt smallint, p_max_attempts smallint, p_queue text, p_dlq_default boolean,
    p_dlq_on text[], p_dlq_off text[], p_retry boolean)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_retry AND p_attempt < p_max_attempts THEN 'retryable'
                WHEN p_queue = ANY (p_dlq_on)
                  OR (p_dlq_default AND NOT p_queue = ANY (p_dlq_off)) THEN 'dlq'
                ELSE 'failed' END
$$;

-- An attempt a close won, as awa.write_outcomes takes it: the closure asked
-- for (target, due time, attempt count to store, error history, result,
-- dead-letter reason, progress) and where the attempt's job body lives (its
-- lane keys and ready slot).  A composite type, so the receipt close and
-- the lease close hand over one array rather than sixteen.
DO $$
BEGIN
    CREATE TYPE awa.won_closure AS (
        job_id bigint, run_lease bigint, target text, run_at timestamptz, attempt smallint,
        errors text, result text, reason text, progress text, queue text, priority smallint,
        shard smallint, lane_seq bigint, ready_slot smallint, claim_attempt smallint,
        claimed_at timestamptz);
EXCEPTION WHEN duplicate_object THEN
    NULL;
END
$$;

-- The rows a won closure leaves behind, for every close (receipts and
-- leases): a narrow terminal row in the ready slot for completed (leases
-- only: a receipt's completion is compact), failed and cancelled; a
-- deferred_jobs row for retryable and scheduled (run_at NULL meaning now);
-- a dead-letter row for dlq.  Each carries the job body and the progress
-- from the ready row (the queue ring keeps it while the attempt is open),
-- so the queue ring is read here, pruned to the slots named.  Returns the
-- closures whose ready row was found and written for; the caller records
-- its evidence for those only and clears their attempt_state.
CREATE OR REPLACE FUNCTION awa.write_outcomes(p_won awa.won_closure[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_ready_slots smallint[] := ARRAY(SELECT DISTINCT w.ready_slot FROM unnest(p_won) w);
BEGIN
    -- Planned with v_ready_slots as a constant: only those slots are locked.
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    RETURN QUERY
    WITH settled AS (
        -- Each closure with the job body and the progress it keeps.
        SELECT w.*, r.kind, r.args, r.kwargs, r.metadata, r.tags, r.max_attempts,
               r.ordering_key, r.created_at, r.run_at AS ready_run_at,
               COALESCE(w.errors::jsonb, r.errors) AS history,
               COALESCE(w.progress::jsonb, s.progress, r.progress) AS last_progress
          FROM unnest(p_won) w
          JOIN awa.ready_entries r
            ON r.ready_slot = w.ready_slot AND r.queue = w.queue AND r.priority = w.priority
           AND r.shard = w.shard AND r.lane_seq = w.lane_seq
           AND r.ready_slot = ANY (v_ready_slots)
          LEFT JOIN awa.attempt_state s ON s.job_id = w.job_id AND s.run_lease = w.run_lease
    ), terminal AS (
        -- A completion keeps neither history nor progress.
        INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                      queue, priority, shard, lane_seq, attempt, errors,
                                      progress, return_value, attempted_at)
        SELECT t.ready_slot, 0, t.job_id, t.run_lease, t.target, t.queue, t.priority, t.shard,
               t.lane_seq, t.claim_attempt,
               CASE WHEN t.target = 'completed' THEN NULL ELSE t.history END,
               CASE WHEN t.target = 'completed' THEN NULL ELSE t.last_progress END,
               t.result::json, t.claimed_at
          FROM settled t
         WHERE t.target IN ('completed', 'failed', 'cancelled')
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
    )
    SELECT t.job_id, t.run_lease FROM settled t;
END
$$;

-- Close a batch of receipts: the worker's batched close, and the close of
-- every other caller in the substrate (operator cancel, rescue).  Each
-- attempt has its own target:
--   completed                       -> compact: one closure-batch row per claim
--                                      batch, one completion-batch row per ready slot
--   failed / cancelled              -> explicit closure + done_entries row
--   retryable / scheduled           -> explicit closure + deferred_jobs row
--                                      (run_at = p_run_ats[i], NULL meaning now)
--   dlq                             -> explicit closure + dlq_entries row
-- (the last three through awa.write_outcomes).  Attempts are named by
-- (claim_slot, batch_id, item) and must match their (job_id, run_lease,
-- claim nonce).  Any array after the six key arrays may be NULL, meaning
-- its default for every item (target 'completed', attempt 0, ...).
-- p_attempts is the attempt count to store on a deferred row (a snooze or
-- hand-back passes the count before this attempt, so it is not counted).
-- p_errors is the whole error history as JSON text (NULL keeps the history
-- on the ready row); p_progress likewise for progress.  Returns the
-- attempts actually closed; the others were stale and nothing was written
-- for them.
CREATE OR REPLACE FUNCTION awa.close_attempts(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_claim_nonces bigint[], p_targets text[], p_outcomes text[],
    p_run_ats timestamptz[], p_attempts smallint[], p_errors text[], p_results text[],
    p_reasons text[], p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
DECLARE
    -- The claim slots named, each once: the slot predicates below are
    -- planned with this short constant (planning and every row it filters
    -- then cost nothing like a 500-element list would).
    v_slots       smallint[] := ARRAY(SELECT DISTINCT s FROM unnest(p_claim_slots) AS s);
    -- All successes (the common batch) need no job body: planned as a
    -- constant, it cuts the outcome writer (and so every read of the queue
    -- ring) out of the plan.
    v_compact     boolean := p_targets IS NULL OR 'completed' = ALL (p_targets);
    v_held_nonces bigint[];
BEGIN
    -- Planned with the actual arrays, so the slot predicates prune the rings'
    -- partitions at plan time: only what is read is locked.
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);

    -- The guard: one closer at a time per claim batch (ordered: no deadlocks),
    -- and the nonces of the batches it holds.
    SELECT array_agg(b.claim_nonce) INTO v_held_nonces
      FROM (SELECT l.claim_nonce
              FROM awa.lease_claim_batches l
             WHERE l.claim_slot = ANY (v_slots)
               AND (l.batch_id, l.claim_slot) IN (SELECT DISTINCT x.batch_id, x.claim_slot
                                                    FROM unnest(p_batch_ids, p_claim_slots)
                                                         AS x(batch_id, claim_slot))
             ORDER BY l.batch_id
               FOR UPDATE) b;

    RETURN QUERY
    WITH input AS (
        SELECT DISTINCT ON (i.batch_id, i.item, i.claim_slot)
               i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease, i.nonce,
               COALESCE(i.target, 'completed') AS target,
               COALESCE(i.outcome, i.target, 'completed') AS outcome,
               i.run_at, COALESCE(i.attempt, 0)::smallint AS attempt, i.errors, i.result,
               i.reason, i.progress
          FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases,
                      p_claim_nonces, p_targets, p_outcomes, p_run_ats, p_attempts, p_errors,
                      p_results, p_reasons, p_progress)
               AS i(claim_slot, batch_id, item, job_id, run_lease, nonce, target, outcome,
                    run_at, attempt, errors, result, reason, progress)
         -- Of two closures of one item, the one presenting a held batch's
         -- nonce (a reverted claim's twin must not hide it; won checks it).
         ORDER BY i.batch_id, i.item, i.claim_slot,
                  array_position(v_held_nonces, i.nonce) IS NULL
    ), touched AS (
        SELECT DISTINCT i.batch_id, i.claim_slot FROM input i
    ), held AS MATERIALIZED (
        -- Every item of the touched batches, each array decompressed once.
        SELECT b.claim_slot, b.batch_id, b.queue, b.claimed_at, b.claim_nonce,
               u.item::integer AS item, u.job_id, u.run_lease, u.attempt, u.priority,
               u.shard, u.lane_seq, u.ready_slot
          FROM awa.lease_claim_batches b
         CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.attempts, b.priorities,
                                   b.shards, b.lane_seqs, b.ready_slots)
               WITH ORDINALITY AS u(job_id, run_lease, attempt, priority, shard, lane_seq,
                                    ready_slot, item)
         WHERE b.claim_slot = ANY (v_slots)
           AND (b.batch_id, b.claim_slot) IN (SELECT t.batch_id, t.claim_slot FROM touched t)
    ), evidence AS MATERIALIZED (
        -- Items of the touched claim batches that are already closed, read
        -- once per batch rather than probed once per item.
        SELECT x.batch_id, x.claim_slot, x.item
          FROM touched t
          JOIN awa.lease_claim_closures x
            ON x.batch_id = t.batch_id AND x.claim_slot = t.claim_slot
         WHERE x.claim_slot = ANY (v_slots)
        UNION ALL
        SELECT y.batch_id, y.claim_slot, unnest(y.items)
          FROM touched t
          JOIN awa.lease_claim_closure_batches y
            ON y.batch_id = t.batch_id AND y.claim_slot = t.claim_slot
         WHERE y.claim_slot = ANY (v_slots)
    ), won AS (
        SELECT i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease, i.target, i.outcome,
               i.run_at, i.attempt, i.errors, i.result, i.reason, i.progress,
               h.queue, h.priority, h.shard, h.lane_seq, h.ready_slot, h.claimed_at,
               h.attempt AS claim_attempt
          FROM input i
          JOIN held h
            ON h.batch_id = i.batch_id AND h.claim_slot = i.claim_slot AND h.item = i.item
          LEFT JOIN evidence e
            ON e.batch_id = i.batch_id AND e.claim_slot = i.claim_slot AND e.item = i.item
         WHERE h.job_id = i.job_id AND h.run_lease = i.run_lease
           AND h.claim_nonce IS NOT DISTINCT FROM i.nonce
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
        -- Every other outcome: its deferred, done or DLQ row, written by the
        -- function every close shares.
        SELECT o.job_id, o.run_lease
          FROM awa.write_outcomes(ARRAY(
                   SELECT ROW(w.job_id, w.run_lease, w.target, w.run_at, w.attempt, w.errors,
                              w.result, w.reason, w.progress, w.queue, w.priority, w.shard,
                              w.lane_seq, w.ready_slot, w.claim_attempt,
                              w.claimed_at)::awa.won_closure
                     FROM won w
                    WHERE w.target <> 'completed')) o
         WHERE NOT v_compact
    ), explicit AS (
        -- Evidence only for the attempts whose next row was written: an
        -- attempt whose ready row could not be found stays open (and visible
        -- to rescue) instead of being closed with nothing to show for it.
        INSERT INTO awa.lease_claim_closures (claim_slot, batch_id, item, job_id, run_lease,
                                              outcome)
        SELECT w.claim_slot, w.batch_id, w.item, w.job_id, w.run_lease, w.outcome
          FROM won w
          JOIN settled t ON t.job_id = w.job_id AND t.run_lease = w.run_lease
    ), closed AS (
        SELECT w.job_id, w.run_lease FROM won w WHERE w.target = 'completed'
        UNION ALL
        SELECT t.job_id, t.run_lease FROM settled t
    ), forgotten AS (
        -- A closed attempt's mutable state goes with it: progress is cleared
        -- on completion and was carried into the other outcomes' rows.
        DELETE FROM awa.attempt_state s
         USING closed c
         WHERE s.job_id = c.job_id AND s.run_lease = c.run_lease
    )
    SELECT c.job_id, c.run_lease FROM closed c;
END
$$;

-- Complete one receipt inside the caller's transaction: an atomic handler's
-- close (runtime/attempts/atomic.py), held until the handler's transaction
-- commits.  The same guard as awa.close_attempts for one completed item,
-- taken so that atomic closes of different items of one claim batch do not
-- queue behind each other:
--   1. FOR KEY SHARE on the batch row, matching job_id, run_lease and nonce:
--      every other closer (completer flush, rescue, cancel, hand-back,
--      materialise, progress) takes FOR UPDATE, so it waits for this
--      transaction, and this one waits for it;
--   2. compact evidence of the item (written by such a closer before this
--      one got the row) is looked for in a later statement, whose snapshot
--      is taken once the lock is held;
--   3. the item's own evidence row, ON CONFLICT DO NOTHING: a second
--      closer of the same item (a twin of the attempt) waits on the first's
--      key until it ends, then finds the row and writes nothing.
-- Evidence is per item (lease_claim_closures, outcome 'completed') rather
-- than compact: only a unique key serialises two sharing closers.  The
-- completion itself is a one-item receipt_completion_batches row, as a
-- compact close writes it.  Returns whether this call closed the attempt.
CREATE OR REPLACE FUNCTION awa.complete_receipt(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint, p_claim_nonce bigint, p_result text)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_held record;
BEGIN
    -- Planned with the actual slot, so only that partition is locked.
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    SELECT b.queue, b.claimed_at, b.attempts[p_item] AS attempt,
           b.priorities[p_item] AS priority, b.shards[p_item] AS shard,
           b.lane_seqs[p_item] AS lane_seq, b.ready_slots[p_item] AS ready_slot
      INTO v_held
      FROM awa.lease_claim_batches b
     WHERE b.claim_slot = p_claim_slot AND b.batch_id = p_batch_id
       AND b.job_ids[p_item] = p_job_id AND b.run_leases[p_item] = p_run_lease
       AND b.claim_nonce IS NOT DISTINCT FROM p_claim_nonce
       FOR KEY SHARE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                WHERE y.batch_id = p_batch_id AND y.claim_slot = p_claim_slot
                  AND p_item = ANY (y.items)) THEN
        RETURN false;
    END IF;
    INSERT INTO awa.lease_claim_closures (claim_slot, batch_id, item, job_id, run_lease,
                                          outcome)
    VALUES (p_claim_slot, p_batch_id, p_item, p_job_id, p_run_lease, 'completed')
    ON CONFLICT DO NOTHING;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    INSERT INTO awa.receipt_completion_batches (ready_slot, queue, attempted_at, job_ids,
                                                run_leases, attempts, priorities, shards,
                                                lane_seqs, return_values)
    VALUES (v_held.ready_slot, v_held.queue, v_held.claimed_at, ARRAY[p_job_id],
            ARRAY[p_run_lease], ARRAY[v_held.attempt], ARRAY[v_held.priority],
            ARRAY[v_held.shard], ARRAY[v_held.lane_seq], ARRAY[p_result]);
    -- Progress is cleared on completion, as awa.close_attempts clears it.
    DELETE FROM awa.attempt_state s WHERE s.job_id = p_job_id AND s.run_lease = p_run_lease;
    RETURN true;
END
$$;

-- ---------------------------------------------------------------------------
-- Read surfaces
-- ---------------------------------------------------------------------------

-- Every attempt handed out by a claim, one row per item of a claim batch.
CREATE OR REPLACE VIEW awa.claim_items AS
SELECT b.claim_slot, b.batch_id, i.item::integer AS item, i.job_id, i.run_lease, i.attempt,
       i.priority, i.effective_priority, i.shard, i.lane_seq, i.ready_slot, b.queue,
       b.runtime_id, b.claimed_at, b.deadline_at
  FROM awa.lease_claim_batches b
 CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.attempts, b.priorities,
                           b.effective_priorities, b.shards, b.lane_seqs, b.ready_slots)
       WITH ORDINALITY AS i(job_id, run_lease, attempt, priority, effective_priority, shard,
                            lane_seq, ready_slot, item);

-- How many items of one claim batch have closure evidence: distinct items,
-- so evidence written twice (a single close and a batch close of the same
-- item) counts once.  Every reader that weighs a batch against its evidence
-- (what runs, the counts, the gauges, rescue) asks this; a SQL function in
-- FROM is inlined, so each plans as if it spelled the two index lookups out.
-- The per-item test (no closure row, no closure batch naming the item) stays
-- spelled out where it is used: two NOT EXISTS in a WHERE clause become
-- anti-joins, which a function call would hide behind a per-row subplan.
-- PARALLEL SAFE as its text is: the planner weighs parallel safety before it
-- inlines, so an unmarked function would keep awa.jobs from parallel plans.
CREATE OR REPLACE FUNCTION awa.claim_batch_closed(p_claim_slot smallint, p_batch_id bigint)
RETURNS TABLE (closed bigint)
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT count(DISTINCT e.item)
      FROM (SELECT unnest(y.items) AS item
              FROM awa.lease_claim_closure_batches y
             WHERE y.batch_id = p_batch_id AND y.claim_slot = p_claim_slot
            UNION ALL
            SELECT x.item
              FROM awa.lease_claim_closures x
             WHERE x.batch_id = p_batch_id AND x.claim_slot = p_claim_slot) e
$$;

-- Attempts with no closure evidence yet: what is running right now.  A
-- batch all of whose items have evidence is skipped after one count of its
-- distinct evidence items; only the others are tested item by item.
CREATE OR REPLACE VIEW awa.open_receipts AS
SELECT b.claim_slot, b.batch_id, i.item::integer AS item, i.job_id, i.run_lease, i.attempt,
       i.priority, i.effective_priority, i.shard, i.lane_seq, i.ready_slot, b.queue,
       b.runtime_id, b.claimed_at, b.deadline_at
  FROM awa.lease_claim_batches b
 CROSS JOIN LATERAL awa.claim_batch_closed(b.claim_slot, b.batch_id) k
 CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.attempts, b.priorities,
                           b.effective_priorities, b.shards, b.lane_seqs, b.ready_slots)
       WITH ORDINALITY AS i(job_id, run_lease, attempt, priority, effective_priority, shard,
                            lane_seq, ready_slot, item)
 WHERE k.closed < cardinality(b.job_ids)
   AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                    WHERE x.batch_id = b.batch_id AND x.item = i.item
                      AND x.claim_slot = b.claim_slot)
   AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                    WHERE y.batch_id = b.batch_id AND y.claim_slot = b.claim_slot
                      AND i.item = ANY (y.items));
