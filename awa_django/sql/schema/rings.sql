-- The awa substrate: schema, control plane and the three rings.
--
-- Installed by migration 0001_initial, which runs the files of this folder
-- in dependency order inside one transaction; this one comes first and
-- takes the substrate's advisory lock, so two `migrate` runs at once
-- serialise.  Every statement is idempotent (IF NOT EXISTS, OR REPLACE,
-- ON CONFLICT), so running the files again changes nothing.
--
-- Storage is split by how rows live and die:
--   queue ring  ready_entries, ready_segments, ready_tombstones,
--               done_entries, receipt_completion_batches  (16 slots)
--   claim ring  lease_claim_batches, lease_claim_closures,
--               lease_claim_closure_batches               (8 slots)
--   lease ring  leases                                    (8 slots)
--   backlog     deferred_jobs, dlq_entries, attempt_state  (plain tables)
--   control     queue_meta, enqueue and claim heads, ring ledgers,
--               ring_config, ring_status, rollups, runtime_instances
--
-- The hot tables are append-only.  Claim, close and enqueue only ever
-- INSERT into them; a row is never updated or deleted, it becomes
-- irrelevant (a closure, a tombstone, a cursor moving past it) and goes
-- away with its whole slot, which maintenance empties with TRUNCATE once it
-- has proven that nothing can still reach it (maintenance.sql).  So the hot
-- path leaves no dead tuples for vacuum, and the cost of a job's history
-- is one file truncation per slot, not one DELETE per row.
--
-- A ring's cursor is the highest generation of its rotation ledger.
-- Rotating appends generation + 1; the primary key turns that append into a
-- compare-and-swap, so two rotators can never both advance a ring.  The slot
-- after the current one is the oldest sealed slot, the one prune empties.
--
-- Job ids come from one sequence and never change: a retry, a DLQ round
-- trip or a move to another queue keeps its id, and the attempt is told
-- apart by run_lease.

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
    updated_at     timestamptz NOT NULL DEFAULT now(),
    -- Set (never cleared) once a claim held a keyed job of the queue: only
    -- such queues look for held jobs to release (concurrency.sql).
    holds_keyed    boolean NOT NULL DEFAULT false
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
    created_at       timestamptz NOT NULL DEFAULT now(),
    run_at           timestamptz NOT NULL DEFAULT now(),
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
    -- Chosen by the claiming worker and passed through the transaction-local
    -- setting awa.claim_nonce (close.sql); closes must present it.
    claim_nonce          bigint DEFAULT NULLIF(current_setting('awa.claim_nonce', true), '')::bigint,
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
    -- The attempt's lane keys and ready slot: the queue ring keeps the job
    -- body while the lease lives (awa.queue_slot_busy checks them).
    queue              text,
    priority           smallint,
    effective_priority smallint,
    shard              smallint,
    lane_seq           bigint,
    ready_slot         smallint,
    attempt            smallint,
    claimed_at         timestamptz,
    batch_id           bigint,
    item               integer,
    claim_nonce        bigint,
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
    -- 'waiting': a dependent whose dependencies are not all done (dependencies.sql).
    state        text        NOT NULL CHECK (state IN ('scheduled', 'retryable', 'waiting')),
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

CREATE INDEX IF NOT EXISTS dlq_entries_moved_at_idx ON awa.dlq_entries (moved_at);

-- ---------------------------------------------------------------------------
-- Runtimes and maintenance state
-- ---------------------------------------------------------------------------

-- One row per live worker process: its heartbeat covers every receipt it
-- owns, so short jobs need no per-job liveness write.
CREATE TABLE IF NOT EXISTS awa.runtime_instances (
    id           uuid PRIMARY KEY,
    hostname     text        NOT NULL,
    pid          integer     NOT NULL,
    queues       text[]      NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT now(),
    heartbeat_at timestamptz NOT NULL DEFAULT now(),
    -- {"queue": {name: hash}, "kind": {name: hash}} of what the runtime declares.
    descriptor_hashes jsonb NOT NULL DEFAULT '{}',
    role text NOT NULL DEFAULT 'worker'
);

-- Permanent terminal counts of pruned queue slots.
CREATE TABLE IF NOT EXISTS awa.queue_terminal_rollups (
    queue text   NOT NULL,
    state text   NOT NULL CHECK (state IN ('completed', 'failed', 'cancelled')),
    count bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (queue, state)
);

