-- awa_django queue-storage substrate, version 1.
--
-- Installed by migration 0001 inside one transaction.  Every statement is
-- idempotent (IF NOT EXISTS / OR REPLACE / ON CONFLICT) and the whole file
-- runs under a transaction-scoped advisory lock, so two processes running
-- `migrate` at once serialise and the second one is a no-op.
--
-- Layout (see DESIGN.md "Storage"):
--   queue ring  ready_entries_N, ready_segments_N, ready_tombstones_N, done_entries_N,
--               receipt_completion_batches_N
--   claim ring  lease_claim_batches_N, lease_claim_closures_N,
--               lease_claim_closure_batches_N
--   lease ring  leases_N (+ attempt_state)
--   backlog     deferred_jobs, dlq_entries
--   control     queue_enqueue_heads, queue_claim_heads, queue_meta,
--               {queue,claim,lease}_ring_rotations, ring_config
-- Hot tables (ready, done, receipts, closures) are only ever appended to and
-- truncated slot by slot; nothing on the claim/complete path updates or
-- deletes their rows.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

CREATE SCHEMA IF NOT EXISTS awa;

CREATE TABLE IF NOT EXISTS awa.substrate_info (
    singleton      boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    schema_version integer NOT NULL,
    installed_at   timestamptz NOT NULL DEFAULT now()
);
INSERT INTO awa.substrate_info (schema_version) VALUES (1)
ON CONFLICT (singleton) DO UPDATE
    SET schema_version = GREATEST(awa.substrate_info.schema_version, EXCLUDED.schema_version);

-- Job ids are global and survive every state change (retry, DLQ round trip).
CREATE SEQUENCE IF NOT EXISTS awa.job_id_seq AS bigint;

-- ---------------------------------------------------------------------------
-- Control plane
-- ---------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS awa.queue_meta (
    queue          text PRIMARY KEY,
    enqueue_shards smallint NOT NULL DEFAULT 1 CHECK (enqueue_shards BETWEEN 1 AND 64),
    paused_at      timestamptz,
    updated_at     timestamptz NOT NULL DEFAULT now()
);

-- One row per lane (queue, priority, shard).  Producers UPDATE next_seq; the
-- row lock taken by that UPDATE is the transaction-scoped lane lock that
-- keeps seq N+1 from committing while N is still open.  A rollback undoes the
-- reservation, so committed lane sequences are gap-free.
CREATE TABLE IF NOT EXISTS awa.queue_enqueue_heads (
    queue    text     NOT NULL,
    priority smallint NOT NULL,
    shard    smallint NOT NULL,
    next_seq bigint   NOT NULL DEFAULT 1,
    PRIMARY KEY (queue, priority, shard)
);

-- Claim cursor per lane: every lane_seq below claim_seq has been claimed or
-- skipped.  Kept apart from the enqueue head so a long producer transaction
-- never blocks claimers (and claimers never block producers).
CREATE TABLE IF NOT EXISTS awa.queue_claim_heads (
    queue     text     NOT NULL,
    priority  smallint NOT NULL,
    shard     smallint NOT NULL,
    claim_seq bigint   NOT NULL DEFAULT 1,
    PRIMARY KEY (queue, priority, shard)
);

CREATE TABLE IF NOT EXISTS awa.ring_config (
    ring       text PRIMARY KEY CHECK (ring IN ('queue', 'claim', 'lease')),
    slot_count integer NOT NULL CHECK (slot_count BETWEEN 2 AND 256)
);

