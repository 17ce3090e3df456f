-- The console's reads: descriptors, job windows, counts and the views.
--
-- Descriptors.  Workers upsert the labels of the queues and job kinds they
-- run at start and on every heartbeat, with a hash of the content, and
-- record the hashes they hold on their runtime_instances row.  A
-- descriptor is stale when no live runtime refreshed it lately and drifted
-- when live runtimes report different hashes (a deploy in progress).
--
-- Reads by id window.  awa.jobs is one view over every plane; filtering it
-- by id cannot use an index on the compact planes, which hold job ids in
-- arrays.  awa.job_window(lo, hi) returns the rows of awa.jobs with ids in
-- [lo, hi], each branch through an index: the BRIN on ready rows, the
-- btrees of the row planes, and an expression index on each batch's
-- highest id (awa.max_id: one entry per batch, not per job).
-- awa.job_page_matching walks windows down from the newest id, four times
-- wider each step, until it has a page; its filters (the search by
-- arguments included) apply to the rows of each window.
--
-- Counts from what the storage keeps.  The state counts take each state
-- from its cheapest exact source -- available from the segments beyond
-- each lane's claim cursor minus their tombstones, compact completions from
-- array lengths, pruned history from the rollups -- instead of counting
-- rows of the view.  awa.queue_state_counts counts one queue (or all),
-- awa.ring_state_counts a list of queues, and awa.state_counts adds the
-- jobs held for a concurrency slot, as available (as awa.jobs shows them).
--
-- The views (awa.jobs, awa.terminal_jobs) read every plane: the read side
-- of an append-only store.  A terminal row superseded by a retry or a DLQ
-- move (awa.done_supersessions) is hidden.

-- Schema version 4 added awa.job_page_matching (migration 0004_args_search)
-- and version 7 reads job_window's ready rows by id (0007_job_window_by_id);
-- both migrations run this file again, so it takes the substrate's lock
-- itself.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 7);

