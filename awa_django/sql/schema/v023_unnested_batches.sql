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
--
-- awa.claim_ready_v7 is version 5 planning its two lane probes once: they
-- read every ready_segments partition whatever their parameters, and
-- their custom plans cost about 0.3 ms each per call (with two probes per
-- claim, most of a one-job claim's server time).  The statements that
-- prune ring partitions by slot keep their custom plans, so a claim locks
-- what it locked before.  awa.claim_ready_v8 is version 6 over version 7.
--
-- awa.reserve_ready_run places a COPY batch whose jobs all go to one lane
-- (one queue and priority, a queue with one enqueue shard, due now: what
-- enqueue_many is mostly given) in one step: one lane reservation, one
-- segment, the job ids as one array.  The general awa.reserve_ready_batch_v2
-- ranked every job with window functions and returned a row per job, about
-- 5 us per job on the server.  ready_entries.created_at and run_at default
-- to now(), so that batch's COPY need not carry them on every row.
--
-- awa.prune_ring_v4 is version 2 with the slot's children locked and
-- truncated in two steps: first every child but the root (for the queue
-- ring: ready_entries, ready_tombstones, done_entries and the completion
-- rows), then the root (ready_segments).  Every claim reads every
-- ready_segments partition to find the lanes with work, so a claim waited
-- for the whole prune -- about 8 ms a second at the default rotation, the
-- slowest percent of pickups.  Now it waits for the root's TRUNCATE and the
-- commit only.  The proof is unchanged: every writer of a slot appends to
-- its root with the rest, so with the other children locked (in-flight
-- writers waited out, new ones kept out) the root cannot change, and its
-- stamp is checked again under its own lock.  awa.prune_ring_v5 is version
-- 3 (the horizon check) over version 4.
--
-- awa.rescue_v3 is version 2 after a look at the batch and lease rows for
-- anything that could be rescued at all (a claim batch past its deadline,
-- or owned by a runtime whose heartbeat is stale; a lease in the state the
-- reason rescues): the item-level statement is planned and run only then.
-- A new leader runs every rescue on its first tick; each cost about 50 ms
-- of server time (half of it planning) with nothing to rescue.
--
-- awa.queue_slot_busy, the queue ring's prune gate, asked awa.open_receipts
-- whether any open receipt points into the slot: a walk over every item of
-- every claim batch of the claim ring, about 11 ms (and 2.5 ms planning)
-- on each prune, once a second.  It now looks only at the batches whose
-- ready slots include the slot, and at their items in it (the same test);
-- usually there is none, the batches that claimed from the oldest slot
-- having left the claim ring long before.

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

-- Version 5 with its lane probes planned once (see the header).
CREATE OR REPLACE FUNCTION awa.claim_ready_v7(
    p_queue text, p_max integer, p_runtime uuid, p_deadline interval, p_aging interval)
RETURNS TABLE (job_id bigint, run_lease bigint, kind text, priority smallint,
               effective_priority smallint, attempt smallint, max_attempts smallint,
               args text, kwargs text, metadata text, tags text[], errors text, progress text,
               claim_slot smallint, batch_id bigint, item integer,
               deadline_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_now        timestamptz := clock_timestamp();
    v_aging      numeric := extract(epoch FROM p_aging);
    v_deadline   timestamptz;
    v_claim_slot smallint;
    v_batch      bigint;
    v_nonce      bigint;
    v_lane       record;
    v_left       integer := p_max;
    v_visited    integer[] := '{}';
    v_upto       bigint;
    v_slots      smallint[];
    v_cut        boolean;
    v_read       integer;
    v_keyed      boolean;
    v_keep       integer[];
    v_held       integer := 0;
    v_hold_cap   integer := GREATEST(100, 10 * p_max);
    v_held_here  integer;
    v_pick       integer;
    h_pos        integer[];
    f_keys       text[];
    f_slots      integer[];
    u_keys       text[];
    u_slots      integer[];
    u_items      integer[];
    u_ids        bigint[];
    u_leases     bigint[];
    l_limits     integer[];
    l_ids        bigint[];
    l_leases     bigint[];
    l_attempts   smallint[];
    l_seqs       bigint[];
    l_slots      smallint[];
    l_kinds      text[];
    l_max        smallint[];
    l_args       text[];
    l_kwargs     text[];
    l_meta       text[];
    l_tags       text[];
    l_errors     text[];
    l_progress   text[];
    l_keys       text[];
    a_ids        bigint[] := '{}';
    a_leases     bigint[] := '{}';
    a_attempts   smallint[] := '{}';
    a_prios      smallint[] := '{}';
    a_effective  smallint[] := '{}';
    a_shards     smallint[] := '{}';
    a_seqs       bigint[] := '{}';
    a_slots      smallint[] := '{}';
    a_kinds      text[] := '{}';
    a_max        smallint[] := '{}';
    a_args       text[] := '{}';
    a_kwargs     text[] := '{}';
    a_meta       text[] := '{}';
    a_tags       text[] := '{}';
    a_errors     text[] := '{}';
    a_progress   text[] := '{}';
BEGIN
    IF p_max <= 0 OR EXISTS (SELECT 1 FROM awa.queue_meta m
                              WHERE m.queue = p_queue AND m.paused_at IS NOT NULL) THEN
        RETURN;
    END IF;
    IF p_deadline > interval '0' THEN
        v_deadline := v_now + p_deadline;
    END IF;
    -- As in version 2: a lost claim is claimed again, so no WAL flush wait.
    PERFORM set_config('synchronous_commit', 'off', true);

    LOOP
        -- The best lane with work beyond its cursor (version 2).  This
        -- statement and the next read every partition of ready_segments
        -- whatever their parameters, so a plan made once serves them: a
        -- custom plan per call cost about 0.3 ms of planning each.
        PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
        SELECT h.queue, h.priority, h.shard, h.claim_seq,
               GREATEST(1, h.priority - CASE
                   WHEN v_aging > 0 THEN floor(extract(epoch FROM v_now - w.run_at) / v_aging)
                   ELSE 0 END)::smallint AS effective_priority
          INTO v_lane
          FROM awa.queue_claim_heads h
          CROSS JOIN LATERAL (
              SELECT g.run_at FROM awa.ready_segments g
               WHERE g.queue = h.queue AND g.priority = h.priority AND g.shard = h.shard
                 AND g.end_seq > h.claim_seq
               ORDER BY g.end_seq
               LIMIT 1) w
         WHERE h.queue = p_queue
           AND NOT ((h.priority::integer << 16) | h.shard::integer) = ANY (v_visited)
         ORDER BY 5, w.run_at, h.shard
         LIMIT 1
           FOR UPDATE OF h SKIP LOCKED;
        EXIT WHEN NOT FOUND;

        SELECT max(s.end_seq) FILTER (WHERE s.alike),
               array_agg(DISTINCT s.ready_slot) FILTER (WHERE s.alike),
               COALESCE(bool_or(NOT s.alike), false)
          INTO v_upto, v_slots, v_cut
          FROM (SELECT g.end_seq, g.ready_slot,
                       bool_and(GREATEST(1, v_lane.priority - CASE
                                    WHEN v_aging > 0
                                    THEN floor(extract(epoch FROM v_now - g.run_at) / v_aging)
                                    ELSE 0 END)::smallint = v_lane.effective_priority)
                           OVER (ORDER BY g.end_seq) AS alike
                  FROM (SELECT x.end_seq, x.ready_slot, x.run_at FROM awa.ready_segments x
                         WHERE x.queue = v_lane.queue AND x.priority = v_lane.priority
                           AND x.shard = v_lane.shard AND x.end_seq > v_lane.claim_seq
                         ORDER BY x.end_seq
                         LIMIT v_left) g) s;
        IF v_upto IS NULL THEN
            v_visited := v_visited || ((v_lane.priority::integer << 16) | v_lane.shard::integer);
            CONTINUE;
        END IF;
        -- From here on, statements planned with the actual slots: only the
        -- ring partitions they read are locked.
        PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
        WITH candidates AS (
            SELECT r.job_id, r.run_lease, r.attempt, r.lane_seq, r.ready_slot, r.kind,
                   r.max_attempts, r.args::text AS args, r.kwargs::text AS kwargs,
                   r.metadata::text AS metadata, r.tags::text AS tags, r.errors::text AS errors,
                   r.progress::text AS progress, r.metadata ->> 'awa:concurrency_key' AS ckey,
                   EXISTS (SELECT 1 FROM awa.ready_tombstones t
                            WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                              AND t.priority = r.priority AND t.shard = r.shard
                              AND t.lane_seq = r.lane_seq AND t.ready_slot = ANY (v_slots)) AS spent
              FROM awa.ready_entries r
             WHERE r.queue = v_lane.queue AND r.priority = v_lane.priority
               AND r.shard = v_lane.shard AND r.lane_seq >= v_lane.claim_seq
               AND r.lane_seq < v_upto AND r.ready_slot = ANY (v_slots)
             ORDER BY r.lane_seq
             LIMIT v_left
        ), advanced AS (
            UPDATE awa.queue_claim_heads h
               SET claim_seq = (SELECT max(c.lane_seq) + 1 FROM candidates c)
             WHERE h.queue = v_lane.queue AND h.priority = v_lane.priority
               AND h.shard = v_lane.shard AND EXISTS (SELECT 1 FROM candidates)
        )
        SELECT count(*)::integer,
               COALESCE(array_agg(c.job_id ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent), '{}'),
               COALESCE(array_agg(c.run_lease + 1 ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent), '{}'),
               COALESCE(array_agg((c.attempt + 1)::smallint ORDER BY c.lane_seq)
                        FILTER (WHERE NOT c.spent), '{}'),
               COALESCE(array_agg(c.lane_seq ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent), '{}'),
               COALESCE(array_agg(c.ready_slot ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent), '{}'),
               array_agg(c.kind ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               array_agg(c.max_attempts ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               array_agg(c.args ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               array_agg(c.kwargs ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               array_agg(c.metadata ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               array_agg(c.tags ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               array_agg(c.errors ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               array_agg(c.progress ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               array_agg(c.ckey ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent),
               COALESCE(bool_or(c.ckey IS NOT NULL) FILTER (WHERE NOT c.spent), false)
          INTO v_read, l_ids, l_leases, l_attempts, l_seqs, l_slots, l_kinds, l_max, l_args,
               l_kwargs, l_meta, l_tags, l_errors, l_progress, l_keys, v_keyed
          FROM candidates c;

        v_held_here := 0;
        IF v_keyed THEN
            -- The claim key of this claim's batch, known before it is written.
            IF v_batch IS NULL THEN
                -- The slot statements' estimates (a subplan per ring
                -- partition) would trigger JIT compilation, which costs
                -- far more than the statements themselves.
                PERFORM set_config('jit', 'off', true);
                v_batch := nextval('awa.claim_batch_seq');
                SELECT r.slot INTO v_claim_slot
                  FROM awa.claim_ring_rotations r ORDER BY r.generation DESC LIMIT 1;
                v_nonce := NULLIF(current_setting('awa.claim_nonce', true), '')::bigint;
            END IF;
            -- Each keyed candidate's limit; the slot rows its key lacks.
            SELECT array_agg(CASE WHEN k.key IS NOT NULL
                                  THEN awa.concurrency_limit(k.meta::jsonb) END ORDER BY k.n)
              INTO l_limits
              FROM unnest(l_keys, l_meta) WITH ORDINALITY AS k(key, meta, n);
            INSERT INTO awa.concurrency_slots (key, slot)
            SELECT DISTINCT k.key, g.slot
              FROM unnest(l_keys, l_limits) AS k(key, lim)
             CROSS JOIN LATERAL generate_series(0, k.lim - 1) AS g(slot)
             WHERE k.key IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM awa.concurrency_slots s
                                WHERE s.key = k.key AND s.slot = g.slot)
            ON CONFLICT DO NOTHING;
            -- The free slots of those keys, locked; a slot another claim is
            -- taking (or looking at) is skipped, never waited for.
            SELECT COALESCE(array_agg(f.key ORDER BY f.key, f.slot), '{}'),
                   COALESCE(array_agg(f.slot ORDER BY f.key, f.slot), '{}')
              INTO f_keys, f_slots
              FROM (SELECT s.key, s.slot
                      FROM awa.concurrency_slots s
                      JOIN (SELECT k.key, max(k.lim) AS lim
                              FROM unnest(l_keys, l_limits) AS k(key, lim)
                             WHERE k.key IS NOT NULL GROUP BY k.key) k
                        ON s.key = k.key AND s.slot < k.lim
                     WHERE NOT (s.job_id IS NOT NULL AND (s.batch_id IS NOT DISTINCT FROM v_batch OR (
                            EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                                     WHERE b.batch_id = s.batch_id AND b.claim_slot = s.claim_slot)
                            AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                                             WHERE x.batch_id = s.batch_id AND x.item = s.item
                                               AND x.claim_slot = s.claim_slot)
                            AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                                             WHERE y.batch_id = s.batch_id AND y.claim_slot = s.claim_slot
                                               AND s.item = ANY (y.items)))
                            OR EXISTS (SELECT 1 FROM awa.leases l
                                        WHERE l.job_id = s.job_id AND l.run_lease = s.run_lease)))
                       FOR UPDATE OF s SKIP LOCKED) f;
            -- In lane order: a candidate takes its key's lowest free slot
            -- under its own limit, or is held.
            v_keep := '{}';
            h_pos := '{}';
            u_keys := '{}';
            u_slots := '{}';
            u_items := '{}';
            u_ids := '{}';
            u_leases := '{}';
            FOR i IN 1 .. cardinality(l_ids) LOOP
                IF l_keys[i] IS NULL THEN
                    v_keep := v_keep || i;
                    CONTINUE;
                END IF;
                v_pick := array_position(f_keys, l_keys[i]);
                IF v_pick IS NOT NULL AND f_slots[v_pick] < l_limits[i] THEN
                    f_keys[v_pick] := NULL;
                    v_keep := v_keep || i;
                    u_keys := u_keys || l_keys[i];
                    u_slots := u_slots || f_slots[v_pick];
                    u_items := u_items || (cardinality(a_ids) + cardinality(v_keep));
                    u_ids := u_ids || l_ids[i];
                    u_leases := u_leases || l_leases[i];
                ELSE
                    h_pos := h_pos || i;
                END IF;
            END LOOP;
            IF cardinality(u_keys) > 0 THEN
                UPDATE awa.concurrency_slots s
                   SET claim_slot = v_claim_slot, batch_id = v_batch, item = u.item,
                       job_id = u.job_id, run_lease = u.run_lease, claim_nonce = v_nonce,
                       taken_at = v_now
                  FROM unnest(u_keys, u_slots, u_items, u_ids, u_leases)
                       AS u(key, slot, item, job_id, run_lease)
                 WHERE s.key = u.key AND s.slot = u.slot;
            END IF;
            IF cardinality(h_pos) > 0 THEN
                -- The held jobs, body and all, in lane order; then the lane's
                -- arrays keep only the candidates handed out (one pass each).
                INSERT INTO awa.concurrency_waiting (key, limit_n, queue, priority, shard, job_id,
                                                     kind, args, kwargs, metadata, tags, attempt,
                                                     max_attempts, run_lease, ordering_key,
                                                     errors, progress, created_at, run_at)
                SELECT k.key, k.lim, r.queue, r.priority, r.shard, r.job_id, r.kind, r.args,
                       r.kwargs, r.metadata, r.tags, r.attempt, r.max_attempts, r.run_lease,
                       r.ordering_key, r.errors, r.progress, r.created_at, r.run_at
                  FROM unnest(l_keys, l_limits, l_seqs, l_slots)
                       WITH ORDINALITY AS k(key, lim, seq, slot, n)
                  JOIN awa.ready_entries r
                    ON r.queue = v_lane.queue AND r.priority = v_lane.priority
                   AND r.shard = v_lane.shard AND r.lane_seq = k.seq AND r.ready_slot = k.slot
                 WHERE k.n = ANY (h_pos) AND r.ready_slot = ANY (v_slots)
                 ORDER BY k.n;
                v_held_here := cardinality(h_pos);
                v_held := v_held + v_held_here;
                IF v_held = v_held_here AND NOT EXISTS (
                       SELECT 1 FROM awa.queue_meta m
                        WHERE m.queue = p_queue AND m.holds_keyed) THEN
                    INSERT INTO awa.queue_meta AS m (queue, holds_keyed) VALUES (p_queue, true)
                    ON CONFLICT (queue) DO UPDATE SET holds_keyed = true WHERE NOT m.holds_keyed;
                END IF;
                IF cardinality(v_keep) = 0 THEN
                    l_ids := '{}';
                ELSE
                    SELECT array_agg(x.id ORDER BY x.n), array_agg(x.lease ORDER BY x.n),
                           array_agg(x.att ORDER BY x.n), array_agg(x.seq ORDER BY x.n),
                           array_agg(x.slot ORDER BY x.n), array_agg(x.kind ORDER BY x.n),
                           array_agg(x.mx ORDER BY x.n), array_agg(x.args ORDER BY x.n),
                           array_agg(x.kwargs ORDER BY x.n), array_agg(x.meta ORDER BY x.n),
                           array_agg(x.tags ORDER BY x.n), array_agg(x.errors ORDER BY x.n),
                           array_agg(x.progress ORDER BY x.n)
                      INTO l_ids, l_leases, l_attempts, l_seqs, l_slots, l_kinds, l_max, l_args,
                           l_kwargs, l_meta, l_tags, l_errors, l_progress
                      FROM unnest(l_ids, l_leases, l_attempts, l_seqs, l_slots, l_kinds, l_max,
                                  l_args, l_kwargs, l_meta, l_tags, l_errors, l_progress)
                           WITH ORDINALITY AS x(id, lease, att, seq, slot, kind, mx, args, kwargs,
                                                meta, tags, errors, progress, n)
                     WHERE x.n = ANY (v_keep);
                END IF;
            END IF;
        END IF;

        -- A lane cut short, or one whose candidates were held, competes
        -- again when its cursor moved (so the loop always ends).
        IF (NOT v_cut AND v_held_here = 0) OR v_read = 0 THEN
            v_visited := v_visited || ((v_lane.priority::integer << 16) | v_lane.shard::integer);
        END IF;
        IF cardinality(l_ids) > 0 THEN
            a_ids := a_ids || l_ids;
            a_leases := a_leases || l_leases;
            a_attempts := a_attempts || l_attempts;
            a_seqs := a_seqs || l_seqs;
            a_slots := a_slots || l_slots;
            a_kinds := a_kinds || l_kinds;
            a_max := a_max || l_max;
            a_args := a_args || l_args;
            a_kwargs := a_kwargs || l_kwargs;
            a_meta := a_meta || l_meta;
            a_tags := a_tags || l_tags;
            a_errors := a_errors || l_errors;
            a_progress := a_progress || l_progress;
            a_prios := a_prios || array_fill(v_lane.priority, ARRAY[cardinality(l_ids)]);
            a_effective := a_effective
                || array_fill(v_lane.effective_priority, ARRAY[cardinality(l_ids)]);
            a_shards := a_shards || array_fill(v_lane.shard, ARRAY[cardinality(l_ids)]);
            v_left := v_left - cardinality(l_ids);
        END IF;
        EXIT WHEN v_left <= 0 OR v_held >= v_hold_cap;
    END LOOP;

    IF cardinality(a_ids) = 0 THEN
        RETURN;
    END IF;
    IF v_batch IS NULL THEN
        SELECT r.slot INTO v_claim_slot
          FROM awa.claim_ring_rotations r ORDER BY r.generation DESC LIMIT 1;
        v_batch := nextval('awa.claim_batch_seq');
    END IF;
    INSERT INTO awa.lease_claim_batches (claim_slot, batch_id, runtime_id, queue, claimed_at,
                                         deadline_at, job_ids, run_leases, attempts, priorities,
                                         effective_priorities, shards, lane_seqs, ready_slots)
    VALUES (v_claim_slot, v_batch, p_runtime, p_queue, v_now, v_deadline, a_ids, a_leases,
            a_attempts, a_prios, a_effective, a_shards, a_seqs, a_slots);

    RETURN QUERY
    SELECT i.job_id, i.run_lease, i.kind, i.priority, i.effective_priority, i.attempt,
           i.max_attempts, i.args, i.kwargs, i.metadata, i.tags::text[], i.errors, i.progress,
           v_claim_slot, v_batch, i.item::integer, v_deadline
      FROM unnest(a_ids, a_leases, a_attempts, a_prios, a_effective, a_kinds, a_max, a_args,
                  a_kwargs, a_meta, a_tags, a_errors, a_progress)
           WITH ORDINALITY AS i(job_id, run_lease, attempt, priority, effective_priority, kind,
                                max_attempts, args, kwargs, metadata, tags, errors, progress,
                                item)
     ORDER BY i.item;
END
$$;

-- Version 6 over version 7.
CREATE OR REPLACE FUNCTION awa.claim_ready_v8(
    p_queue text, p_stripes text[], p_max integer, p_runtime uuid, p_deadline interval,
    p_aging interval, p_claim_nonce bigint)
RETURNS TABLE (job_id bigint, run_lease bigint, kind text, priority smallint,
               effective_priority smallint, attempt smallint, max_attempts smallint,
               args text, kwargs text, metadata text, tags text[], errors text, progress text,
               claim_slot smallint, batch_id bigint, item integer,
               deadline_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_left   integer := p_max;
    v_stripe text;
    v_taken  integer;
BEGIN
    IF p_max <= 0 THEN
        RETURN;
    END IF;
    -- An unstriped queue's pause is checked by version 7 itself.
    IF p_stripes <> ARRAY[p_queue] AND EXISTS (
           SELECT 1 FROM awa.queue_meta m
            WHERE m.queue = p_queue AND m.paused_at IS NOT NULL) THEN
        RETURN;
    END IF;
    -- Queues that never held a keyed job skip this (the pause check reads
    -- the same row, so a plain claim takes no lock it did not take before).
    -- (Two statements: planning the second alone takes its locks.)
    IF EXISTS (SELECT 1 FROM awa.queue_meta m
                WHERE m.queue = ANY (p_stripes) AND m.holds_keyed) THEN
        IF EXISTS (SELECT 1 FROM awa.concurrency_waiting w WHERE w.queue = ANY (p_stripes)) THEN
            PERFORM awa.release_concurrency(p_stripes, GREATEST(p_max, 16));
        END IF;
    END IF;
    PERFORM set_config('awa.claim_nonce', COALESCE(p_claim_nonce::text, ''), true);
    FOREACH v_stripe IN ARRAY p_stripes LOOP
        RETURN QUERY
        SELECT * FROM awa.claim_ready_v7(v_stripe, v_left, p_runtime, p_deadline, p_aging);
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        v_left := v_left - v_taken;
        EXIT WHEN v_left <= 0;
    END LOOP;
    PERFORM set_config('awa.claim_nonce', '', true);
END
$$;

ALTER TABLE awa.ready_entries ALTER COLUMN created_at SET DEFAULT now();
ALTER TABLE awa.ready_entries ALTER COLUMN run_at SET DEFAULT now();

-- Reserve p_count lane positions and job ids for jobs of one queue and
-- priority that are due now, on a queue with a single enqueue shard; no row
-- for a queue with several (the caller then uses reserve_ready_batch_v2,
-- which spreads the jobs over the shards).  The lane lock is held until the
-- caller's transaction ends; the jobs' lane positions are first_seq,
-- first_seq + 1, ... in input order, and the queue is notified at commit.
CREATE OR REPLACE FUNCTION awa.reserve_ready_run(
    p_queue text, p_priority smallint, p_count integer)
RETURNS TABLE (job_ids bigint[], shard smallint, first_seq bigint, ready_slot smallint,
               ready_generation bigint, created_at text)
LANGUAGE plpgsql AS $$
DECLARE
    v_first bigint;
    v_slot  smallint;
    v_gen   bigint;
BEGIN
    IF p_count <= 0 OR awa.enqueue_shards(p_queue) > 1 THEN
        RETURN;
    END IF;
    v_first := awa.reserve_lane(p_queue, p_priority, 0::smallint, p_count);
    SELECT c.slot, c.generation INTO v_slot, v_gen FROM awa.queue_ring_cursor() c;
    INSERT INTO awa.ready_segments (ready_slot, ready_generation, queue, priority, shard,
                                    start_seq, end_seq, run_at)
    VALUES (v_slot, v_gen, p_queue, p_priority, 0, v_first, v_first + p_count, now());
    PERFORM pg_notify(awa.queue_channel(p_queue), '');
    RETURN QUERY
    SELECT ARRAY(SELECT nextval('awa.job_id_seq') FROM generate_series(1, p_count)),
           0::smallint, v_first, v_slot, v_gen, now()::text;
END
$$;

-- Version 2, the root child locked last (see the header).
CREATE OR REPLACE FUNCTION awa.prune_ring_v4(
    p_ring text, p_lock_timeout_ms integer, p_failed_retention interval)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_cursor    record;
    v_slots     integer;
    v_target    integer;
    v_sealed_at timestamptz;
    v_stamp     bigint;
    v_children  text;
    v_root      text;
    v_timeout   text;
    v_locked_at timestamptz;
    v_held_ms   double precision;
    v_outcome   text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'awa.prune_ring_v4 needs READ COMMITTED, not %',
                        current_setting('transaction_isolation')
              USING ERRCODE = 'invalid_transaction_state';
    END IF;
    IF NOT pg_try_advisory_xact_lock(awa.ring_lock_key(p_ring)) THEN
        RETURN 'skipped_busy';
    END IF;
    SELECT * INTO v_cursor FROM awa.ring_cursor(p_ring);
    SELECT slot_count INTO v_slots FROM awa.ring_config WHERE ring = p_ring;
    v_target := (v_cursor.slot + 1) % v_slots;
    -- The target was sealed when the ring first rotated away from it: the
    -- rotation that followed its last generation.
    EXECUTE format('SELECT min(r.rotated_at) FROM awa.%I r
                     WHERE r.generation > (SELECT max(x.generation) FROM awa.%I x
                                            WHERE x.slot = $1 AND x.generation < $2)',
                   p_ring || '_ring_rotations', p_ring || '_ring_rotations')
       INTO v_sealed_at USING v_target, v_cursor.generation;
    v_sealed_at := COALESCE(v_sealed_at, v_cursor.rotated_at);

    IF awa.ring_slot_empty(p_ring, v_target) THEN
        v_outcome := 'already_pruned';
    ELSE
        -- The stamp comes before the gates: what committed before it, the
        -- gates see; what commits after it moves it.
        v_stamp := awa.ring_slot_stamp(p_ring, v_target);
        IF awa.ring_slot_busy(p_ring, v_target, v_sealed_at) IS NOT NULL THEN
            v_outcome := 'skipped_busy';
        ELSE
            -- Every child but the root (the table awa.ring_slot_stamp
            -- counts): the root goes last.
            v_root := CASE p_ring WHEN 'queue' THEN 'ready_segments'
                                  WHEN 'claim' THEN 'lease_claim_batches'
                                  ELSE 'leases' END;
            SELECT string_agg(format('awa.%I', t.name || '_' || v_target), ', ' ORDER BY t.n)
              INTO v_children
              FROM unnest(awa.ring_tables(p_ring)) WITH ORDINALITY AS t(name, n)
             WHERE t.name <> v_root;
            v_root := format('awa.%I', v_root || '_' || v_target);
            v_timeout := current_setting('lock_timeout');
            -- A subtransaction: the carry-forward and fold writes, and the
            -- locks, go if the lock times out or the check under it fails.
            BEGIN
                -- Before the lock, so they do not count towards its hold.
                IF p_ring = 'queue' THEN
                    PERFORM awa.carry_forward_and_fold(v_target, v_cursor.slot,
                                                       v_cursor.generation, p_failed_retention);
                END IF;
                PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
                IF v_children IS NOT NULL THEN
                    EXECUTE 'LOCK TABLE ' || v_children || ' IN ACCESS EXCLUSIVE MODE';
                END IF;
                IF awa.ring_slot_pinned(v_sealed_at)
                   OR awa.ring_slot_stamp(p_ring, v_target) <> v_stamp THEN
                    RAISE EXCEPTION 'ring % slot %: a late writer or an older snapshot',
                                    p_ring, v_target
                          USING ERRCODE = 'AW001';
                END IF;
                IF v_children IS NOT NULL THEN
                    EXECUTE 'TRUNCATE ' || v_children;
                END IF;
                -- The root last: the child every claim reads, locked for its
                -- own TRUNCATE and the commit only.  No writer can have
                -- changed it (every writer of the slot appends to it with
                -- the rest): checked again all the same.
                EXECUTE 'LOCK TABLE ' || v_root || ' IN ACCESS EXCLUSIVE MODE';
                v_locked_at := clock_timestamp();
                PERFORM set_config('lock_timeout', v_timeout, true);
                IF awa.ring_slot_stamp(p_ring, v_target) <> v_stamp THEN
                    RAISE EXCEPTION 'ring % slot %: a late writer', p_ring, v_target
                          USING ERRCODE = 'AW001';
                END IF;
                EXECUTE 'TRUNCATE ' || v_root;
                -- The hold goes on until commit (the rest of this function,
                -- the commit's WAL flush and the unlink of the old files),
                -- which no statement inside the transaction can measure.
                v_held_ms := extract(epoch FROM clock_timestamp() - v_locked_at) * 1000;
                v_outcome := 'pruned';
            EXCEPTION
                WHEN lock_not_available THEN
                    v_outcome := 'blocked';
                WHEN SQLSTATE 'AW001' THEN
                    -- The abort released the root's lock: held until now (NULL:
                    -- the check under the other children's locks failed).
                    v_held_ms := extract(epoch FROM clock_timestamp() - v_locked_at) * 1000;
                    v_outcome := 'skipped_busy';
            END;
        END IF;
    END IF;
    PERFORM awa.record_ring_outcome_v2(p_ring, 'prune', v_outcome, v_target, NULL, v_held_ms);
    RETURN v_outcome;
END
$$;

-- Version 3 over version 4.
CREATE OR REPLACE FUNCTION awa.prune_ring_v5(
    p_ring text, p_lock_timeout_ms integer, p_failed_retention interval)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_target integer;
BEGIN
    IF awa.horizon_readable(current_user) THEN
        RETURN awa.prune_ring_v4(p_ring, p_lock_timeout_ms, p_failed_retention);
    END IF;
    SELECT (c.slot + 1) % r.slot_count INTO v_target
      FROM awa.ring_cursor(p_ring) c JOIN awa.ring_config r ON r.ring = p_ring;
    PERFORM awa.record_ring_outcome_v2(p_ring, 'prune', 'horizon_unreadable', v_target,
                                       NULL, NULL);
    RETURN 'horizon_unreadable';
END
$$;

-- Version 2, when a batch or a lease could need it (see the header): each
-- test here is implied by the item-level test version 2 makes.
CREATE OR REPLACE FUNCTION awa.rescue_v3(
    p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[],
    p_dlq_off text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    IF p_reason = 'deadline_expired' THEN
        IF NOT EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                        WHERE b.deadline_at < clock_timestamp())
           AND NOT EXISTS (SELECT 1 FROM awa.leases l
                            WHERE l.state = 'running' AND l.deadline_at < clock_timestamp()) THEN
            RETURN 0;
        END IF;
    ELSIF p_reason = 'callback_timeout' THEN
        IF NOT EXISTS (SELECT 1 FROM awa.leases l
                        WHERE l.state = 'waiting_external'
                          AND l.callback_timeout_at < clock_timestamp()) THEN
            RETURN 0;
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                       WHERE NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                          WHERE i.id = b.runtime_id
                                            AND i.heartbeat_at > clock_timestamp() - p_staleness))
          AND NOT EXISTS (SELECT 1 FROM awa.leases l
                           WHERE l.state = 'running'
                             AND (l.heartbeat_at < clock_timestamp() - p_staleness
                                  OR NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                                  WHERE i.id = l.runtime_id
                                                    AND i.heartbeat_at
                                                        > clock_timestamp() - p_staleness))) THEN
        RETURN 0;
    END IF;
    RETURN awa.rescue_v2(p_reason, p_staleness, p_dlq_default, p_dlq_on, p_dlq_off, p_limit);
END
$$;

-- The queue ring's prune gate (version 11's tests, the open-receipt one
-- restricted to the batches that hold items of the slot; see the header).
CREATE OR REPLACE FUNCTION awa.queue_slot_busy(p_slot integer)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM awa.ready_segments g
          JOIN awa.queue_claim_heads h
            ON h.queue = g.queue AND h.priority = g.priority AND h.shard = g.shard
         WHERE g.ready_slot = p_slot AND g.end_seq > h.claim_seq
    ) THEN
        RETURN 'claimable ready rows';
    END IF;
    IF EXISTS (SELECT 1 FROM awa.leases l WHERE l.ready_slot = p_slot) THEN
        RETURN 'live leases';
    END IF;
    IF EXISTS (
        SELECT 1 FROM awa.lease_claim_batches b
         CROSS JOIN LATERAL unnest(b.ready_slots) WITH ORDINALITY AS u(ready_slot, item)
         WHERE p_slot = ANY (b.ready_slots) AND u.ready_slot = p_slot
           AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                            WHERE x.batch_id = b.batch_id AND x.item = u.item
                              AND x.claim_slot = b.claim_slot)
           AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                            WHERE y.batch_id = b.batch_id AND y.claim_slot = b.claim_slot
                              AND u.item = ANY (y.items))
    ) THEN
        RETURN 'open receipts';
    END IF;
    RETURN NULL;
END
$$;