-- Append-only rotation ledgers: the current cursor is the max-generation row.
-- Rotation appends (generation + 1); the primary key makes that append a
-- compare-and-swap, so two rotators can never double-advance a ring.
CREATE TABLE IF NOT EXISTS awa.queue_ring_rotations (
    generation bigint PRIMARY KEY,
    slot       smallint NOT NULL,
    rotated_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS awa.claim_ring_rotations (LIKE awa.queue_ring_rotations INCLUDING ALL);
CREATE TABLE IF NOT EXISTS awa.lease_ring_rotations (LIKE awa.queue_ring_rotations INCLUDING ALL);
INSERT INTO awa.queue_ring_rotations (generation, slot) VALUES (0, 0) ON CONFLICT DO NOTHING;
INSERT INTO awa.claim_ring_rotations (generation, slot) VALUES (0, 0) ON CONFLICT DO NOTHING;
INSERT INTO awa.lease_ring_rotations (generation, slot) VALUES (0, 0) ON CONFLICT DO NOTHING;

-- ---------------------------------------------------------------------------
-- Queue ring (partitioned by ready_slot)
-- ---------------------------------------------------------------------------

-- One immutable row per runnable attempt.  A retried job comes back as a new
-- row (same job_id, higher run_lease).  attempt counts attempts already made.
CREATE TABLE IF NOT EXISTS awa.ready_entries (
    ready_slot       smallint    NOT NULL,
    ready_generation bigint      NOT NULL,
    queue            text        NOT NULL,
    priority         smallint    NOT NULL,
    shard            smallint    NOT NULL,
    lane_seq         bigint      NOT NULL,
    job_id           bigint      NOT NULL,
    kind             text        NOT NULL,
    args             json        NOT NULL,
    kwargs           json        NOT NULL,
    metadata         jsonb       NOT NULL DEFAULT '{}',
    tags             text[]      NOT NULL DEFAULT '{}',
    attempt          smallint    NOT NULL DEFAULT 0,
    max_attempts     smallint    NOT NULL,
    run_lease        bigint      NOT NULL DEFAULT 0,
    ordering_key     text,
    errors           jsonb,
    progress         jsonb,
    created_at       timestamptz NOT NULL,
    run_at           timestamptz NOT NULL,
    PRIMARY KEY (queue, priority, shard, lane_seq, ready_slot)
) PARTITION BY LIST (ready_slot);
-- Lookup by id (operators, get_job) without a btree entry per job: job ids
-- grow with insertion order, so a BRIN range index finds them cheaply.
CREATE INDEX IF NOT EXISTS ready_entries_job_id_brin ON awa.ready_entries
    USING brin (job_id) WITH (pages_per_range = 16, autosummarize = on);

-- Committed lane ranges [start_seq, end_seq) and the slot holding their rows.
-- Claim walks these from the lane's claim cursor; a range no segment covers
-- holds no job.
CREATE TABLE IF NOT EXISTS awa.ready_segments (
    ready_slot       smallint    NOT NULL,
    ready_generation bigint      NOT NULL,
    queue            text        NOT NULL,
    priority         smallint    NOT NULL,
    shard            smallint    NOT NULL,
    start_seq        bigint      NOT NULL,
    end_seq          bigint      NOT NULL,
    run_at           timestamptz NOT NULL,
    CHECK (end_seq > start_seq)
) PARTITION BY LIST (ready_slot);
CREATE INDEX IF NOT EXISTS ready_segments_lane_idx
    ON awa.ready_segments (queue, priority, shard, end_seq);

-- Marks an unclaimed ready row as spent (cancel, reprioritise) without
-- touching the row itself.
CREATE TABLE IF NOT EXISTS awa.ready_tombstones (
    ready_slot smallint    NOT NULL,
    queue      text        NOT NULL,
    priority   smallint    NOT NULL,
    shard      smallint    NOT NULL,
    lane_seq   bigint      NOT NULL,
    job_id     bigint      NOT NULL,
    reason     text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, priority, shard, lane_seq, ready_slot)
) PARTITION BY LIST (ready_slot);
CREATE INDEX IF NOT EXISTS ready_tombstones_job_id_idx ON awa.ready_tombstones (job_id);

