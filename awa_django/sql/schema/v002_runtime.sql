-- awa_django substrate, version 2: the worker runtime.
--
-- Claim, guarded attempt closure, deferred promotion and runtime liveness.
-- Like v001 this file is idempotent and runs under the substrate lock.
--
-- The run_lease guard, in one paragraph: a claim appends one compact
-- receipt row (lease_claim_batches) listing every attempt it handed out,
-- each with run_lease = previous + 1.  Every later transition of an attempt
-- (complete, retry, snooze, cancel, fail, hand back, rescue) goes through
-- awa.close_attempts, which locks the claim batch row, keeps only the items
-- that have no closure evidence yet, and writes evidence for exactly those.
-- One closer wins; everyone else learns their attempt is stale and changes
-- nothing.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 2);

-- One row per live worker process: its heartbeat covers every receipt it
-- owns, so short jobs need no per-job liveness write.
CREATE TABLE IF NOT EXISTS awa.runtime_instances (
    id           uuid PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    queues       text[]      NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now()
);

-- ---------------------------------------------------------------------------
-- Claim
-- ---------------------------------------------------------------------------

-- Claim up to p_max ready jobs of p_queue in one transaction.
--
-- Lanes with work beyond their cursor are visited best effective priority
-- first (priority minus one level per p_aging waited by the lane head, never
-- below 1), each locked FOR UPDATE SKIP LOCKED so concurrent claimers split
-- lanes instead of queueing.  Within a lane, rows are taken in lane_seq order
-- from the cursor, reading only the ready slots that segments beyond the
-- cursor point at; tombstoned rows are stepped over.  The cursor moves past
-- everything taken (the only UPDATE on the claim path) and one compact
-- receipt row for the whole claim is appended to the current claim slot.
CREATE OR REPLACE FUNCTION awa.claim_ready(
    p_queue text, p_max integer, p_runtime uuid, p_deadline interval, p_aging interval)
