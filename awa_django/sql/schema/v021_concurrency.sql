-- awa_django substrate, version 21: per-key concurrency limits.
--
-- A job whose metadata carries "awa:concurrency_key" (a string) and
-- "awa:concurrency_limit" (an integer, 1 when absent) runs only while
-- fewer than that many attempts of the same key are running anywhere in
-- the fleet.  Keys are global: every queue and kind naming a key shares its
-- slots.  The check happens in PostgreSQL, inside the claim.
--
-- Slots.  awa.concurrency_slots holds one row per (key, slot number),
-- created the first time a claim needs it; a row names the attempt that
-- holds it by its claim key (claim_slot, batch_id, item; job_id and
-- run_lease for its lease).  A slot is free when it names no attempt or
-- when the attempt it names is no longer open: its receipt has closure
-- evidence (or its claim slot was pruned, which needs closure evidence)
-- and no lease of (job_id, run_lease) lives.  Nothing has to give a slot
-- back: every close path -- completion, retry, snooze, failure, cancel,
-- rescue of a dead worker, deadline rescue, callback timeout -- already
-- writes the closure evidence that frees it, and an attempt that
-- materialised a lease (long runs, parked callbacks) keeps its slot for as
-- long as the lease lives.
--
-- Taking slots is one set-based statement per lane read: the free slots
-- of the keys among the candidates, locked FOR UPDATE SKIP LOCKED (a slot
-- another claim is taking or looking at is skipped, never waited for, so
-- claimers of other keys, other queues and even other slots of the same
-- key never wait for each other), and one UPDATE of the slot rows taken.
-- The slot rows are small and their indexed columns never change (HOT
-- updates); the table holds limit rows per key ever seen, not a row per
-- job.  The busy test runs inline in those statements (correlated
-- subplans started once per statement); awa.concurrency_slot_busy spells
-- the same test for diagnostics.  The claim turns JIT off for its own
-- transaction once it meets a key: the estimates of these statements
-- (a subplan per ring partition) would trigger a compilation that costs
-- far more than running them.
--
-- Held jobs.  A claimed candidate whose key has no free slot is not
-- handed out: its ready row stays behind the lane cursor like any claimed
-- row (the lane moves on, other keys behind it are claimed in the same
-- claim) and the job moves, body and all, to awa.concurrency_waiting.
-- The claim goes on reading its lanes until the batch is full or the lanes
-- are dry, holding at most max(100, 10 x batch) jobs per claim, and marks
-- the queue (queue_meta.holds_keyed).  The first step of every claim of a
-- marked queue that has held jobs is awa.release_concurrency: for the key
-- of the queue's oldest held job and the keys after it (at most 64 per
-- queue) it counts the free slots and puts that many of each key's oldest
-- held jobs back at the tail of their lanes, in the claim's own
-- transaction, so the same claim can take them.  Lanes a producer holds are skipped (SKIP
-- LOCKED on the enqueue heads, as promotion does); their jobs wait for a
-- later claim.  Each release matches a freed slot; a concurrent claim of a
-- fresh job of the same key can take the slot first, and the released job
-- is then held again.
--
-- Cost for jobs without a key: the candidates statement reads one jsonb
-- field per row; the claim of an unmarked queue reads the queue_meta row
-- the pause check reads, and takes no lock it did not take before.
-- Cost for keyed jobs: one slot row probed and updated per job; a held job
-- is written twice more (its waiting row and its second ready row) and
-- deleted once from the waiting table, which is a hold table like
-- deferred_jobs, not a ring.
--
-- * awa.claim_ready_v5 is awa.claim_ready_v2 with the slot check;
-- * awa.claim_ready_v6 is awa.claim_ready_v4 (stripes, nonce) over
--   version 5, releasing held jobs first; the worker calls it for striped
--   and unstriped queues alike (versions 3 and 4 stay for workers of the
--   previous release, which ignore keys);
-- * awa.queues_have_work counts held jobs as work (a burst worker stays
--   until they ran), awa.jobs and awa.job_window show them as available.
--
-- The down file puts held jobs back into their lanes, restores the
-- previous awa.jobs, awa.job_window and awa.queues_have_work and drops
-- what this version adds.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 21);

-- Set (never cleared) once a claim held a keyed job of the queue: only
-- such queues look for held jobs to release.  Adding it rewrites nothing.
ALTER TABLE awa.queue_meta ADD COLUMN IF NOT EXISTS holds_keyed boolean NOT NULL DEFAULT false;