-- Terminal facts.  Narrow when the ready row that produced the attempt is in
-- the same slot (lane columns point at it); the nullable body columns are
-- filled for self-contained rows (failed rows carried forward across prune).
CREATE TABLE IF NOT EXISTS awa.done_entries (
    ready_slot       smallint    NOT NULL,
    ready_generation bigint      NOT NULL,
    job_id           bigint      NOT NULL,
    run_lease        bigint      NOT NULL,
    state            text        NOT NULL CHECK (state IN ('completed', 'failed', 'cancelled')),
    queue            text        NOT NULL,
    priority         smallint,
    shard            smallint,
    lane_seq         bigint,
    attempt          smallint    NOT NULL,
    errors           jsonb,
    progress         jsonb,
    return_value     json,
    attempted_at     timestamptz,
    finalized_at     timestamptz NOT NULL DEFAULT now(),
    kind             text,
    args             json,
    kwargs           json,
    metadata         jsonb,
    tags             text[],
    max_attempts     smallint,
    created_at       timestamptz,
    run_at           timestamptz
) PARTITION BY LIST (ready_slot);
CREATE INDEX IF NOT EXISTS done_entries_job_id_idx ON awa.done_entries (job_id);

-- Compact terminal history of successful completions: one row per ready slot
-- per completion flush, parallel arrays per job.  Hydrated by terminal_jobs.
CREATE TABLE IF NOT EXISTS awa.receipt_completion_batches (
    ready_slot    smallint    NOT NULL,
    queue         text        NOT NULL,
    attempted_at  timestamptz NOT NULL,
    finalized_at  timestamptz NOT NULL DEFAULT now(),
    job_ids       bigint[]    NOT NULL,
    run_leases    bigint[]    NOT NULL,
    attempts      smallint[]  NOT NULL,
    priorities    smallint[]  NOT NULL,
    shards        smallint[]  NOT NULL,
    lane_seqs     bigint[]    NOT NULL,
    return_values text[]
) PARTITION BY LIST (ready_slot);

-- ---------------------------------------------------------------------------
-- Claim ring (receipt plane, partitioned by claim_slot)
-- ---------------------------------------------------------------------------

-- Receipts are compact: one row per claim transaction holds every attempt
-- it handed out as parallel arrays (item i = position i, 1-based).  An
-- attempt is identified by (claim_slot, batch_id, item) and carries its
-- (job_id, run_lease).  Closure evidence comes in two forms: explicit rows
-- for non-success outcomes and rescue, and one compact row per completion
-- flush listing the items it completed.  Every closer first locks the claim
-- batch row (FOR UPDATE), checks that the items have no evidence yet, then
-- writes: that lock is the run_lease guard.  Open receipts are the items
-- with no evidence (see awa.open_receipts).  A handful of rows per claim
-- batch instead of three per job keeps WAL per job low.
CREATE SEQUENCE IF NOT EXISTS awa.claim_batch_seq AS bigint;

CREATE TABLE IF NOT EXISTS awa.lease_claim_batches (
    claim_slot           smallint    NOT NULL,
    batch_id             bigint      NOT NULL,
    runtime_id           uuid        NOT NULL,
    queue                text        NOT NULL,
    claimed_at           timestamptz NOT NULL,
    deadline_at          timestamptz,
    job_ids              bigint[]    NOT NULL,
    run_leases           bigint[]    NOT NULL,
    attempts             smallint[]  NOT NULL,
    priorities           smallint[]  NOT NULL,
    effective_priorities smallint[]  NOT NULL,
    shards               smallint[]  NOT NULL,
    lane_seqs            bigint[]    NOT NULL,
    ready_slots          smallint[]  NOT NULL,
    PRIMARY KEY (batch_id, claim_slot)
) PARTITION BY LIST (claim_slot);

CREATE TABLE IF NOT EXISTS awa.lease_claim_closures (
    claim_slot smallint    NOT NULL,
    batch_id   bigint      NOT NULL,
    item       integer     NOT NULL,
    job_id     bigint      NOT NULL,
    run_lease  bigint      NOT NULL,
    outcome    text        NOT NULL,
    closed_at  timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (batch_id, item, claim_slot)
) PARTITION BY LIST (claim_slot);