RETURNS TABLE (job_id bigint, run_lease bigint, kind text, priority smallint,
               effective_priority smallint, attempt smallint, max_attempts smallint,
               args text, kwargs text, metadata text, tags text[], errors text, progress text,
               claim_slot smallint, batch_id bigint, item integer,
               deadline_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_now        timestamptz := clock_timestamp();
    v_deadline   timestamptz;
    v_claim_slot smallint;
    v_batch      bigint;
    v_lane       record;
    v_left       integer := p_max;
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
    -- A claim need not wait for its WAL flush: if a crash loses it, the
    -- cursor move and the receipt are lost together and the jobs are simply
    -- claimed again (at-least-once, nothing lost).  Completions stay durable.
    PERFORM set_config('synchronous_commit', 'off', true);

    FOR v_lane IN
        SELECT h.queue, h.priority, h.shard, h.claim_seq,
               GREATEST(1, h.priority - CASE
                   WHEN p_aging > interval '0'
                   THEN floor(extract(epoch FROM v_now - w.head_run_at) / extract(epoch FROM p_aging))
                   ELSE 0 END)::smallint AS effective_priority,
               w.slots
          FROM awa.queue_claim_heads h
          CROSS JOIN LATERAL (
              SELECT min(g.run_at) AS head_run_at, array_agg(DISTINCT g.ready_slot) AS slots
                FROM awa.ready_segments g
               WHERE g.queue = h.queue AND g.priority = h.priority AND g.shard = h.shard
                 AND g.end_seq > h.claim_seq) w
         WHERE h.queue = p_queue AND w.head_run_at IS NOT NULL
         ORDER BY 5, w.head_run_at, h.shard
           FOR UPDATE OF h SKIP LOCKED
    LOOP
        EXIT WHEN v_left <= 0;
        WITH candidates AS (
            SELECT r.job_id, r.run_lease, r.attempt, r.lane_seq, r.ready_slot, r.kind,
                   r.max_attempts, r.args::text AS args, r.kwargs::text AS kwargs,
                   r.metadata::text AS metadata, r.tags::text AS tags, r.errors::text AS errors,
                   r.progress::text AS progress,
                   EXISTS (SELECT 1 FROM awa.ready_tombstones t
                            WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                              AND t.priority = r.priority AND t.shard = r.shard
                              AND t.lane_seq = r.lane_seq) AS spent
              FROM awa.ready_entries r
             WHERE r.queue = v_lane.queue AND r.priority = v_lane.priority
               AND r.shard = v_lane.shard AND r.lane_seq >= v_lane.claim_seq
               AND r.ready_slot = ANY (v_lane.slots)
             ORDER BY r.lane_seq
             LIMIT v_left
        ), advanced AS (
            UPDATE awa.queue_claim_heads h
               SET claim_seq = (SELECT max(c.lane_seq) + 1 FROM candidates c)
             WHERE h.queue = v_lane.queue AND h.priority = v_lane.priority
               AND h.shard = v_lane.shard AND EXISTS (SELECT 1 FROM candidates)
        )
        SELECT COALESCE(array_agg(c.job_id ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent), '{}'),
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
               array_agg(c.progress ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent)
          INTO l_ids, l_leases, l_attempts, l_seqs, l_slots, l_kinds, l_max, l_args, l_kwargs,
               l_meta, l_tags, l_errors, l_progress
          FROM candidates c;
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
    END LOOP;

    IF cardinality(a_ids) = 0 THEN
        RETURN;
    END IF;
    SELECT r.slot INTO v_claim_slot
      FROM awa.claim_ring_rotations r ORDER BY r.generation DESC LIMIT 1;
    v_batch := nextval('awa.claim_batch_seq');
    INSERT INTO awa.lease_claim_batches (claim_slot, batch_id, runtime_id, queue, claimed_at,
                                         deadline_at, job_ids, run_leases, attempts, priorities,
                                         effective_priorities, shards, lane_seqs, ready_slots)
    VALUES (v_claim_slot, v_batch, p_runtime, p_queue, v_now, v_deadline, a_ids, a_leases,
            a_attempts, a_prios, a_effective, a_shards, a_seqs, a_slots);

    -- The job bodies were read with the candidates: no second pass over the ring.
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

-- ---------------------------------------------------------------------------
-- Closing attempts
-- ---------------------------------------------------------------------------

-- Close a batch of attempts, each with its own target:
--   completed                       -> compact: one closure-batch row per claim
--                                      batch, one completion-batch row per ready slot
--   failed / cancelled              -> explicit closure + done_entries row
--   retryable / scheduled           -> explicit closure + deferred_jobs row
--                                      (run_at = p_run_ats[i], NULL meaning now)
--   dlq                             -> explicit closure + dlq_entries row
-- Attempts are named by (claim_slot, batch_id, item) and must match their
-- (job_id, run_lease).  Any array after the five key arrays may be NULL,
-- meaning its default for every item (target 'completed', attempt 0, ...).  p_attempts is the attempt count to store on a
-- deferred row (a snooze or hand-back passes the count before this attempt,
-- so it is not counted).  p_errors is the whole error history as JSON text
-- (NULL keeps the history on the ready row); p_progress likewise for
-- progress.  Returns the attempts actually closed; the others were stale and
-- nothing was written for them.
CREATE OR REPLACE FUNCTION awa.close_attempts(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_targets text[], p_outcomes text[], p_run_ats timestamptz[],
    p_attempts smallint[], p_errors text[], p_results text[], p_reasons text[],
    p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
BEGIN
    -- The guard: one closer at a time per claim batch (ordered: no deadlocks).
    PERFORM 1
       FROM awa.lease_claim_batches b
      WHERE (b.batch_id, b.claim_slot) IN (SELECT DISTINCT x.batch_id, x.claim_slot
                                             FROM unnest(p_batch_ids, p_claim_slots)
                                                  AS x(batch_id, claim_slot))
      ORDER BY b.batch_id
        FOR UPDATE;

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
        UNION ALL
        SELECT y.batch_id, y.claim_slot, unnest(y.items)
          FROM touched t
          JOIN awa.lease_claim_closure_batches y
            ON y.batch_id = t.batch_id AND y.claim_slot = t.claim_slot
    ), won AS (
        SELECT i.*, b.queue, b.priorities[i.item] AS priority, b.shards[i.item] AS shard,
               b.lane_seqs[i.item] AS lane_seq, b.ready_slots[i.item] AS ready_slot,
               b.claimed_at, b.attempts[i.item] AS claim_attempt
          FROM input i
          JOIN awa.lease_claim_batches b
            ON b.batch_id = i.batch_id AND b.claim_slot = i.claim_slot
          LEFT JOIN evidence e
            ON e.batch_id = i.batch_id AND e.claim_slot = i.claim_slot AND e.item = i.item
         WHERE b.job_ids[i.item] = i.job_id AND b.run_leases[i.item] = i.run_lease
           AND e.item IS NULL
    ), explicit AS (
        INSERT INTO awa.lease_claim_closures (claim_slot, batch_id, item, job_id, run_lease,
                                              outcome)
        SELECT w.claim_slot, w.batch_id, w.item, w.job_id, w.run_lease, w.outcome
          FROM won w
         WHERE w.target <> 'completed'
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
          LEFT JOIN awa.attempt_state s ON s.job_id = w.job_id AND s.run_lease = w.run_lease
         WHERE w.target <> 'completed'
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
    )
    SELECT w.job_id, w.run_lease FROM won w;
END
$$;

-- Is this attempt still open (claimed, matching, no closure evidence)?
CREATE OR REPLACE FUNCTION awa.attempt_is_open(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                    WHERE b.batch_id = p_batch_id AND b.claim_slot = p_claim_slot
                      AND b.job_ids[p_item] = p_job_id AND b.run_leases[p_item] = p_run_lease)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                        WHERE x.batch_id = p_batch_id AND x.item = p_item
                          AND x.claim_slot = p_claim_slot)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                        WHERE y.batch_id = p_batch_id AND y.claim_slot = p_claim_slot
                          AND p_item = ANY (y.items))