CREATE TABLE IF NOT EXISTS awa.concurrency_slots (
    key         text        NOT NULL,
    slot        integer     NOT NULL,
    claim_slot  smallint,
    batch_id    bigint,
    item        integer,
    job_id      bigint,
    run_lease   bigint,
    claim_nonce bigint,
    taken_at    timestamptz,
    PRIMARY KEY (key, slot)
);
COMMENT ON TABLE awa.concurrency_slots IS
    'Per-key concurrency slots: the attempt holding each slot (free once that attempt is closed).';

CREATE TABLE IF NOT EXISTS awa.concurrency_waiting (
    key          text        NOT NULL,
    held_seq     bigint      GENERATED ALWAYS AS IDENTITY,
    limit_n      integer     NOT NULL,
    queue        text        NOT NULL,
    priority     smallint    NOT NULL,
    shard        smallint    NOT NULL,
    job_id       bigint      NOT NULL,
    kind         text        NOT NULL,
    args         json        NOT NULL,
    kwargs       json        NOT NULL,
    metadata     jsonb       NOT NULL DEFAULT '{}',
    tags         text[]      NOT NULL DEFAULT '{}',
    attempt      smallint    NOT NULL DEFAULT 0,
    max_attempts smallint    NOT NULL,
    run_lease    bigint      NOT NULL DEFAULT 0,
    ordering_key text,
    errors       jsonb,
    progress     jsonb,
    created_at   timestamptz NOT NULL,
    run_at       timestamptz NOT NULL,
    held_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id)
);
CREATE INDEX IF NOT EXISTS concurrency_waiting_queue_idx
    ON awa.concurrency_waiting (queue, held_seq);
-- A queue's keys in key order (the release's walk), each key's held jobs
-- oldest first.
CREATE INDEX IF NOT EXISTS concurrency_waiting_key_idx
    ON awa.concurrency_waiting (queue, key, held_seq);
COMMENT ON TABLE awa.concurrency_waiting IS
    'Jobs claimed while their concurrency key had no free slot, until a slot frees.';

-- The limit a job's metadata asks for: "awa:concurrency_limit" when it is
-- a number (clamped to 1..10000), else 1.
CREATE OR REPLACE FUNCTION awa.concurrency_limit(p_metadata jsonb) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN jsonb_typeof(p_metadata -> 'awa:concurrency_limit') = 'number'
                THEN LEAST(GREATEST(floor((p_metadata ->> 'awa:concurrency_limit')::numeric),
                                    1), 10000)::integer
                ELSE 1 END
$$;

-- Whether the slot row names an attempt that still runs: its receipt has
-- no closure evidence, or it materialised a lease that lives.  The claim
-- key names one attempt (batch ids are never reused), so neither the job
-- id arrays of the batch nor the nonce need reading.  p_batch is the
-- caller's own claim batch (not written yet): its items count as running.
-- The claim and the release spell this test out inline (a call per row
-- would start the function's statements once per slot).
CREATE OR REPLACE FUNCTION awa.concurrency_slot_busy(p_slot awa.concurrency_slots, p_batch bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT p_slot.job_id IS NOT NULL
       AND (p_slot.batch_id IS NOT DISTINCT FROM p_batch
            OR (EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                         WHERE b.batch_id = p_slot.batch_id AND b.claim_slot = p_slot.claim_slot)
                AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                                 WHERE x.batch_id = p_slot.batch_id AND x.item = p_slot.item
                                   AND x.claim_slot = p_slot.claim_slot)
                AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                                 WHERE y.batch_id = p_slot.batch_id
                                   AND y.claim_slot = p_slot.claim_slot
                                   AND p_slot.item = ANY (y.items)))
            OR EXISTS (SELECT 1 FROM awa.leases l
                        WHERE l.job_id = p_slot.job_id AND l.run_lease = p_slot.run_lease))
$$;