CREATE TABLE IF NOT EXISTS awa.lease_claim_closure_batches (
    claim_slot smallint    NOT NULL,
    batch_id   bigint      NOT NULL,
    items      integer[]   NOT NULL,
    closed_at  timestamptz NOT NULL DEFAULT clock_timestamp()
) PARTITION BY LIST (claim_slot);
CREATE INDEX IF NOT EXISTS lease_claim_closure_batches_batch_idx
    ON awa.lease_claim_closure_batches (batch_id);

-- ---------------------------------------------------------------------------
-- Lease ring (materialised attempts that need mutable state)
-- ---------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS awa.leases (
    lease_slot          smallint    NOT NULL,
    lease_generation    bigint      NOT NULL,
    job_id              bigint      NOT NULL,
    run_lease           bigint      NOT NULL,
    claim_slot          smallint    NOT NULL,
    state               text        NOT NULL CHECK (state IN ('running', 'waiting_external')),
    runtime_id          uuid,
    heartbeat_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    deadline_at         timestamptz,
    callback_id         uuid,
    callback_timeout_at timestamptz,
    created_at          timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (job_id, run_lease, lease_slot)
) PARTITION BY LIST (lease_slot);
CREATE INDEX IF NOT EXISTS leases_callback_idx ON awa.leases (callback_id) WHERE callback_id IS NOT NULL;

CREATE TABLE IF NOT EXISTS awa.attempt_state (
    job_id          bigint      NOT NULL,
    run_lease       bigint      NOT NULL,
    progress        jsonb,
    callback_result json,
    updated_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, run_lease)
);

-- ---------------------------------------------------------------------------
-- Backlog and hold tables (plain tables, row-level cleanup)
-- ---------------------------------------------------------------------------

CREATE TABLE IF NOT EXISTS awa.deferred_jobs (
    job_id       bigint      PRIMARY KEY,
    state        text        NOT NULL CHECK (state IN ('scheduled', 'retryable')),
    queue        text        NOT NULL,
    priority     smallint    NOT NULL,
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
    attempted_at timestamptz
);
CREATE INDEX IF NOT EXISTS deferred_jobs_run_at_idx ON awa.deferred_jobs (run_at);
CREATE INDEX IF NOT EXISTS deferred_jobs_queue_idx ON awa.deferred_jobs (queue, state);

