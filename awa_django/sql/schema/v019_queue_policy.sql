-- awa_django substrate, version 19: exact priority aging, and claims and
-- reads over the stripes of a logical queue.
--
-- Aging
-- -----
--
-- Claim-time aging reads a lane's age from its head segment: a lane whose
-- first segment beyond the claim cursor has run_at r is claimed at
-- priority - floor((now - r) / aging_interval).  Every job of a segment
-- therefore ages as the segment does, and until now awa.place_ready wrote
-- one segment per lane per batch stamped with the batch's oldest run_at: a
-- promoted batch of jobs due at different times aged as if each were as old
-- as the oldest, and the COPY path stamped now() on rows that carried an
-- older run_at of their own.
--
-- * awa.place_ready (same arguments and result) writes one segment per run
--   of consecutive lane positions whose run_at falls in the same
--   millisecond, stamped with the run's oldest run_at.  Aging is exact to
--   the millisecond -- the resolution of the claim's own clock reading --
--   while a burst enqueued or promoted together still shares a segment
--   (one per lane when the jobs carry one run_at, as a COPY batch due now
--   does; a few per thousand jobs when they were prepared one by one).
-- * awa.reserve_ready_batch_v2 is awa.reserve_ready_batch with the jobs'
--   run_at, so a COPY-path job due in the past ages from its own due time.
-- * awa.claim_ready_v2 (same arguments and result) takes from a lane only
--   the segments that age like its head.  At the first segment of another
--   effective priority the lane goes back into the competition with its new
--   head, so a claim of many jobs hands them out in the order a claim of one
--   job at a time would.
--
-- Stripes
-- -------
--
-- With AWA["QUEUE_STRIPE_COUNT"] = N > 1 every logical queue q is stored as
-- the physical queues q#0 .. q#N-1 (each with its own lanes, enqueue heads
-- and claim heads), plus q itself for jobs written by paths that do not
-- route (periodic fires, batch-operation moves, direct SQL producers).
-- Producers pick the stripe (awa_django.stripes); '#' is not allowed in a
-- queue name, so the suffix is unambiguous.
--
-- * awa.claim_ready_v4 claims for one logical queue from its stripes in
--   the order given (the caller starts each claim one stripe further on),
--   one awa.claim_ready_v2 per stripe until the batch is full: one round
--   trip, one claim batch row per stripe it took jobs from.  The logical
--   queue's pause stops every stripe.
-- * awa.job_page_v2 and awa.state_counts_v2 are awa.job_page and
--   awa.state_counts filtering by a list of queues (one pass over each
--   source for all the stripes of a queue).
--
-- The down file drops what this version adds; the two redefinitions stay,
-- as they keep the version-18 contract and use nothing this version adds.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 19);

-- Place jobs in the ready ring: given each job's lane (queue, priority,
-- shard) and run_at in input order, reserve every lane's range once (lanes
-- in a fixed order, so concurrent batch producers cannot deadlock on each
-- other), read the ring cursor only after those reservations (they may
-- wait), append one segment per run of a lane's jobs due in the same
-- millisecond, notify each queue once, and return per input position the
-- lane_seq and ready slot/generation the caller writes the row with.  A NULL
-- run_at (or a NULL p_run_ats) means now().  Shared by the COPY path,
-- deferred promotion and batch operations.
CREATE OR REPLACE FUNCTION awa.place_ready(
    p_queues text[], p_priorities smallint[], p_shards smallint[], p_run_ats timestamptz[])