-- Put held jobs of p_queues back into their lanes, as many per key as the
-- key has free slots, oldest first, at most p_limit; returns how many.
-- The keys looked at: the key of each queue's oldest held job and the
-- keys after it in key order (wrapping around), at most 64 per queue, one
-- index probe each.  Lanes a producer holds are skipped, never waited for.
CREATE OR REPLACE FUNCTION awa.release_concurrency(p_queues text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_queue  text;
    v_first  text;
    v_key    text;
    k_keys   text[] := '{}';
    k_queues text[] := '{}';
    v_ids    bigint[];
    v_lanes  text[];
    v_rows   awa.concurrency_waiting[];
BEGIN
    FOREACH v_queue IN ARRAY p_queues LOOP
        SELECT w.key INTO v_first FROM awa.concurrency_waiting w
         WHERE w.queue = v_queue ORDER BY w.held_seq LIMIT 1;
        CONTINUE WHEN NOT FOUND;
        k_keys := k_keys || v_first;
        k_queues := k_queues || v_queue;
        v_key := v_first;
        FOR v_round IN 1 .. 63 LOOP
            SELECT w.key INTO v_key FROM awa.concurrency_waiting w
             WHERE w.queue = v_queue AND w.key > v_key ORDER BY w.key LIMIT 1;
            IF NOT FOUND THEN
                EXIT WHEN v_key >= v_first;  -- wrapped around already
                SELECT w.key INTO v_key FROM awa.concurrency_waiting w
                 WHERE w.queue = v_queue ORDER BY w.key LIMIT 1;
            END IF;
            EXIT WHEN v_key = v_first;
            k_keys := k_keys || v_key;
            k_queues := k_queues || v_queue;
        END LOOP;
    END LOOP;
    IF cardinality(k_keys) = 0 THEN
        RETURN 0;
    END IF;
    PERFORM set_config('jit', 'off', true);  -- see awa.claim_ready_v5

    -- Per key, its free slots under the limit of its oldest held job (slot
    -- rows not created yet count as free), then that many of its oldest
    -- held jobs, locked (a concurrent claim releasing them skips them).
    SELECT array_agg(j.job_id ORDER BY j.held_seq) INTO v_ids
      FROM unnest(k_keys, k_queues) AS k(key, queue)
     CROSS JOIN LATERAL (
           SELECT w.limit_n FROM awa.concurrency_waiting w
            WHERE w.queue = k.queue AND w.key = k.key ORDER BY w.held_seq LIMIT 1) o
     CROSS JOIN LATERAL (
           SELECT o.limit_n - count(*) AS free FROM awa.concurrency_slots s
            WHERE s.key = k.key AND s.slot < o.limit_n
              AND (s.job_id IS NOT NULL AND (s.batch_id IS NOT DISTINCT FROM NULL::bigint OR (
                      EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                               WHERE b.batch_id = s.batch_id AND b.claim_slot = s.claim_slot)
                      AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                                       WHERE x.batch_id = s.batch_id AND x.item = s.item
                                         AND x.claim_slot = s.claim_slot)
                      AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                                       WHERE y.batch_id = s.batch_id AND y.claim_slot = s.claim_slot
                                         AND s.item = ANY (y.items)))
                      OR EXISTS (SELECT 1 FROM awa.leases l
                                  WHERE l.job_id = s.job_id AND l.run_lease = s.run_lease)))) f
     CROSS JOIN LATERAL (
           SELECT w.job_id, w.held_seq FROM awa.concurrency_waiting w
            WHERE w.queue = k.queue AND w.key = k.key
            ORDER BY w.held_seq
            LIMIT GREATEST(f.free, 0)
              FOR UPDATE OF w SKIP LOCKED) j;
    IF v_ids IS NULL THEN
        RETURN 0;
    END IF;
    v_ids := v_ids[1:p_limit];

    -- The free lanes of those jobs, in one global order, never waiting.
    SELECT COALESCE(array_agg(l.lane), '{}') INTO v_lanes
      FROM (SELECT e.queue || E'\x1f' || e.priority || E'\x1f' || e.shard AS lane
              FROM awa.queue_enqueue_heads e
             WHERE (e.queue, e.priority, e.shard) IN (
                    SELECT w.queue, w.priority, w.shard FROM awa.concurrency_waiting w
                     WHERE w.job_id = ANY (v_ids))
             ORDER BY e.queue, e.priority, e.shard
               FOR UPDATE OF e SKIP LOCKED) AS l;

    WITH moved AS (
        DELETE FROM awa.concurrency_waiting w
         WHERE w.job_id = ANY (v_ids)
           AND w.queue || E'\x1f' || w.priority || E'\x1f' || w.shard = ANY (v_lanes)
        RETURNING w.*
    )
    SELECT array_agg(m ORDER BY m.held_seq) INTO v_rows FROM moved m;
    IF v_rows IS NULL THEN
        RETURN 0;
    END IF;
    -- Each job back in its own lane (the lane it was claimed from), due
    -- when it was, so it ages as before.
    INSERT INTO awa.ready_entries (ready_slot, ready_generation, queue, priority, shard, lane_seq,
                                   job_id, kind, args, kwargs, metadata, tags, attempt,
                                   max_attempts, run_lease, ordering_key, errors, progress,
                                   created_at, run_at)
    SELECT p.ready_slot, p.ready_generation, d.queue, d.priority, d.shard, p.lane_seq, d.job_id,
           d.kind, d.args, d.kwargs, d.metadata, d.tags, d.attempt, d.max_attempts, d.run_lease,
           d.ordering_key, d.errors, d.progress, d.created_at, d.run_at
      FROM unnest(v_rows) WITH ORDINALITY AS d
      JOIN awa.place_ready(
               ARRAY(SELECT x.queue FROM unnest(v_rows) WITH ORDINALITY AS x ORDER BY x.ordinality),
               ARRAY(SELECT x.priority FROM unnest(v_rows) WITH ORDINALITY AS x
                      ORDER BY x.ordinality),
               ARRAY(SELECT x.shard FROM unnest(v_rows) WITH ORDINALITY AS x
                      ORDER BY x.ordinality),
               ARRAY(SELECT x.run_at FROM unnest(v_rows) WITH ORDINALITY AS x
                      ORDER BY x.ordinality)) AS p
        ON p.n = d.ordinality;
    RETURN cardinality(v_rows);
