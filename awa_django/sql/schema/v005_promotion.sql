-- awa_django substrate, version 5: promotion never waits on a producer.
--
-- awa.promote_due (version 2) reserves lane ranges with awa.reserve_lane,
-- which waits, with no timeout, on the lane's enqueue head: a producer's
-- open transaction on that lane stalled promotion of every queue, the lanes
-- the promoter already held stalled other producers in turn, and producers
-- locking lanes in another order could deadlock with it.
--
-- awa.promote_due_skip_busy locks the enqueue heads of the lanes it wants in
-- one global order (queue, priority, shard) with SKIP LOCKED.  Jobs of a lane
-- a producer holds stay in deferred_jobs until a later tick; the rest are
-- promoted now.  Up to four rounds per call re-select due jobs outside the
-- lanes found busy, so a busy lane at the head of the due list cannot starve
-- the others.  Creating a lane that does not exist yet can meet a producer
-- creating the same lane; a short lock_timeout bounds that wait and the lane
-- counts as busy.
--
-- awa.promote_due stays for workers of the previous release (a deploy runs
-- both) and is dropped by a later version.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 5);

CREATE OR REPLACE FUNCTION awa.promote_due_skip_busy(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_busy     text[] := '{}';
    v_promoted integer := 0;
    v_ids      bigint[];
    v_shards   smallint[];
    v_free     text[];
    v_skipped  integer;
    v_rows     awa.deferred_jobs[];
    v_lane     record;
BEGIN
    PERFORM set_config('lock_timeout', '20ms', true);
    FOR v_round IN 1..4 LOOP
        EXIT WHEN v_promoted >= p_limit;
        -- Due jobs outside the lanes already found busy, each with its lane.
        SELECT array_agg(c.job_id ORDER BY c.run_at, c.job_id),
               array_agg(c.shard ORDER BY c.run_at, c.job_id)
          INTO v_ids, v_shards
          FROM (SELECT d.job_id, d.run_at, d.queue, d.priority,
                       awa.shard_for(m.enqueue_shards, d.ordering_key, d.job_id) AS shard
                  FROM awa.deferred_jobs d
                  LEFT JOIN awa.queue_meta m ON m.queue = d.queue
                 WHERE d.run_at <= clock_timestamp()
                   AND NOT (d.queue || E'\x1f' || d.priority || E'\x1f'
                            || awa.shard_for(m.enqueue_shards, d.ordering_key, d.job_id)
                            = ANY (v_busy))
                 ORDER BY d.run_at, d.job_id
                 LIMIT p_limit - v_promoted
                   FOR UPDATE OF d SKIP LOCKED) AS c;
        EXIT WHEN v_ids IS NULL;

        -- Lanes used for the first time get their heads.  Only absent heads
        -- are inserted (ON CONFLICT on a head a producer is updating would
        -- wait for that producer), each in its own subtransaction: a lane a
        -- producer is creating right now makes its insert time out, and the
        -- lane is simply not free this round.
        FOR v_lane IN
            SELECT DISTINCT d.queue, d.priority, s.shard
              FROM unnest(v_ids, v_shards) AS s(job_id, shard)
              JOIN awa.deferred_jobs d ON d.job_id = s.job_id
             WHERE NOT EXISTS (SELECT 1 FROM awa.queue_enqueue_heads h
                                WHERE h.queue = d.queue AND h.priority = d.priority
                                  AND h.shard = s.shard)
             ORDER BY 1, 2, 3
        LOOP
            BEGIN
                INSERT INTO awa.queue_claim_heads (queue, priority, shard)
                VALUES (v_lane.queue, v_lane.priority, v_lane.shard) ON CONFLICT DO NOTHING;
                INSERT INTO awa.queue_enqueue_heads (queue, priority, shard)
                VALUES (v_lane.queue, v_lane.priority, v_lane.shard) ON CONFLICT DO NOTHING;
            EXCEPTION WHEN lock_not_available THEN
                NULL;  -- being created by a producer: busy
            END;
        END LOOP;

        -- Take the free lanes, in one global order, never waiting.
        SELECT COALESCE(array_agg(l.key), '{}') INTO v_free
          FROM (SELECT h.queue || E'\x1f' || h.priority || E'\x1f' || h.shard AS key
                  FROM awa.queue_enqueue_heads h
                 WHERE (h.queue, h.priority, h.shard) IN (
                        SELECT d.queue, d.priority, s.shard
                          FROM unnest(v_ids, v_shards) AS s(job_id, shard)
                          JOIN awa.deferred_jobs d ON d.job_id = s.job_id)
                 ORDER BY h.queue, h.priority, h.shard
                   FOR UPDATE OF h SKIP LOCKED) AS l;

        WITH due AS (
            DELETE FROM awa.deferred_jobs d
             USING unnest(v_ids, v_shards) AS s(job_id, shard)
             WHERE d.job_id = s.job_id
               AND d.queue || E'\x1f' || d.priority || E'\x1f' || s.shard = ANY (v_free)
            RETURNING d.*
        )
        SELECT array_agg(due ORDER BY due.run_at, due.job_id) INTO v_rows FROM due;

        v_skipped := cardinality(v_ids) - COALESCE(cardinality(v_rows), 0);
        IF v_rows IS NOT NULL THEN
            PERFORM awa.place_deferred(v_rows);
            v_promoted := v_promoted + cardinality(v_rows);
        END IF;
        EXIT WHEN v_skipped = 0;
        -- Remember the busy lanes for the next round.
        SELECT v_busy || COALESCE(array_agg(DISTINCT k.key), '{}') INTO v_busy
          FROM (SELECT d.queue || E'\x1f' || d.priority || E'\x1f' || s.shard AS key
                  FROM unnest(v_ids, v_shards) AS s(job_id, shard)
                  JOIN awa.deferred_jobs d ON d.job_id = s.job_id) AS k
         WHERE NOT k.key = ANY (v_free);
    END LOOP;
    RETURN v_promoted;
END
$$;

-- Append deferred rows (already deleted from deferred_jobs by the caller)
-- to the ready ring, lane by lane; the caller holds every lane they use.
CREATE OR REPLACE FUNCTION awa.place_deferred(p_rows awa.deferred_jobs[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_shards smallint[];
BEGIN
    SELECT array_agg(awa.shard_for(m.enqueue_shards, d.ordering_key, d.job_id) ORDER BY d.ordinality)
      INTO v_shards
      FROM unnest(p_rows) WITH ORDINALITY AS d
      LEFT JOIN awa.queue_meta m ON m.queue = d.queue;

    INSERT INTO awa.ready_entries (ready_slot, ready_generation, queue, priority, shard, lane_seq,
                                   job_id, kind, args, kwargs, metadata, tags, attempt,
                                   max_attempts, run_lease, ordering_key, errors, progress,
                                   created_at, run_at)
    SELECT p.ready_slot, p.ready_generation, d.queue, d.priority, v_shards[d.ordinality],
           p.lane_seq, d.job_id, d.kind, d.args, d.kwargs, d.metadata, d.tags, d.attempt,
           d.max_attempts, d.run_lease, d.ordering_key, d.errors, d.progress, d.created_at,
           d.run_at
      FROM unnest(p_rows) WITH ORDINALITY AS d
      JOIN awa.place_ready(
               ARRAY(SELECT x.queue FROM unnest(p_rows) WITH ORDINALITY AS x ORDER BY x.ordinality),
               ARRAY(SELECT x.priority FROM unnest(p_rows) WITH ORDINALITY AS x
                      ORDER BY x.ordinality),
               v_shards,
               ARRAY(SELECT x.run_at FROM unnest(p_rows) WITH ORDINALITY AS x
                      ORDER BY x.ordinality)) AS p
        ON p.n = d.ordinality;
END
$$;