RETURNS TABLE (n bigint, lane_seq bigint, ready_slot smallint, ready_generation bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_slot  smallint;
    v_gen   bigint;
    v_lane  record;
    v_seqs  bigint[];
    l_queue text[] := '{}';
    l_prio  smallint[] := '{}';
    l_shard smallint[] := '{}';
    l_first bigint[] := '{}';
BEGIN
    FOR v_lane IN
        SELECT j.queue, j.priority, j.shard, count(*)::integer AS n
          FROM unnest(p_queues, p_priorities, p_shards) AS j(queue, priority, shard)
         GROUP BY j.queue, j.priority, j.shard
         ORDER BY j.queue, j.priority, j.shard
    LOOP
        l_queue := l_queue || v_lane.queue;
        l_prio := l_prio || v_lane.priority;
        l_shard := l_shard || v_lane.shard;
        l_first := l_first || awa.reserve_lane(v_lane.queue, v_lane.priority, v_lane.shard,
                                               v_lane.n);
    END LOOP;
    SELECT c.slot, c.generation INTO v_slot, v_gen FROM awa.queue_ring_cursor() c;

    -- Each job's lane position: its lane's first reserved sequence plus its
    -- rank among the lane's jobs in input order.
    SELECT array_agg(p.seq ORDER BY p.n) INTO v_seqs
      FROM (SELECT j.n,
                   l.first + row_number() OVER (PARTITION BY j.queue, j.priority, j.shard
                                                ORDER BY j.n) - 1 AS seq
              FROM unnest(p_queues, p_priorities, p_shards)
                   WITH ORDINALITY AS j(queue, priority, shard, n)
              JOIN unnest(l_queue, l_prio, l_shard, l_first) AS l(queue, priority, shard, first)
                ON l.queue = j.queue AND l.priority = j.priority AND l.shard = j.shard) p;

    -- Runs of consecutive positions of a lane due in the same millisecond
    -- (gaps and islands: a new run starts where the millisecond changes).
    INSERT INTO awa.ready_segments (ready_slot, ready_generation, queue, priority, shard,
                                    start_seq, end_seq, run_at)
    SELECT v_slot, v_gen, r.queue, r.priority, r.shard, min(r.seq), max(r.seq) + 1,
           min(r.run_at)
      FROM (SELECT b.queue, b.priority, b.shard, b.seq, b.run_at,
                   sum(b.starts) OVER (PARTITION BY b.queue, b.priority, b.shard
                                       ORDER BY b.seq) AS run
              FROM (SELECT j.queue, j.priority, j.shard, v_seqs[j.n] AS seq, j.run_at,
                           CASE WHEN date_trunc('milliseconds', j.run_at)
                                     = lag(date_trunc('milliseconds', j.run_at))
                                           OVER (PARTITION BY j.queue, j.priority, j.shard
                                                 ORDER BY j.n)
                                THEN 0 ELSE 1 END AS starts
                      FROM (SELECT x.queue, x.priority, x.shard, COALESCE(x.run_at, now()) AS run_at,
                                   x.n
                              FROM unnest(p_queues, p_priorities, p_shards, p_run_ats)
                                   WITH ORDINALITY AS x(queue, priority, shard, run_at, n)) j) b) r
     GROUP BY r.queue, r.priority, r.shard, r.run;
    PERFORM pg_notify(awa.queue_channel(d.queue), '')
       FROM (SELECT DISTINCT unnest(p_queues)) AS d(queue);

    RETURN QUERY
    SELECT s.n, s.seq, v_slot, v_gen FROM unnest(v_seqs) WITH ORDINALITY AS s(seq, n);
END
$$;

-- awa.reserve_ready_batch with each job's run_at (NULL: due now), so the
-- segments age from the rows' own due times.
CREATE OR REPLACE FUNCTION awa.reserve_ready_batch_v2(
    p_queues text[], p_priorities smallint[], p_ordering_keys text[], p_run_ats timestamptz[])
RETURNS TABLE (ord bigint, job_id bigint, shard smallint, lane_seq bigint,
               ready_slot smallint, ready_generation bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_salt   bigint := floor(random() * 1000000)::bigint;
    v_shards smallint[];
BEGIN
    SELECT array_agg(awa.shard_for(m.enqueue_shards, j.okey, v_salt + j.n) ORDER BY j.n)
      INTO v_shards
      FROM unnest(p_queues, p_ordering_keys) WITH ORDINALITY AS j(queue, okey, n)
      LEFT JOIN awa.queue_meta m ON m.queue = j.queue;
    RETURN QUERY
    SELECT p.n, nextval('awa.job_id_seq'), v_shards[p.n], p.lane_seq, p.ready_slot,
           p.ready_generation
      FROM awa.place_ready(p_queues, p_priorities, v_shards, p_run_ats) AS p
     ORDER BY p.n;
END
$$;

-- Version 6's claim, taking from a lane only the segments that age like its
-- head (see the header).  A lane is left out of the rest of the claim once
-- it has given what it could, as before; a lane cut short by a segment of
-- another effective priority competes again, with its cursor moved on.
CREATE OR REPLACE FUNCTION awa.claim_ready_v2(
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
    v_lane       record;
    v_left       integer := p_max;
    v_visited    integer[] := '{}';
    v_upto       bigint;
    v_slots      smallint[];
    v_cut        boolean;
    v_read       integer;
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

    -- Statements below are planned with their actual values, so partition
    -- pruning happens at plan time and only the partitions a claim reads
    -- are locked (a generic plan locks every partition of the ring).
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);

    LOOP
        -- The best lane with work beyond its cursor, one at a time: only the
        -- lane about to be read is locked, so a concurrent claimer takes the
        -- next one instead of finding them all held.  Its head is the first
        -- segment beyond the cursor (a bounded probe, whatever the backlog).
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

        -- The segments that can hold the next v_left rows of the lane, up to
        -- the first one that ages differently from the head (v_cut: there is
        -- one within reach).
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
        WITH candidates AS (
            SELECT r.job_id, r.run_lease, r.attempt, r.lane_seq, r.ready_slot, r.kind,
                   r.max_attempts, r.args::text AS args, r.kwargs::text AS kwargs,
                   r.metadata::text AS metadata, r.tags::text AS tags, r.errors::text AS errors,
                   r.progress::text AS progress,
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
               array_agg(c.progress ORDER BY c.lane_seq) FILTER (WHERE NOT c.spent)
          INTO v_read, l_ids, l_leases, l_attempts, l_seqs, l_slots, l_kinds, l_max, l_args,
               l_kwargs, l_meta, l_tags, l_errors, l_progress
          FROM candidates c;
        -- A lane cut short competes again only when its cursor moved (so the
        -- loop always ends); otherwise it has given what it could.
        IF NOT v_cut OR v_read = 0 THEN
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
        EXIT WHEN v_left <= 0;
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
-- Stripes
-- ---------------------------------------------------------------------------

-- Claim up to p_max jobs of the logical queue p_queue from its physical
-- queues p_stripes, visited in that order: each stripe is claimed like an
-- unstriped queue (awa.claim_ready_v2, with its own lane order and aging)
-- for what the batch still lacks.  Same result columns as
-- awa.claim_ready_v3; every job carries the claim batch of its stripe.
CREATE OR REPLACE FUNCTION awa.claim_ready_v4(
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
    IF p_max <= 0 OR EXISTS (SELECT 1 FROM awa.queue_meta m
                              WHERE m.queue = p_queue AND m.paused_at IS NOT NULL) THEN
        RETURN;
    END IF;
    -- Read by the column default when version 2 writes each batch row.
    PERFORM set_config('awa.claim_nonce', COALESCE(p_claim_nonce::text, ''), true);
    FOREACH v_stripe IN ARRAY p_stripes LOOP
        RETURN QUERY
        SELECT * FROM awa.claim_ready_v2(v_stripe, v_left, p_runtime, p_deadline, p_aging);
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        v_left := v_left - v_taken;
        EXIT WHEN v_left <= 0;
    END LOOP;
    PERFORM set_config('awa.claim_nonce', '', true);
END
$$;

-- awa.job_page filtering by any of p_queues (NULL: every queue).
CREATE OR REPLACE FUNCTION awa.job_page_v2(
    p_before bigint, p_floor bigint, p_limit integer, p_state text, p_queues text[],
    p_kind text, p_priority smallint, p_tag text)
RETURNS TABLE (id bigint, kind text, queue text, state text, priority smallint,
               attempt smallint, max_attempts smallint, run_lease bigint, args json,
               kwargs json, metadata jsonb, tags text[], errors jsonb, progress jsonb,
               return_value json, created_at timestamptz, run_at timestamptz,
               attempted_at timestamptz, finalized_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_hi    bigint;
    v_lo    bigint;
    v_span  bigint := 1024;
    v_found integer := 0;
    v_n     integer;
BEGIN
    IF p_limit <= 0 THEN
        RETURN;
    END IF;
    SELECT CASE WHEN s.is_called THEN s.last_value ELSE 0 END INTO v_hi
      FROM awa.job_id_seq s;
    IF p_before IS NOT NULL THEN
        v_hi := LEAST(v_hi, p_before - 1);
    END IF;
    WHILE v_hi >= GREATEST(p_floor, 1) AND v_found < p_limit LOOP
        v_lo := GREATEST(v_hi - v_span + 1, p_floor, 1);
        RETURN QUERY
            SELECT j.* FROM awa.job_window(v_lo, v_hi) j
             WHERE (p_state IS NULL OR j.state = p_state)
               AND (p_queues IS NULL OR j.queue = ANY (p_queues))
               AND (p_kind IS NULL OR j.kind = p_kind)
               AND (p_priority IS NULL OR j.priority = p_priority)
               AND (p_tag IS NULL OR p_tag = ANY (j.tags))
             ORDER BY j.id DESC
             LIMIT p_limit - v_found;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_found := v_found + v_n;
        v_hi := v_lo - 1;
        v_span := v_span * 4;
    END LOOP;
END
$$;

-- awa.state_counts of any of p_queues (NULL: every queue), per queue and
-- state: each source is read once for all of them, not once per queue.
CREATE OR REPLACE FUNCTION awa.state_counts_v2(p_queues text[])
RETURNS TABLE (queue text, state text, n bigint)
LANGUAGE sql STABLE AS $$
    SELECT c.queue, c.state, sum(c.n)::bigint
      FROM (
        -- available: committed lane ranges beyond the cursor, less tombstones there
        SELECT s.queue, 'available'::text AS state,
               sum(s.end_seq - GREATEST(s.start_seq, h.claim_seq)) AS n
          FROM awa.ready_segments s
          JOIN awa.queue_claim_heads h
            ON h.queue = s.queue AND h.priority = s.priority AND h.shard = s.shard
         WHERE s.end_seq > h.claim_seq AND (p_queues IS NULL OR s.queue = ANY (p_queues))
         GROUP BY s.queue
        UNION ALL
        SELECT t.queue, 'available', -count(*)
          FROM awa.ready_tombstones t
          JOIN awa.queue_claim_heads h
            ON h.queue = t.queue AND h.priority = t.priority AND h.shard = t.shard
         WHERE t.lane_seq >= h.claim_seq AND (p_queues IS NULL OR t.queue = ANY (p_queues))
         GROUP BY t.queue
        UNION ALL
        -- running on a receipt: per claim batch, its items less the distinct
        -- items with closure evidence (index lookups per batch, instead of
        -- matching every item against every closure batch's array)
        SELECT b.queue, 'running',
               sum(cardinality(b.job_ids) - (
                   SELECT count(DISTINCT e.item)
                     FROM (SELECT unnest(y.items) AS item
                             FROM awa.lease_claim_closure_batches y
                            WHERE y.batch_id = b.batch_id AND y.claim_slot = b.claim_slot
                           UNION ALL
                           SELECT x.item
                             FROM awa.lease_claim_closures x
                            WHERE x.batch_id = b.batch_id AND x.claim_slot = b.claim_slot) e))
          FROM awa.lease_claim_batches b
         WHERE p_queues IS NULL OR b.queue = ANY (p_queues)
         GROUP BY b.queue
        UNION ALL
        SELECT l.queue, l.state, count(*)
          FROM awa.leases l
         WHERE p_queues IS NULL OR l.queue = ANY (p_queues)
         GROUP BY l.queue, l.state
        UNION ALL
        SELECT d.queue, d.state, count(*)
          FROM awa.deferred_jobs d
         WHERE p_queues IS NULL OR d.queue = ANY (p_queues)
         GROUP BY d.queue, d.state
        UNION ALL
        SELECT d.queue, d.state, count(*)
          FROM awa.done_entries d
         WHERE (p_queues IS NULL OR d.queue = ANY (p_queues))
           AND NOT EXISTS (SELECT 1 FROM awa.done_supersessions x
                            WHERE x.job_id = d.job_id AND x.run_lease = d.run_lease
                              AND x.finalized_at = d.finalized_at)
         GROUP BY d.queue, d.state
        UNION ALL
        SELECT b.queue, 'completed', sum(cardinality(b.job_ids))
          FROM awa.receipt_completion_batches b
         WHERE p_queues IS NULL OR b.queue = ANY (p_queues)
         GROUP BY b.queue
        UNION ALL
        SELECT r.queue, r.state, r.count
          FROM awa.queue_terminal_rollups r
         WHERE p_queues IS NULL OR r.queue = ANY (p_queues)
        UNION ALL
        SELECT q.queue, 'dlq', count(*)
          FROM awa.dlq_entries q
         WHERE p_queues IS NULL OR q.queue = ANY (p_queues)
         GROUP BY q.queue
      ) AS c
     GROUP BY c.queue, c.state
    HAVING sum(c.n) <> 0
$$;