CREATE TABLE IF NOT EXISTS awa.dlq_entries (
    job_id       bigint      PRIMARY KEY,
    queue        text        NOT NULL,
    priority     smallint    NOT NULL,
    kind         text        NOT NULL,
    args         json        NOT NULL,
    kwargs       json        NOT NULL,
    metadata     jsonb       NOT NULL DEFAULT '{}',
    tags         text[]      NOT NULL DEFAULT '{}',
    attempt      smallint    NOT NULL,
    max_attempts smallint    NOT NULL,
    run_lease    bigint      NOT NULL,
    ordering_key text,
    errors       jsonb,
    progress     jsonb,
    reason       text        NOT NULL,
    created_at   timestamptz NOT NULL,
    run_at       timestamptz NOT NULL,
    attempted_at timestamptz,
    moved_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS dlq_entries_queue_idx ON awa.dlq_entries (queue, moved_at);
CREATE INDEX IF NOT EXISTS dlq_entries_kind_idx ON awa.dlq_entries (kind);

-- ---------------------------------------------------------------------------
-- Ring partitions
-- ---------------------------------------------------------------------------

CREATE OR REPLACE FUNCTION awa.ring_tables(p_ring text) RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_ring
        WHEN 'queue' THEN ARRAY['ready_entries', 'ready_segments', 'ready_tombstones', 'done_entries',
                                'receipt_completion_batches']
        WHEN 'claim' THEN ARRAY['lease_claim_batches', 'lease_claim_closures',
                                'lease_claim_closure_batches']
        WHEN 'lease' THEN ARRAY['leases']
    END
$$;

-- Create the child partitions of a ring for slots 0..p_slots-1 (never drops).
CREATE OR REPLACE FUNCTION awa.ensure_ring_partitions(p_ring text, p_slots integer) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_table text;
    v_slot  integer;
BEGIN
    IF awa.ring_tables(p_ring) IS NULL THEN
        RAISE EXCEPTION 'unknown ring %', p_ring USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH v_table IN ARRAY awa.ring_tables(p_ring) LOOP
        FOR v_slot IN 0 .. p_slots - 1 LOOP
            EXECUTE format(
                'CREATE TABLE IF NOT EXISTS awa.%I PARTITION OF awa.%I FOR VALUES IN (%s)',
                v_table || '_' || v_slot, v_table, v_slot);
        END LOOP;
    END LOOP;
    INSERT INTO awa.ring_config (ring, slot_count) VALUES (p_ring, p_slots)
    ON CONFLICT (ring) DO UPDATE SET slot_count = EXCLUDED.slot_count
     WHERE awa.ring_config.slot_count < EXCLUDED.slot_count;
END
$$;

SELECT awa.ensure_ring_partitions('queue', 16);
SELECT awa.ensure_ring_partitions('claim', 8);
SELECT awa.ensure_ring_partitions('lease', 8);

-- Empty every queue-storage table and restore the genesis ring cursors.
-- Discards every job: for test suites and demos, never for production.
CREATE OR REPLACE FUNCTION awa.reset_data() RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_tables text;
BEGIN
    -- Every table of the schema except the install record and ring sizes
    -- (partition parents truncate their children).
    SELECT string_agg(format('awa.%I', c.relname), ', ') INTO v_tables
      FROM pg_class c
      JOIN pg_namespace n ON n.oid = c.relnamespace
     WHERE n.nspname = 'awa' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
       AND c.relname NOT IN ('substrate_info', 'ring_config');
    EXECUTE 'TRUNCATE ' || v_tables;
    INSERT INTO awa.queue_ring_rotations (generation, slot) VALUES (0, 0);
    INSERT INTO awa.claim_ring_rotations (generation, slot) VALUES (0, 0);
    INSERT INTO awa.lease_ring_rotations (generation, slot) VALUES (0, 0);
END
$$;

-- ---------------------------------------------------------------------------
-- Enqueue
-- ---------------------------------------------------------------------------

-- NOTIFY channel of a queue.  Channel names are identifiers (63 bytes), queue
-- names may be longer, so long names are hashed.  Mirrored in
-- awa_django.storage.notify.queue_channel.
CREATE OR REPLACE FUNCTION awa.queue_channel(p_queue text) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN octet_length(p_queue) <= 59 THEN 'awa:' || p_queue
                ELSE 'awa:' || md5(p_queue) END
$$;

CREATE OR REPLACE FUNCTION awa.queue_ring_cursor(OUT slot smallint, OUT generation bigint)
LANGUAGE sql STABLE AS $$
    SELECT r.slot, r.generation FROM awa.queue_ring_rotations r ORDER BY r.generation DESC LIMIT 1
$$;

-- Lane shard for a job: 0 unless the queue has several enqueue shards; jobs
-- sharing an ordering key always land on the same shard, others spread by
-- the salt.
CREATE OR REPLACE FUNCTION awa.shard_for(p_shards integer, p_ordering_key text, p_salt bigint)
RETURNS smallint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (CASE
        WHEN p_shards IS NULL OR p_shards <= 1 THEN 0
        WHEN p_ordering_key IS NOT NULL THEN mod(abs(hashtext(p_ordering_key)::bigint), p_shards)
        ELSE mod(abs(p_salt), p_shards)
    END)::smallint
$$;

CREATE OR REPLACE FUNCTION awa.enqueue_shards(p_queue text) RETURNS integer
LANGUAGE sql STABLE AS $$
    SELECT COALESCE((SELECT m.enqueue_shards FROM awa.queue_meta m WHERE m.queue = p_queue), 1)
$$;

-- Reserve p_count consecutive sequence numbers on a lane and return the first.
-- The UPDATE's row lock is held until the caller's transaction ends: that is
-- the lane lock.  A new lane is created on first use (in the caller's
-- transaction, so a rollback removes it again).
CREATE OR REPLACE FUNCTION awa.reserve_lane(
    p_queue text, p_priority smallint, p_shard smallint, p_count integer)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_first bigint;
BEGIN
    UPDATE awa.queue_enqueue_heads h SET next_seq = h.next_seq + p_count
     WHERE h.queue = p_queue AND h.priority = p_priority AND h.shard = p_shard
    RETURNING h.next_seq - p_count INTO v_first;
    IF NOT FOUND THEN
        INSERT INTO awa.queue_claim_heads (queue, priority, shard)
        VALUES (p_queue, p_priority, p_shard) ON CONFLICT DO NOTHING;
        INSERT INTO awa.queue_enqueue_heads (queue, priority, shard)
        VALUES (p_queue, p_priority, p_shard) ON CONFLICT DO NOTHING;
        UPDATE awa.queue_enqueue_heads h SET next_seq = h.next_seq + p_count
         WHERE h.queue = p_queue AND h.priority = p_priority AND h.shard = p_shard
        RETURNING h.next_seq - p_count INTO v_first;
    END IF;
    RETURN v_first;
END
$$;

-- Single-job enqueue in one round trip.  Future run_at goes to deferred_jobs;
-- everything else is appended to the current ready slot under the lane lock,
-- with its one-job segment, and the queue channel is notified (delivered at
-- commit).
CREATE OR REPLACE FUNCTION awa.enqueue_job(
    p_queue text, p_priority smallint, p_kind text, p_args json, p_kwargs json,
    p_metadata jsonb, p_tags text[], p_max_attempts smallint, p_run_at timestamptz,
    p_ordering_key text,
    OUT job_id bigint, OUT state text, OUT run_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_shard smallint;
    v_seq   bigint;
    v_slot  smallint;
    v_gen   bigint;
BEGIN
    job_id := nextval('awa.job_id_seq');
    IF p_run_at IS NOT NULL AND p_run_at > clock_timestamp() THEN
        state := 'scheduled';
        run_at := p_run_at;
        INSERT INTO awa.deferred_jobs (job_id, state, queue, priority, kind, args, kwargs,
                                       metadata, tags, max_attempts, ordering_key,
                                       created_at, run_at)
        VALUES (job_id, state, p_queue, p_priority, p_kind, p_args, p_kwargs,
                p_metadata, p_tags, p_max_attempts, p_ordering_key, now(), run_at);
        RETURN;
    END IF;

    state := 'available';
    run_at := COALESCE(p_run_at, now());
    v_shard := awa.shard_for(awa.enqueue_shards(p_queue), p_ordering_key, job_id);
    v_seq := awa.reserve_lane(p_queue, p_priority, v_shard, 1);
    SELECT c.slot, c.generation INTO v_slot, v_gen FROM awa.queue_ring_cursor() c;
    INSERT INTO awa.ready_entries (ready_slot, ready_generation, queue, priority, shard,
                                   lane_seq, job_id, kind, args, kwargs, metadata, tags,
                                   max_attempts, ordering_key, created_at, run_at)
    VALUES (v_slot, v_gen, p_queue, p_priority, v_shard, v_seq, job_id, p_kind, p_args,
            p_kwargs, p_metadata, p_tags, p_max_attempts, p_ordering_key, now(), run_at);
    INSERT INTO awa.ready_segments (ready_slot, ready_generation, queue, priority, shard,
                                    start_seq, end_seq, run_at)
    VALUES (v_slot, v_gen, p_queue, p_priority, v_shard, v_seq, v_seq + 1, run_at);
    PERFORM pg_notify(awa.queue_channel(p_queue), '');
END
$$;

-- Place jobs in the ready ring: given each job's lane (queue, priority,
-- shard) in input order, reserve every lane's range once (lanes in a fixed
-- order, so concurrent batch producers cannot deadlock on each other), read
-- the ring cursor only after those reservations (they may wait), append one
-- segment per lane, notify each queue once, and return per input position
-- the lane_seq and ready slot/generation the caller writes the row with.
-- Shared by the COPY path and deferred promotion.
CREATE OR REPLACE FUNCTION awa.place_ready(
    p_queues text[], p_priorities smallint[], p_shards smallint[], p_run_ats timestamptz[])