$$;

-- Record progress of live attempts (one statement for many).  Only attempts
-- whose receipt is still open are written; returns the ones written.
CREATE OR REPLACE FUNCTION awa.record_progress(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[], p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE sql AS $$
    INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, updated_at)
    SELECT i.job_id, i.run_lease, i.progress::jsonb, now()
      FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases, p_progress)
           AS i(claim_slot, batch_id, item, job_id, run_lease, progress)
     WHERE awa.attempt_is_open(i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease)
    ON CONFLICT ON CONSTRAINT attempt_state_pkey
    DO UPDATE SET progress = EXCLUDED.progress, updated_at = EXCLUDED.updated_at
    RETURNING s.job_id, s.run_lease
$$;

-- ---------------------------------------------------------------------------
-- Deferred promotion
-- ---------------------------------------------------------------------------

-- Move up to p_limit due deferred rows (scheduled, retry backoff, snooze)
-- into the current ready slot, oldest run_at first, keeping lane FIFO, and
-- notify their queues.  SKIP LOCKED lets several promoters run at once.
CREATE OR REPLACE FUNCTION awa.promote_due(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_rows   awa.deferred_jobs[];
    v_shards smallint[];
BEGIN
    WITH due AS (
        DELETE FROM awa.deferred_jobs d
         WHERE d.job_id IN (SELECT x.job_id FROM awa.deferred_jobs x
                             WHERE x.run_at <= clock_timestamp()
                             ORDER BY x.run_at, x.job_id
                             LIMIT p_limit
                               FOR UPDATE SKIP LOCKED)
        RETURNING d.*
    )
    SELECT array_agg(due ORDER BY due.run_at, due.job_id) INTO v_rows FROM due;
    IF v_rows IS NULL THEN
        RETURN 0;
    END IF;

    SELECT array_agg(awa.shard_for(m.enqueue_shards, d.ordering_key, d.job_id) ORDER BY d.ordinality)
      INTO v_shards
      FROM unnest(v_rows) WITH ORDINALITY AS d
      LEFT JOIN awa.queue_meta m ON m.queue = d.queue;

    INSERT INTO awa.ready_entries (ready_slot, ready_generation, queue, priority, shard, lane_seq,
                                   job_id, kind, args, kwargs, metadata, tags, attempt,
                                   max_attempts, run_lease, ordering_key, errors, progress,
                                   created_at, run_at)
    SELECT p.ready_slot, p.ready_generation, d.queue, d.priority, v_shards[d.ordinality],
           p.lane_seq, d.job_id, d.kind, d.args, d.kwargs, d.metadata, d.tags, d.attempt,
           d.max_attempts, d.run_lease, d.ordering_key, d.errors, d.progress, d.created_at,
           d.run_at
      FROM unnest(v_rows) WITH ORDINALITY AS d
      JOIN awa.place_ready(
               ARRAY(SELECT x.queue FROM unnest(v_rows) WITH ORDINALITY AS x ORDER BY x.ordinality),
               ARRAY(SELECT x.priority FROM unnest(v_rows) WITH ORDINALITY AS x
                      ORDER BY x.ordinality),
               v_shards,
               ARRAY(SELECT x.run_at FROM unnest(v_rows) WITH ORDINALITY AS x
                      ORDER BY x.ordinality)) AS p
        ON p.n = d.ordinality;
    RETURN cardinality(v_rows);
END
$$;

-- ---------------------------------------------------------------------------
-- Queue state probes
-- ---------------------------------------------------------------------------

-- True while any of p_queues has a job that is available, running, or due
-- in deferred_jobs (what `awa_worker --burst` waits for).
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
