-- Claim: one lane at a time, paid by the batch, not by the backlog.
--
-- awa.claim_ready(queue, stripes, ...) is the worker's claim.  It checks
-- the logical queue's pause, releases held jobs of keyed queues
-- (concurrency.sql), sets the claim nonce and then takes jobs from each
-- stripe in the order given (the caller starts one stripe further on each
-- time) through awa.claim_queue until the batch is full: one round trip,
-- one claim batch row per stripe it took jobs from.
--
-- awa.claim_queue claims from one physical queue.  Each step picks the
-- best lane with work beyond its claim cursor (effective priority, then
-- age) with ORDER BY ... LIMIT 1 FOR UPDATE SKIP LOCKED, so it locks only
-- that lane and a second claimer moves on to another one; a lane already
-- visited is not visited again.  It probes the lane head with the first
-- segment beyond the cursor and reads only the segments that can hold the
-- rows it wants.  Aging: a lane whose head segment has run_at r competes
-- at priority - floor((now - r) / aging_interval), and the claim takes from
-- a lane only the segments that age like its head, so a claim of many jobs
-- hands them out in the order single claims would.  The lane probes are
-- planned once per call, and every statement with its actual values, so
-- only the ring partitions it reads are locked.
--
-- A claim commits with synchronous_commit off: a claim lost in a crash is
-- claimed again, and the nonce (close.sql) keeps the lost attempt from
-- closing the new one.  awa.queues_have_work answers a burst worker's
-- "anything left?" without claiming.

-- Schema version 9 plans the claim's last two statements (the claim batch
-- row and the rows it returns) once per session instead of on each call:
-- they read no ring partition, so a generic plan locks nothing more
-- (migration 0009_cached_plans runs this file again).
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 9);

-- Any work for these queues: claimable segments, open receipts, due
-- deferred jobs, and held jobs (they run once a slot frees).
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
    ) OR EXISTS (
        SELECT 1 FROM awa.concurrency_waiting w WHERE w.queue = ANY (p_queues)
    )
$$;

-- Claim from one physical queue (see the header): lanes one at a time,
-- the concurrency-slot check inline, the lane probes planned once.
CREATE OR REPLACE FUNCTION awa.claim_queue(
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
    -- A lost claim is claimed again, so no WAL flush wait.
    PERFORM set_config('synchronous_commit', 'off', true);

    LOOP
        -- The best lane with work beyond its cursor.  This
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
            -- taking (or looking at) is skipped, never waited for.  Busy is
            -- awa.concurrency_slot_busy written out (see its comment).
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
    -- The batch row goes to one claim ring partition, chosen as it is
    -- routed (a generic plan locks only the parent until then), and the
    -- rows returned come from the arrays: planned once, about 0.1 ms a
    -- claim saved.
    PERFORM set_config('plan_cache_mode', 'force_generic_plan', true);
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

-- The worker's claim: pause, held-job release and nonce, then
-- awa.claim_queue over the stripes in the order given.  Its columns are
-- claim_queue's, whose rows it returns as they are (RETURN QUERY needs the
-- shape declared; a shared composite type would change the hot path's
-- signature for no gain).
CREATE OR REPLACE FUNCTION awa.claim_ready(
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
    -- An unstriped queue's pause is checked by awa.claim_queue itself.
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
        SELECT * FROM awa.claim_queue(v_stripe, v_left, p_runtime, p_deadline, p_aging);
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        v_left := v_left - v_taken;
        EXIT WHEN v_left <= 0;
    END LOOP;
    PERFORM set_config('awa.claim_nonce', '', true);
END
$$;