RETURNS TABLE (n bigint, lane_seq bigint, ready_slot smallint, ready_generation bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_slot  smallint;
    v_gen   bigint;
    v_lane  record;
    l_queue text[] := '{}';
    l_prio  smallint[] := '{}';
    l_shard smallint[] := '{}';
    l_first bigint[] := '{}';
    l_count integer[] := '{}';
    l_runat timestamptz[] := '{}';
BEGIN
    FOR v_lane IN
        SELECT j.queue, j.priority, j.shard, count(*)::integer AS n,
               COALESCE(min(j.run_at), now()) AS run_at
          FROM unnest(p_queues, p_priorities, p_shards, p_run_ats) AS j(queue, priority, shard, run_at)
         GROUP BY j.queue, j.priority, j.shard
         ORDER BY j.queue, j.priority, j.shard
    LOOP
        l_queue := l_queue || v_lane.queue;
        l_prio := l_prio || v_lane.priority;
        l_shard := l_shard || v_lane.shard;
        l_first := l_first || awa.reserve_lane(v_lane.queue, v_lane.priority, v_lane.shard,
                                               v_lane.n);
        l_count := l_count || v_lane.n;
        l_runat := l_runat || v_lane.run_at;
    END LOOP;
    SELECT c.slot, c.generation INTO v_slot, v_gen FROM awa.queue_ring_cursor() c;
    INSERT INTO awa.ready_segments (ready_slot, ready_generation, queue, priority, shard,
                                    start_seq, end_seq, run_at)
    SELECT v_slot, v_gen, l.queue, l.priority, l.shard, l.first, l.first + l.n, l.run_at
      FROM unnest(l_queue, l_prio, l_shard, l_first, l_count, l_runat)
           AS l(queue, priority, shard, first, n, run_at);
    PERFORM pg_notify(awa.queue_channel(d.queue), '')
       FROM (SELECT DISTINCT unnest(p_queues)) AS d(queue);

    RETURN QUERY
    SELECT j.n,
           l.first + row_number() OVER (PARTITION BY j.queue, j.priority, j.shard ORDER BY j.n) - 1,
           v_slot, v_gen
      FROM unnest(p_queues, p_priorities, p_shards) WITH ORDINALITY AS j(queue, priority, shard, n)
      JOIN unnest(l_queue, l_prio, l_shard, l_first) AS l(queue, priority, shard, first)
        ON l.queue = j.queue AND l.priority = j.priority AND l.shard = j.shard;
END
$$;

-- Routing for a batch of immediate jobs (the COPY path): shards, lane
-- places and job ids per input position; the caller COPYs the rows in the
-- same transaction.
CREATE OR REPLACE FUNCTION awa.reserve_ready_batch(
    p_queues text[], p_priorities smallint[], p_ordering_keys text[])
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
      FROM awa.place_ready(p_queues, p_priorities, v_shards, NULL) AS p
     ORDER BY p.n;
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

-- Attempts with no closure evidence yet: what is running right now.
CREATE OR REPLACE VIEW awa.open_receipts AS
SELECT c.*
  FROM awa.claim_items c
 WHERE NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                    WHERE x.batch_id = c.batch_id AND x.item = c.item
                      AND x.claim_slot = c.claim_slot)
   AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                    WHERE y.batch_id = c.batch_id AND y.claim_slot = c.claim_slot
                      AND c.item = ANY (y.items));

