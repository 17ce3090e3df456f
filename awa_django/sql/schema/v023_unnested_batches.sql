-- awa_django substrate, version 23: claim batches read once per batch, not once per item.
--
-- A claim batch keeps its attempts as parallel arrays (job_ids, run_leases,
-- priorities, ... : item i is position i).  A 512-item batch row is larger
-- than the TOAST threshold, so PostgreSQL stores those arrays compressed,
-- and every subscript `b.job_ids[i.item]` decompresses the whole array
-- again.  awa.close_attempts_v2 read seven subscripts per closed item: a
-- 500-job close decompressed 3,500 arrays of 500 elements, about 10 ms of
-- server time per flush, 20 us per job -- a third of the database's share
-- of a drain.
--
-- awa.close_attempts_v4 takes the arguments of version 3 and returns the
-- same rows.  It unnests each touched batch once (one decompression per
-- array and batch) and joins the closed items to that, checks the claim
-- nonce in that join (version 3 made a pass of its own for it), and
-- otherwise writes exactly what versions 2 and 3 write.  Versions 2 and 3
-- stay for workers of the previous release and for the single-attempt
-- callers (cancel, rescue), where one subscript per item costs nothing.
--
-- Those arrays, and the job payloads of the hot rings, are compressed with
-- lz4 from now on where the server has it: pglz spent about 1.2 ms
-- compressing each 500-job completion row (and as much for each claim
-- row), lz4 a seventh of that, and it decompresses faster too.  Values
-- already written keep their compression; partitions created later
-- inherit the setting from their parent.  A server built without lz4
-- keeps pglz.
--
-- awa.open_receipts (what is running: rescue, the --burst check, orphan
-- checks) tested every item of every live claim batch against each of
-- its batch's compact closure rows with `item = ANY (items)`,
-- decompressing that array once per item: about 60 ms over the forty
-- batches of a 20,000-job drain.  It now first counts, once per batch, the
-- distinct items with closure evidence, skips the batches whose every item
-- has some (the usual state of all but the newest batches), and applies the
-- item-level test to the rest only.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 23);

DO $$
DECLARE
    v_column record;
BEGIN
    FOR v_column IN
        SELECT rel.oid::regclass AS rel, a.attname
          FROM pg_class parent
          JOIN pg_namespace n ON n.oid = parent.relnamespace AND n.nspname = 'awa'
          JOIN LATERAL (SELECT parent.oid
                        UNION ALL
                        SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = parent.oid)
               AS rel(oid) ON true
          JOIN pg_attribute a ON a.attrelid = rel.oid AND NOT a.attisdropped
         WHERE (parent.relname, a.attname) IN (
                   ('lease_claim_batches', 'job_ids'), ('lease_claim_batches', 'run_leases'),
                   ('lease_claim_batches', 'attempts'), ('lease_claim_batches', 'priorities'),
                   ('lease_claim_batches', 'effective_priorities'),
                   ('lease_claim_batches', 'shards'), ('lease_claim_batches', 'lane_seqs'),
                   ('lease_claim_batches', 'ready_slots'),
                   ('receipt_completion_batches', 'job_ids'),
                   ('receipt_completion_batches', 'run_leases'),
                   ('receipt_completion_batches', 'attempts'),
                   ('receipt_completion_batches', 'priorities'),
                   ('receipt_completion_batches', 'shards'),
                   ('receipt_completion_batches', 'lane_seqs'),
                   ('receipt_completion_batches', 'return_values'),
                   ('lease_claim_closure_batches', 'items'),
                   ('ready_entries', 'args'), ('ready_entries', 'kwargs'),
                   ('ready_entries', 'metadata'), ('ready_entries', 'errors'),
                   ('ready_entries', 'progress'),
                   ('done_entries', 'args'), ('done_entries', 'kwargs'),
                   ('done_entries', 'metadata'), ('done_entries', 'errors'),
                   ('done_entries', 'progress'), ('done_entries', 'return_value'))
         ORDER BY parent.relname, rel.oid, a.attnum
    LOOP
        EXECUTE format('ALTER TABLE %s ALTER COLUMN %I SET COMPRESSION lz4',
                       v_column.rel, v_column.attname);
    END LOOP;
EXCEPTION WHEN feature_not_supported THEN
    -- Built without lz4: every column keeps pglz (the block is undone as a whole).
    NULL;
END
$$;

CREATE OR REPLACE FUNCTION awa.close_attempts_v4(
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
    v_ready_slots smallint[];
    v_held_nonces bigint[];
BEGIN
    -- Planned with the actual arrays, so the slot predicates prune the rings'
    -- partitions at plan time (version 2): only what is read is locked.
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

    IF p_targets IS NULL OR 'completed' = ALL (p_targets) THEN
        -- All successes (the common batch): compact evidence and completion
        -- rows only; no job body is needed, so the queue ring is not read.
        RETURN QUERY
        WITH input AS (
            SELECT DISTINCT ON (i.batch_id, i.item, i.claim_slot)
                   i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease, i.nonce, i.result
              FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases,
                          p_claim_nonces, p_results)
                   AS i(claim_slot, batch_id, item, job_id, run_lease, nonce, result)
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
            SELECT i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease, i.result,
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
    SELECT array_agg(DISTINCT u.ready_slot) INTO v_ready_slots
      FROM awa.lease_claim_batches b
     CROSS JOIN LATERAL unnest(b.ready_slots) WITH ORDINALITY AS u(ready_slot, item)
      JOIN unnest(p_claim_slots, p_batch_ids, p_items) AS x(claim_slot, batch_id, item)
        ON x.batch_id = b.batch_id AND x.claim_slot = b.claim_slot AND x.item = u.item
     WHERE b.claim_slot = ANY (v_slots);

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
         ORDER BY i.batch_id, i.item, i.claim_slot,
                  array_position(v_held_nonces, i.nonce) IS NULL
    ), touched AS (
        SELECT DISTINCT i.batch_id, i.claim_slot FROM input i
    ), held AS MATERIALIZED (
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

-- Attempts with no closure evidence yet: what is running right now.  A
-- batch all of whose items have evidence is skipped after one count of its
-- distinct evidence items; only the others are tested item by item.
CREATE OR REPLACE VIEW awa.open_receipts AS
SELECT b.claim_slot, b.batch_id, i.item::integer AS item, i.job_id, i.run_lease, i.attempt,
       i.priority, i.effective_priority, i.shard, i.lane_seq, i.ready_slot, b.queue,
       b.runtime_id, b.claimed_at, b.deadline_at
  FROM awa.lease_claim_batches b
 CROSS JOIN LATERAL (
       SELECT count(DISTINCT e.item) AS closed
         FROM (SELECT unnest(y.items) AS item
                 FROM awa.lease_claim_closure_batches y
                WHERE y.batch_id = b.batch_id AND y.claim_slot = b.claim_slot
               UNION ALL
               SELECT x.item
                 FROM awa.lease_claim_closures x
                WHERE x.batch_id = b.batch_id AND x.claim_slot = b.claim_slot) e) k
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