END
$$;

-- Version 2's claim with the per-key slot check (see the header): a
-- candidate with a key is handed out only with a slot of its key; the
-- others move to awa.concurrency_waiting and do not count against p_max.
CREATE OR REPLACE FUNCTION awa.claim_ready_v5(
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
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);

    LOOP
        -- The best lane with work beyond its cursor (version 2).
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

-- awa.claim_ready_v4 over version 5, with held jobs released first (see
-- the header).  An unstriped queue passes itself as its only stripe.
CREATE OR REPLACE FUNCTION awa.claim_ready_v6(
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
    -- An unstriped queue's pause is checked by version 5 itself.
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
        SELECT * FROM awa.claim_ready_v5(v_stripe, v_left, p_runtime, p_deadline, p_aging);
        GET DIAGNOSTICS v_taken = ROW_COUNT;
        v_left := v_left - v_taken;
        EXIT WHEN v_left <= 0;
    END LOOP;
    PERFORM set_config('awa.claim_nonce', '', true);
END
$$;

-- awa.cancel_job, for held jobs too: a held job is a backlog row, cancelled
-- like a deferred one (a self-contained terminal row in the current slot).
CREATE OR REPLACE FUNCTION awa.cancel_job_v2(p_job_id bigint, p_reason text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_row    awa.concurrency_waiting;
    v_cursor record;
BEGIN
    DELETE FROM awa.concurrency_waiting w WHERE w.job_id = p_job_id RETURNING w.* INTO v_row;
    IF NOT FOUND THEN
        RETURN awa.cancel_job(p_job_id, p_reason);
    END IF;
    SELECT * INTO v_cursor FROM awa.queue_ring_cursor();
    INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                  queue, priority, attempt, errors, progress,
                                  attempted_at, kind, args, kwargs, metadata, tags,
                                  max_attempts, created_at, run_at)
    VALUES (v_cursor.slot, v_cursor.generation, v_row.job_id, v_row.run_lease, 'cancelled',
            v_row.queue, v_row.priority, v_row.attempt,
            awa.error_entry(v_row.errors, v_row.attempt, 'awa_django.cancelled',
                            p_reason)::jsonb,
            v_row.progress, NULL, v_row.kind, v_row.args, v_row.kwargs,
            v_row.metadata, v_row.tags, v_row.max_attempts, v_row.created_at, v_row.run_at);
    RETURN 'cancelled';
END
$$;

-- Version 2's test, plus held jobs (they run once a slot frees).
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

-- Version 15's window over every source (one job, a page of the console),
-- plus held jobs as available.
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
    UNION ALL
    SELECT w.job_id, w.kind, w.queue, 'available'::text, w.priority, w.attempt, w.max_attempts,
           w.run_lease, w.args, w.kwargs, w.metadata, w.tags, w.errors, w.progress, NULL::json,
           w.created_at, w.run_at, NULL::timestamptz, NULL::timestamptz
      FROM awa.concurrency_waiting w
     WHERE w.job_id BETWEEN p_lo AND p_hi
$$;

-- Version 11's view, plus held jobs as available.
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
  FROM awa.dlq_entries q
UNION ALL
SELECT w.job_id, w.kind, w.queue, 'available'::text, w.priority, w.attempt, w.max_attempts,
       w.run_lease, w.args, w.kwargs, w.metadata, w.tags, w.errors, w.progress, NULL::json,
       w.created_at, w.run_at, NULL::timestamptz, NULL::timestamptz
  FROM awa.concurrency_waiting w;