-- Hydrated terminal history: narrow done rows and compact completion batches
-- joined back to the ready row that produced the attempt; self-contained
-- done rows (carried forward across prune) bring their own body.
CREATE OR REPLACE VIEW awa.terminal_jobs AS
SELECT d.job_id                                AS id,
       COALESCE(d.kind, r.kind)                AS kind,
       d.queue                                 AS queue,
       d.state                                 AS state,
       COALESCE(d.priority, r.priority)        AS priority,
       d.attempt                               AS attempt,
       COALESCE(d.max_attempts, r.max_attempts) AS max_attempts,
       d.run_lease                             AS run_lease,
       COALESCE(d.args, r.args)                AS args,
       COALESCE(d.kwargs, r.kwargs)            AS kwargs,
       COALESCE(d.metadata, r.metadata)        AS metadata,
       COALESCE(d.tags, r.tags)                AS tags,
       COALESCE(d.errors, r.errors)            AS errors,
       d.progress                              AS progress,
       d.return_value                          AS return_value,
       COALESCE(d.created_at, r.created_at)    AS created_at,
       COALESCE(d.run_at, r.run_at)            AS run_at,
       d.attempted_at                          AS attempted_at,
       d.finalized_at                          AS finalized_at,
       d.ready_slot                            AS ready_slot
  FROM awa.done_entries d
  LEFT JOIN awa.ready_entries r
    ON r.ready_slot = d.ready_slot AND r.queue = d.queue AND r.priority = d.priority
   AND r.shard = d.shard AND r.lane_seq = d.lane_seq