-- ---------------------------------------------------------------------------
-- Descriptors
-- ---------------------------------------------------------------------------
CREATE TABLE IF NOT EXISTS awa.queue_descriptors (
    name          text        PRIMARY KEY,
    display_name  text,
    description   text,
    owner         text,
    docs_url      text,
    tags          text[]      NOT NULL DEFAULT '{}',
    extra         jsonb       NOT NULL DEFAULT '{}',
    hash          text        NOT NULL,
    first_seen_at timestamptz NOT NULL DEFAULT now(),
    last_seen_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX IF NOT EXISTS queue_descriptors_seen_idx ON awa.queue_descriptors (last_seen_at);

-- The same labels for job kinds, plus the queue a kind runs on by default.
CREATE TABLE IF NOT EXISTS awa.job_kind_descriptors (LIKE awa.queue_descriptors INCLUDING ALL);
ALTER TABLE awa.job_kind_descriptors ADD COLUMN IF NOT EXISTS queue text;

-- ---------------------------------------------------------------------------
-- Queue samples (the console's charts)
-- ---------------------------------------------------------------------------

-- One row per queue per sample tick (the leader, about once a minute): the
-- counters of awa.queue_state_counts at that moment.  The dashboard draws the
-- last hour from these rows -- throughput is the difference of consecutive
-- cumulative counts -- so a chart never scans job history.  Rows older than
-- the caller's horizon are deleted by the same call: a small warm table.
CREATE TABLE IF NOT EXISTS awa.queue_samples (
    sampled_at timestamptz NOT NULL,
    queue      text        NOT NULL,
    counts     jsonb       NOT NULL,
    PRIMARY KEY (queue, sampled_at)
);

CREATE INDEX IF NOT EXISTS queue_samples_at_idx ON awa.queue_samples (sampled_at);

-- Upsert one runtime's descriptors (parallel arrays, one element each) and
-- record their hashes on its row.  p_kind is 'queue' or 'kind'.
CREATE OR REPLACE FUNCTION awa.sync_descriptors(
    p_runtime uuid, p_kind text, p_names text[], p_display text[], p_description text[],
    p_owner text[], p_docs text[], p_tags text[], p_extra text[], p_hash text[],
    p_queue text[])
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_n integer;
BEGIN
    IF p_kind = 'queue' THEN
        INSERT INTO awa.queue_descriptors AS d (name, display_name, description, owner,
                                                docs_url, tags, extra, hash)
        SELECT n, dn, de, o, u, ARRAY(SELECT jsonb_array_elements_text(t::jsonb)), COALESCE(x::jsonb, '{}'), h
          FROM unnest(p_names, p_display, p_description, p_owner, p_docs, p_tags, p_extra,
                      p_hash) AS s(n, dn, de, o, u, t, x, h)
        ON CONFLICT (name) DO UPDATE
           SET display_name = EXCLUDED.display_name, description = EXCLUDED.description,
               owner = EXCLUDED.owner, docs_url = EXCLUDED.docs_url, tags = EXCLUDED.tags,
               extra = EXCLUDED.extra, hash = EXCLUDED.hash, last_seen_at = now();
    ELSIF p_kind = 'kind' THEN
        INSERT INTO awa.job_kind_descriptors AS d (name, display_name, description, owner,
                                                   docs_url, tags, extra, hash, queue)
        SELECT n, dn, de, o, u, ARRAY(SELECT jsonb_array_elements_text(t::jsonb)), COALESCE(x::jsonb, '{}'), h, q
          FROM unnest(p_names, p_display, p_description, p_owner, p_docs, p_tags, p_extra,
                      p_hash, p_queue) AS s(n, dn, de, o, u, t, x, h, q)
        ON CONFLICT (name) DO UPDATE
           SET display_name = EXCLUDED.display_name, description = EXCLUDED.description,
               owner = EXCLUDED.owner, docs_url = EXCLUDED.docs_url, tags = EXCLUDED.tags,
               extra = EXCLUDED.extra, hash = EXCLUDED.hash, queue = EXCLUDED.queue,
               last_seen_at = now();
    ELSE
        RAISE EXCEPTION 'unknown descriptor kind %', p_kind USING ERRCODE = '22023';
    END IF;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    UPDATE awa.runtime_instances
       SET descriptor_hashes = jsonb_set(
               descriptor_hashes, ARRAY[p_kind],
               COALESCE((SELECT jsonb_object_agg(n, h) FROM unnest(p_names, p_hash) AS s(n, h)),
                        '{}'))
     WHERE id = p_runtime;
    RETURN v_n;
END
$$;

-- Descriptors of one catalog with their liveness: stale when no runtime
-- whose heartbeat is younger than p_staleness refreshed the row within
-- p_staleness; drifted when such runtimes hold more than one hash for it.
CREATE OR REPLACE FUNCTION awa.descriptor_status(p_kind text, p_staleness interval)
RETURNS TABLE (name text, display_name text, description text, owner text, docs_url text,
               tags text[], extra jsonb, hash text, queue text, first_seen_at timestamptz,
               last_seen_at timestamptz, stale boolean, drift boolean, live_hashes text[])
LANGUAGE sql STABLE AS $$
    WITH live AS (
        SELECT h.key AS name, array_agg(DISTINCT h.value ORDER BY h.value) AS hashes
          FROM awa.runtime_instances r
         CROSS JOIN LATERAL jsonb_each_text(COALESCE(r.descriptor_hashes -> p_kind, '{}')) h
         WHERE r.heartbeat_at > now() - p_staleness
         GROUP BY h.key),
    catalog AS (
        SELECT q.name, q.display_name, q.description, q.owner, q.docs_url, q.tags, q.extra,
               q.hash, NULL::text AS queue, q.first_seen_at, q.last_seen_at
          FROM awa.queue_descriptors q WHERE p_kind = 'queue'
        UNION ALL
        SELECT k.name, k.display_name, k.description, k.owner, k.docs_url, k.tags, k.extra,
               k.hash, k.queue, k.first_seen_at, k.last_seen_at
          FROM awa.job_kind_descriptors k WHERE p_kind = 'kind')
    SELECT c.name, c.display_name, c.description, c.owner, c.docs_url, c.tags, c.extra, c.hash,
           c.queue, c.first_seen_at, c.last_seen_at,
           l.name IS NULL OR c.last_seen_at <= now() - p_staleness,
           COALESCE(cardinality(l.hashes) > 1, false),
           COALESCE(l.hashes, '{}')
      FROM catalog c
      LEFT JOIN live l ON l.name = c.name
     ORDER BY c.name
$$;

CREATE OR REPLACE FUNCTION awa.cleanup_descriptors(p_retention interval)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_q integer;
    v_k integer;
BEGIN
    DELETE FROM awa.queue_descriptors WHERE last_seen_at < now() - p_retention;
    GET DIAGNOSTICS v_q = ROW_COUNT;
    DELETE FROM awa.job_kind_descriptors WHERE last_seen_at < now() - p_retention;
    GET DIAGNOSTICS v_k = ROW_COUNT;
    RETURN v_q + v_k;
END
$$;

-- ---------------------------------------------------------------------------
-- Reads by id window
-- ---------------------------------------------------------------------------

-- Highest element of an id array: the key of one index entry per batch.
CREATE OR REPLACE FUNCTION awa.max_id(p_ids bigint[])
RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT max(x) FROM unnest(p_ids) AS x
$$;

-- The rows of awa.jobs with ids in [p_lo, p_hi], every source read through
-- an index (see the header); held jobs show as available.  It repeats the
-- view branch by branch on purpose: an id filter on the view cannot reach
-- the batch planes' awa.max_id indexes.  The ready branch looks up each
-- row's claim cursor instead of joining the cursors: joined, the planner
-- drove the read from the cursors, one pass over each lane's ready rows per
-- cursor (a search that matched nothing read ~12 rows per id in the window);
-- looked up, the id range drives it and each row is read once.
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
     WHERE r.job_id BETWEEN p_lo AND p_hi
       AND r.lane_seq >= (SELECT h.claim_seq FROM awa.queue_claim_heads h
                           WHERE h.queue = r.queue AND h.priority = r.priority
                             AND h.shard = r.shard)
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
    SELECT l.job_id, r.kind, l.queue, awa.lease_state(l.state, l.callback_id, l.waiting_for),
           l.effective_priority, l.attempt, r.max_attempts,
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

-- ---------------------------------------------------------------------------
-- Counts
-- ---------------------------------------------------------------------------

-- Jobs per (queue, state) of any of p_queues (NULL: every queue), each state
-- from its cheapest exact source; states with no job are left out.  Each
-- source is read once for all the queues, not once per queue.
CREATE OR REPLACE FUNCTION awa.ring_state_counts(p_queues text[])
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
               sum(cardinality(b.job_ids)
                   - (SELECT k.closed FROM awa.claim_batch_closed(b.claim_slot, b.batch_id) k))
          FROM awa.lease_claim_batches b
         WHERE p_queues IS NULL OR b.queue = ANY (p_queues)
         GROUP BY b.queue
        UNION ALL
        SELECT l.queue, awa.lease_state(l.state, l.callback_id, l.waiting_for), count(*)
          FROM awa.leases l
         WHERE p_queues IS NULL OR l.queue = ANY (p_queues)
         GROUP BY 1, 2
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

-- awa.ring_state_counts of one queue (NULL: every queue).  A SQL function
-- over a SQL function: the planner inlines both, so this plans as the
-- counts' own body with the queue filled in.
CREATE OR REPLACE FUNCTION awa.queue_state_counts(p_queue text)
RETURNS TABLE (queue text, state text, n bigint)
LANGUAGE sql STABLE AS $$
    SELECT c.queue, c.state, c.n
      FROM awa.ring_state_counts(CASE WHEN p_queue IS NOT NULL THEN ARRAY[p_queue] END) c
$$;

CREATE OR REPLACE FUNCTION awa.sample_queues(p_keep interval)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_now timestamptz := date_trunc('second', now());
    v_n   integer;
BEGIN
    INSERT INTO awa.queue_samples (sampled_at, queue, counts)
    SELECT v_now, c.queue, jsonb_object_agg(c.state, c.n)
      FROM awa.queue_state_counts(NULL) c
     GROUP BY c.queue
    ON CONFLICT (queue, sampled_at) DO NOTHING;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    DELETE FROM awa.queue_samples WHERE sampled_at < v_now - p_keep;
    RETURN v_n;
END
$$;

-- One page of awa.jobs for the console's browser, newest id first: ids below
-- p_before (NULL: from the newest) and not below p_floor, every filter
-- applied.  p_queues: any of these queues (NULL: every queue).  p_args and
-- p_kwargs are jsonb containment on the job's arguments (args @> p_args,
-- kwargs @> p_kwargs; NULL: no filter): the search by arguments of
-- ops.browse_jobs, bounded by the same id windows as every other filter,
-- each window read through job_window's indexes and the arguments of its
-- rows compared there, never by scanning the history.
CREATE OR REPLACE FUNCTION awa.job_page_matching(
    p_before bigint, p_floor bigint, p_limit integer, p_state text, p_queues text[],
    p_kind text, p_priority smallint, p_tag text, p_args jsonb, p_kwargs jsonb)
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
               AND (p_args IS NULL OR j.args::jsonb @> p_args)
               AND (p_kwargs IS NULL OR j.kwargs::jsonb @> p_kwargs)
             ORDER BY j.id DESC
             LIMIT p_limit - v_found;
        GET DIAGNOSTICS v_n = ROW_COUNT;
        v_found := v_found + v_n;
        v_hi := v_lo - 1;
        v_span := v_span * 4;
    END LOOP;
END
$$;

-- The 0.1.0 console's page (no argument filter).  Kept for one release so a
-- web process of 0.1.0 keeps working during a rolling deploy; since schema
-- version 2 it is awa.job_page_matching without the argument filters.
CREATE OR REPLACE FUNCTION awa.job_page(
    p_before bigint, p_floor bigint, p_limit integer, p_state text, p_queues text[],
    p_kind text, p_priority smallint, p_tag text)
RETURNS TABLE (id bigint, kind text, queue text, state text, priority smallint,
               attempt smallint, max_attempts smallint, run_lease bigint, args json,
               kwargs json, metadata jsonb, tags text[], errors jsonb, progress jsonb,
               return_value json, created_at timestamptz, run_at timestamptz,
               attempted_at timestamptz, finalized_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN QUERY
        SELECT m.* FROM awa.job_page_matching(p_before, p_floor, p_limit, p_state, p_queues,
                                              p_kind, p_priority, p_tag, NULL, NULL) m;
END
$$;

-- awa.ring_state_counts plus the jobs held for a concurrency slot, as
-- available (as awa.jobs shows them).
CREATE OR REPLACE FUNCTION awa.state_counts(p_queues text[])
RETURNS TABLE (queue text, state text, n bigint)
LANGUAGE sql STABLE AS $$
    SELECT c.queue, c.state, sum(c.n)::bigint
      FROM (SELECT v.queue, v.state, v.n FROM awa.ring_state_counts(p_queues) v
            UNION ALL
            SELECT w.queue, 'available'::text, count(*)
              FROM awa.concurrency_waiting w
             WHERE p_queues IS NULL OR w.queue = ANY (p_queues)
             GROUP BY w.queue) AS c
     GROUP BY c.queue, c.state
$$;

CREATE INDEX IF NOT EXISTS receipt_completion_batches_max_id_idx
    ON awa.receipt_completion_batches (awa.max_id(job_ids));

CREATE INDEX IF NOT EXISTS lease_claim_batches_max_id_idx
    ON awa.lease_claim_batches (awa.max_id(job_ids));

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
 WHERE NOT EXISTS (SELECT 1 FROM awa.done_supersessions x
                    WHERE x.job_id = d.job_id AND x.run_lease = d.run_lease
                      AND x.finalized_at = d.finalized_at)
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

-- Every job, in every plane, in its current state; held jobs show as
-- available.
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
SELECT l.job_id, r.kind, l.queue, awa.lease_state(l.state, l.callback_id, l.waiting_for),
       l.effective_priority, l.attempt, r.max_attempts,
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