-- Last outcome of each ring action, and how often it truncated.
CREATE TABLE IF NOT EXISTS awa.ring_status (
    ring          text        NOT NULL,
    action        text        NOT NULL CHECK (action IN ('rotate', 'prune')),
    outcome       text        NOT NULL,
    slot          smallint,
    generation    bigint,
    at            timestamptz NOT NULL DEFAULT now(),
    truncations   bigint      NOT NULL DEFAULT 0,
    rotations     bigint      NOT NULL DEFAULT 0,
    last_prune_exclusive_ms double precision,
    PRIMARY KEY (ring, action)
);

COMMENT ON COLUMN awa.lease_claim_batches.claim_nonce IS
    'Random number chosen by the claiming worker (awa.claim_ready passes it through the '
    'transaction-local setting awa.claim_nonce); closes must present it.';

COMMENT ON COLUMN awa.ring_status.last_prune_exclusive_ms IS
    'Milliseconds the last prune that got its ACCESS EXCLUSIVE lock held it, from the grant '
    'to the end of its TRUNCATE (commit not included); NULL before the first one.';


-- ---------------------------------------------------------------------------
-- Retrying a finished job: superseded terminal rows
-- ---------------------------------------------------------------------------

-- A terminal row that no longer describes its job (an operator retried the
-- job, or moved it to the DLQ).  Terminal rows are append-only ring rows, so
-- instead of removing one, it is listed here by (job_id, run_lease,
-- finalized_at) -- run_lease alone is not enough: a retry from the DLQ
-- starts the job's run_lease again from 0 -- and the read views skip it and
-- prune's fold does not count it.  Rows go with the queue-ring slot of the
-- terminal row they supersede.
CREATE TABLE IF NOT EXISTS awa.done_supersessions (
    job_id        bigint      NOT NULL,
    run_lease     bigint      NOT NULL,
    finalized_at  timestamptz NOT NULL,
    ready_slot    smallint    NOT NULL,
    reason        text        NOT NULL,
    superseded_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (job_id, run_lease, finalized_at)
);

CREATE INDEX IF NOT EXISTS done_supersessions_slot_idx ON awa.done_supersessions (ready_slot);

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

-- Create the child partitions of a ring for slots 0..p_slots-1 (never
-- drops), as the owner of the ring tables (see the header).
CREATE OR REPLACE FUNCTION awa.ensure_ring_partitions(p_ring text, p_slots integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_table text;
    v_slot  integer;
BEGIN
    IF awa.ring_tables(p_ring) IS NULL THEN
        RAISE EXCEPTION 'unknown ring %', p_ring USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_slots IS NULL OR p_slots NOT BETWEEN 2 AND 256 THEN
        RAISE EXCEPTION 'ring % cannot have % slots (2 to 256)', p_ring, p_slots
              USING ERRCODE = 'invalid_parameter_value';
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

-- The queue ring's current slot.  PL/pgSQL, not SQL: every single-job
-- enqueue asks, each in a transaction of its own, and a SQL function that
-- cannot be inlined (this one returns a record) is parsed and planned
-- again on each call, where PL/pgSQL keeps its plan for the session.
CREATE OR REPLACE FUNCTION awa.queue_ring_cursor(OUT slot smallint, OUT generation bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    SELECT r.slot, r.generation INTO slot, generation
      FROM awa.queue_ring_rotations r ORDER BY r.generation DESC LIMIT 1;
END
$$;

CREATE OR REPLACE FUNCTION awa.ring_lock_key(p_ring text) RETURNS bigint
LANGUAGE sql IMMUTABLE AS $$
    SELECT hashtextextended('awa_django.ring.' || p_ring, 0)
$$;

CREATE OR REPLACE FUNCTION awa.ring_cursor(p_ring text, OUT slot smallint, OUT generation bigint,
                                           OUT rotated_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    EXECUTE format('SELECT r.slot, r.generation, r.rotated_at FROM awa.%I r
                     ORDER BY r.generation DESC LIMIT 1', p_ring || '_ring_rotations')
       INTO slot, generation, rotated_at;
END
$$;

-- The default slot counts; a leader adds slots when a *_SLOT_COUNT setting grew.
SELECT awa.ensure_ring_partitions('queue', 16);
SELECT awa.ensure_ring_partitions('claim', 8);
SELECT awa.ensure_ring_partitions('lease', 8);

-- The claim and completion batch arrays and the job payloads of the hot
-- rings compress with lz4 where the server has it: pglz spent about 1.2 ms
-- on each 500-job completion row (as much on a claim row), lz4 a seventh of
-- that, and it decompresses faster.  Set on the parents and every
-- partition; partitions created later inherit it from their parent.
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