UNION ALL
SELECT c.job_id, r.kind, b.queue, 'completed'::text, c.priority, c.attempt, r.max_attempts,
       c.run_lease, r.args, r.kwargs, r.metadata, r.tags, r.errors, NULL::jsonb,
       c.return_value::json, r.created_at, r.run_at, b.attempted_at, b.finalized_at,
       b.ready_slot
  FROM awa.receipt_completion_batches b
 CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.attempts, b.priorities, b.shards,
                           b.lane_seqs, b.return_values)
       AS c(job_id, run_lease, attempt, priority, shard, lane_seq, return_value)
  LEFT JOIN awa.ready_entries r
    ON r.ready_slot = b.ready_slot AND r.queue = b.queue AND r.priority = c.priority
   AND r.shard = c.shard AND r.lane_seq = c.lane_seq;

-- Every job in every state, one row each.  A job's live row is exactly one
-- of: an unclaimed ready row at/after its lane cursor and not tombstoned
-- (available); an open receipt (running, or waiting_external when a lease
-- says so); a deferred row; a terminal row; a DLQ row.
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
SELECT c.job_id, r.kind, c.queue, COALESCE(l.state, 'running'), c.effective_priority,
       c.attempt, r.max_attempts, c.run_lease, r.args, r.kwargs, r.metadata,
       r.tags, r.errors, COALESCE(s.progress, r.progress), NULL::json, r.created_at,
       r.run_at, c.claimed_at, NULL::timestamptz
  FROM awa.open_receipts c
  JOIN awa.ready_entries r
    ON r.ready_slot = c.ready_slot AND r.queue = c.queue AND r.priority = c.priority
   AND r.shard = c.shard AND r.lane_seq = c.lane_seq
  LEFT JOIN awa.leases l ON l.job_id = c.job_id AND l.run_lease = c.run_lease
  LEFT JOIN awa.attempt_state s ON s.job_id = c.job_id AND s.run_lease = c.run_lease
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
  FROM awa.dlq_entries q;
