-- Per-key concurrency: at most N running attempts of a key, fleet wide.
--
-- A job whose metadata carries "awa:concurrency_key" (and optionally
-- "awa:concurrency_limit", 1 by default) runs only while fewer than that
-- many attempts of its key are open anywhere.  The check is made inside
-- the claim, in PostgreSQL.
--
-- Slots.  awa.concurrency_slots holds one row per (key, slot number),
-- created when a claim first needs it; a taken slot names its attempt by
-- claim key (and job id and run_lease, for a lease).  A slot is free when
-- it names nothing or when its attempt is no longer open.  Nothing ever
-- hands a slot back: every way an attempt ends already writes the closure
-- evidence that frees it, and an attempt that escalated to a lease keeps
-- its slot for as long as the lease lives.  Taking slots is one set-based
-- statement per lane read, FOR UPDATE SKIP LOCKED, so claimers never wait
-- for each other over a slot; the rows are small and their indexed columns
-- never change (HOT updates).  awa.concurrency_slot_busy spells the busy
-- test the claim inlines, for diagnostics.  The claim switches JIT off once
-- it meets a key: the planner's estimates for these statements would buy a
-- compilation that costs far more than running them.
--
-- Held jobs.  A candidate whose key has no free slot is not handed out: the
-- lane moves past it and the job, body and all, moves to
-- awa.concurrency_waiting (a hold table, like deferred_jobs), and the queue
-- is marked (queue_meta.holds_keyed).  A claim of a marked queue that has
-- held jobs first calls awa.release_concurrency: for each key with free
-- slots, that many of its oldest held jobs go back to the tail of their
-- lanes in the claim's own transaction, so the same claim can take them.
-- Lanes a producer holds are skipped (SKIP LOCKED), as promotion does.
--
-- A job without a key costs one jsonb field read per candidate, and the
-- claim of an unmarked queue takes no lock it would not take anyway.

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

-- The payload columns repeat awa.deferred_jobs' on purpose: a held job goes
-- back to its lane from this row alone, and the keys and states differ.
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
    PERFORM set_config('jit', 'off', true);  -- see the header

    -- Per key, its free slots under the limit of its oldest held job (slot
    -- rows not created yet count as free), then that many of its oldest
    -- held jobs, locked (a concurrent claim releasing them skips them).
    -- Busy is awa.concurrency_slot_busy written out (see its comment).
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
