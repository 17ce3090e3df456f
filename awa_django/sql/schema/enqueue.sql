-- Enqueue: lanes, segments and unique jobs.
--
-- A lane is (queue, priority, shard).  A producer reserves lane positions
-- by updating the lane's row in queue_enqueue_heads; the row lock it takes
-- holds back every other producer of that lane until it commits, so
-- committed lane sequences have no gaps and a claimer that reads up to the
-- committed end never skips a row that commits later.  A rollback undoes
-- the reservation with it.  Queues that carry a lot of producers spread
-- over several enqueue shards (queue_meta.enqueue_shards): each shard is a
-- lane of its own, chosen by hash of the ordering key when there is one,
-- so jobs that share an ordering key keep their order.
--
-- Every reservation writes its rows into the current queue-ring slot and
-- one ready_segments row per run of positions [start_seq, end_seq) that
-- share a millisecond of run_at, stamped with the oldest run_at of the run.
-- Claims read segments, never the ready rows themselves, to find work, and
-- claim-time aging reads a lane's age from its head segment, so that stamp
-- is what makes aging exact.  Batches (`bulk_enqueue`, COPY) reserve once
-- per lane with awa.reserve_ready_batch / awa.reserve_ready_run and write
-- the rows themselves.
--
-- Schema version 9 gives awa.enqueue_shards and awa.queue_ring_cursor
-- (rings.sql) PL/pgSQL bodies, so a single enqueue plans nothing after the
-- first in a session (migration 0009_cached_plans runs both files again).
-- Schema version 10 moves the bodies of awa.enqueue_job and
-- awa.enqueue_unique to awa.enqueue_job_with_id and
-- awa.enqueue_unique_with_id, which take the job's id first (NULL: draw
-- one), for the outbox relay, which writes jobs under the ids their
-- producers reserved; the released functions call them with NULL
-- (migration 0011_outbox runs this file again).
--
-- Unique jobs.  awa.enqueue_unique takes a claim on the key (a hash the
-- producer computes) in awa.unique_claims.  The claim names its job and the
-- states in which it holds, and lapses by itself once the job leaves those
-- states: the next enqueue with the key reads the holder's state and takes
-- the claim over.  No completion, cancel or DLQ move has to know about
-- uniqueness.  A duplicate never raises: the holder's id comes back and
-- nothing is written, so the producer's transaction stays usable.
-- Producers of one key serialise on its claim row.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 10);

CREATE TABLE IF NOT EXISTS awa.unique_claims (
    unique_key text        PRIMARY KEY,
    job_id     bigint      NOT NULL,
    states     text[]      NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS unique_claims_claimed_at_idx ON awa.unique_claims (claimed_at);

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

-- PL/pgSQL for the reason awa.queue_ring_cursor is (rings.sql): a SQL
-- function with a subquery is not inlined, so it would be planned again on
-- every enqueue.
CREATE OR REPLACE FUNCTION awa.enqueue_shards(p_queue text) RETURNS integer
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN COALESCE((SELECT m.enqueue_shards FROM awa.queue_meta m WHERE m.queue = p_queue), 1);
END
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
-- commit).  p_job_id: the job's id, or NULL for the next of awa.job_id_seq.
CREATE OR REPLACE FUNCTION awa.enqueue_job_with_id(
    p_job_id bigint, p_queue text, p_priority smallint, p_kind text, p_args json,
    p_kwargs json, p_metadata jsonb, p_tags text[], p_max_attempts smallint,
    p_run_at timestamptz, p_ordering_key text,
    OUT job_id bigint, OUT state text, OUT run_at timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    v_shard smallint;
    v_seq   bigint;
    v_slot  smallint;
    v_gen   bigint;
BEGIN
    job_id := COALESCE(p_job_id, nextval('awa.job_id_seq'));
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

-- awa.enqueue_job under a new id (the signature producers call).
CREATE OR REPLACE FUNCTION awa.enqueue_job(
    p_queue text, p_priority smallint, p_kind text, p_args json, p_kwargs json,
    p_metadata jsonb, p_tags text[], p_max_attempts smallint, p_run_at timestamptz,
    p_ordering_key text,
    OUT job_id bigint, OUT state text, OUT run_at timestamptz)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT e.job_id, e.state, e.run_at INTO job_id, state, run_at
      FROM awa.enqueue_job_with_id(NULL::bigint, p_queue, p_priority, p_kind, p_args,
                                   p_kwargs, p_metadata, p_tags, p_max_attempts, p_run_at,
                                   p_ordering_key) AS e;
END
$$;

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

-- p_job_id: the job's id if it is written, or NULL for a new one.
CREATE OR REPLACE FUNCTION awa.enqueue_unique_with_id(
    p_job_id bigint, p_unique_key text, p_states text[], p_queue text, p_priority smallint,
    p_kind text, p_args json, p_kwargs json, p_metadata jsonb, p_tags text[],
    p_max_attempts smallint, p_run_at timestamptz, p_ordering_key text,
    OUT job_id bigint, OUT state text, OUT run_at timestamptz, OUT existing_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_holder bigint;
    v_states text[];
    v_state  text;
BEGIN
    INSERT INTO awa.unique_claims AS c (unique_key, job_id, states)
    VALUES (p_unique_key, 0, p_states)
    ON CONFLICT (unique_key) DO NOTHING;
    IF NOT FOUND THEN
        SELECT c.job_id, c.states INTO v_holder, v_states
          FROM awa.unique_claims c
         WHERE c.unique_key = p_unique_key
           FOR UPDATE;
        SELECT j.state INTO v_state FROM awa.jobs j WHERE j.id = v_holder;
        IF v_state = ANY (v_states) THEN
            existing_id := v_holder;
            RETURN;
        END IF;
    END IF;
    SELECT e.job_id, e.state, e.run_at INTO job_id, state, run_at
      FROM awa.enqueue_job_with_id(p_job_id, p_queue, p_priority, p_kind, p_args, p_kwargs,
                                   p_metadata, p_tags, p_max_attempts, p_run_at,
                                   p_ordering_key) AS e;
    UPDATE awa.unique_claims c
       SET job_id = enqueue_unique_with_id.job_id, states = p_states, claimed_at = now()
     WHERE c.unique_key = p_unique_key;
END
$$;

-- awa.enqueue_unique under a new id (the signature producers call).
CREATE OR REPLACE FUNCTION awa.enqueue_unique(
    p_unique_key text, p_states text[], p_queue text, p_priority smallint, p_kind text,
    p_args json, p_kwargs json, p_metadata jsonb, p_tags text[], p_max_attempts smallint,
    p_run_at timestamptz, p_ordering_key text,
    OUT job_id bigint, OUT state text, OUT run_at timestamptz, OUT existing_id bigint)
LANGUAGE plpgsql AS $$
BEGIN
    SELECT e.job_id, e.state, e.run_at, e.existing_id INTO job_id, state, run_at, existing_id
      FROM awa.enqueue_unique_with_id(NULL::bigint, p_unique_key, p_states, p_queue,
                                      p_priority, p_kind, p_args, p_kwargs, p_metadata, p_tags,
                                      p_max_attempts, p_run_at, p_ordering_key) AS e;
END
$$;

-- awa.reserve_ready_batch with each job's run_at (NULL: due now), so the
-- segments age from the rows' own due times.
CREATE OR REPLACE FUNCTION awa.reserve_ready_batch(
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

-- Reserve p_count lane positions and job ids for jobs of one queue and
-- priority that are due now, on a queue with a single enqueue shard; no row
-- for a queue with several (the caller then uses reserve_ready_batch,
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
