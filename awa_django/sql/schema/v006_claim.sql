-- awa_django substrate, version 6: a claim that locks one lane at a time
-- and costs what its batch costs, not what the backlog costs.
--
-- awa.claim_ready (version 2) aggregated every segment beyond each lane's
-- cursor (min run_at, the distinct slots) before choosing a lane, and locked
-- up to every lane of the queue with one FOR UPDATE SKIP LOCKED: with single
-- enqueues writing one segment per job, a 1-job claim cost 1.3 ms over a
-- 50-job backlog and 20-30 ms over 50,000, and a second claimer found every
-- lane held by the first.  awa.claim_ready_v2:
--
-- * picks one lane per step (ORDER BY ... LIMIT 1 FOR UPDATE SKIP LOCKED)
--   and locks only it; a lane it has visited is not visited again;
-- * probes the lane head with the first segment beyond the cursor, and
--   reads only the segments that can hold the next rows it wants (LIMIT);
-- * plans its statements with their actual values (force_custom_plan), so
--   only the ring partitions it reads are locked.
--
-- Same arguments and result as awa.claim_ready, which stays for workers of
-- the previous release and is dropped by a later version.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 6);

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
    v_deadline   timestamptz;
    v_claim_slot smallint;
    v_batch      bigint;
    v_lane       record;
    v_left       integer := p_max;
    v_visited    integer[] := '{}';
    v_upto       bigint;
    v_slots      smallint[];
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
                   WHEN p_aging > interval '0'
                   THEN floor(extract(epoch FROM v_now - w.run_at) / extract(epoch FROM p_aging))
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
        v_visited := v_visited || ((v_lane.priority::integer << 16) | v_lane.shard::integer);

        -- The segments that can hold the next v_left rows of the lane.
        SELECT max(s.end_seq), array_agg(DISTINCT s.ready_slot)
          INTO v_upto, v_slots
          FROM (SELECT g.end_seq, g.ready_slot FROM awa.ready_segments g
                 WHERE g.queue = v_lane.queue AND g.priority = v_lane.priority
                   AND g.shard = v_lane.shard AND g.end_seq > v_lane.claim_seq
                 ORDER BY g.end_seq
                 LIMIT v_left) s;
        CONTINUE WHEN v_upto IS NULL;
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
