-- Maintenance: rotation, prune, rescue, promotion and cleanup.
--
-- Run by the maintenance leader, each task on its own schedule; only
-- maintainers may call these functions (roles.sql).
--
-- Rotation appends the next generation to a ring's ledger, and only onto a
-- slot that is empty.  Prune empties the slot after the current one once it
-- is proven inactive:
--   1. pg_try_advisory_xact_lock on the ring: a busy tick skips, never queues;
--   2. the slot is stamped (the row count of its root child) and the gates
--      are proven without any lock -- queue ring: no claimable ready row,
--      no open receipt or live lease pointing into the slot; claim ring:
--      every receipt has distinct closure evidence; lease ring: no lease;
--   3. in one subtransaction, failed rows that must outlive the slot are
--      carried forward, counts are folded into the rollups, and the
--      children are locked ACCESS EXCLUSIVE under a short lock_timeout (a
--      timeout is 'blocked' and rolls the writes back);
--   4. under the lock only two things are checked again: no transaction
--      older than the slot's sealing still holds a snapshot
--      (pg_stat_activity, read afresh), and the stamp did not move; then
--      TRUNCATE.
-- Why proving once is enough: once the gates pass, the slot can only gain
-- rows from a writer already in flight, and every such write appends to
-- the slot's root child in the same transaction (a segment for queue rows,
-- a claim batch for receipts).  Both only grow until prune truncates them,
-- so an unchanged stamp under the lock proves nothing unseen was added;
-- uncommitted writers are waited out by the lock itself.  What is left
-- under the lock is the TRUNCATE, whose cost grows with the number of
-- indexes, not rows; ring_status.last_prune_exclusive_ms records it.
--
-- The horizon.  PostgreSQL hides other roles' xact_start from a role that
-- lacks pg_read_all_stats, and the gate would read "no old transaction".
-- The gate asks awa.horizon_pinned, SECURITY DEFINER: it reads
-- pg_stat_activity as its owner (the owner of schema awa) and answers one
-- boolean, so the worker role needs no pg_read_all_stats and job code
-- cannot read other sessions' queries.  awa.prune_ring first checks that
-- this owner (awa.horizon_reader()) can read the horizon and otherwise
-- truncates nothing ('horizon_unreadable'); awa.prune_ring_unchecked is
-- the prune itself.
--
-- Rescue closes attempts whose worker is gone (stale heartbeat), whose
-- deadline passed, or whose callback timed out, through the same closes
-- as everyone else.  awa.rescue first looks for any batch or lease that
-- could need it at all, so a leader's idle tick plans nothing; then
-- awa.rescue_unchecked runs the receipt and lease rescues.
--
-- Promotion (awa.promote_due_skip_busy) moves due deferred jobs into their
-- lanes.  It locks the enqueue heads it wants in one global order with
-- SKIP LOCKED: a lane a producer holds keeps its jobs until a later tick,
-- so promotion never waits on a producer and cannot deadlock with one.

-- Schema version 11 detaches the root child of the slot a prune empties
-- before it locks it (awa.prune_detach_target, awa.ring_reattach below), so
-- no claim, heartbeat or close waits on the prune (migration
-- 0012_prune_detached runs this file again).
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 11);

-- Whether a slot may be rotated onto.  Lease rows are removed by DELETE,
-- so a lease slot counts as empty only once its storage is gone too: prune
-- truncates it (and its dead rows) before the ring turns onto it again.
-- The other rings' slots are empty when they hold no row.
CREATE OR REPLACE FUNCTION awa.ring_slot_empty(p_ring text, p_slot integer) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_table text;
    v_found boolean;
BEGIN
    FOREACH v_table IN ARRAY awa.ring_tables(p_ring) LOOP
        IF p_ring = 'lease' THEN
            v_found := pg_relation_size(format('awa.%I', v_table || '_' || p_slot)::regclass) > 0;
        ELSE
            EXECUTE format('SELECT EXISTS (SELECT 1 FROM awa.%I)', v_table || '_' || p_slot)
               INTO v_found;
        END IF;
        IF v_found THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END
$$;

-- Advance a ring onto the next slot.  Outcomes: rotated, skipped_idle (the
-- current slot holds nothing: nothing to seal), skipped_busy (the next slot
-- is not pruned yet, or another rotator holds the ring).
CREATE OR REPLACE FUNCTION awa.rotate_ring(p_ring text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_cursor  record;
    v_slots   integer;
    v_next    integer;
    v_outcome text;
BEGIN
    IF NOT pg_try_advisory_xact_lock(awa.ring_lock_key(p_ring)) THEN
        RETURN 'skipped_busy';
    END IF;
    SELECT * INTO v_cursor FROM awa.ring_cursor(p_ring);
    SELECT slot_count INTO v_slots FROM awa.ring_config WHERE ring = p_ring;
    v_next := (v_cursor.slot + 1) % v_slots;
    IF awa.ring_slot_empty(p_ring, v_cursor.slot) THEN
        v_outcome := 'skipped_idle';
    ELSIF NOT awa.ring_slot_empty(p_ring, v_next) THEN
        v_outcome := 'skipped_busy';
    ELSE
        EXECUTE format('INSERT INTO awa.%I (generation, slot) VALUES ($1, $2)
                        ON CONFLICT (generation) DO NOTHING', p_ring || '_ring_rotations')
          USING v_cursor.generation + 1, v_next;
        GET DIAGNOSTICS v_slots = ROW_COUNT;
        v_outcome := CASE WHEN v_slots = 1 THEN 'rotated' ELSE 'skipped_busy' END;
    END IF;
    PERFORM awa.record_ring_outcome(p_ring, 'rotate', v_outcome,
        CASE WHEN v_outcome = 'rotated' THEN v_next ELSE v_cursor.slot END,
        v_cursor.generation + (v_outcome = 'rotated')::integer, NULL);
    RETURN v_outcome;
END
$$;

-- The queue ring's prune gate: no claimable row, no open receipt (looked
-- for only in the batches that hold items of the slot) and no live lease
-- pointing into the slot.
CREATE OR REPLACE FUNCTION awa.queue_slot_busy(p_slot integer)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF EXISTS (
        SELECT 1 FROM awa.ready_segments g
          JOIN awa.queue_claim_heads h
            ON h.queue = g.queue AND h.priority = g.priority AND h.shard = g.shard
         WHERE g.ready_slot = p_slot AND g.end_seq > h.claim_seq
    ) THEN
        RETURN 'claimable ready rows';
    END IF;
    IF EXISTS (SELECT 1 FROM awa.leases l WHERE l.ready_slot = p_slot) THEN
        RETURN 'live leases';
    END IF;
    IF EXISTS (
        SELECT 1 FROM awa.lease_claim_batches b
         CROSS JOIN LATERAL unnest(b.ready_slots) WITH ORDINALITY AS u(ready_slot, item)
         WHERE p_slot = ANY (b.ready_slots) AND u.ready_slot = p_slot
           AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                            WHERE x.batch_id = b.batch_id AND x.item = u.item
                              AND x.claim_slot = b.claim_slot)
           AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                            WHERE y.batch_id = b.batch_id AND y.claim_slot = b.claim_slot
                              AND u.item = ANY (y.items))
    ) THEN
        RETURN 'open receipts';
    END IF;
    RETURN NULL;
END
$$;

-- Prune's horizon question, and nothing more: is a transaction that began
-- before p_before still holding a snapshot in another client session of
-- this database?  SECURITY DEFINER so the maintainers need no
-- pg_read_all_stats: it reads pg_stat_activity as its owner, which must be
-- a superuser or have the privileges of pg_read_all_stats
-- (awa.horizon_reader, awa.horizon_readable; prune refuses otherwise).
-- Only maintainers may run it (roles.sql).  The cached activity snapshot is
-- dropped first, so every call sees sessions as they are now.
CREATE OR REPLACE FUNCTION awa.horizon_pinned(p_before timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
    PERFORM pg_catalog.pg_stat_clear_snapshot();
    RETURN EXISTS (
        SELECT 1 FROM pg_catalog.pg_stat_activity a
         WHERE a.datname = pg_catalog.current_database()
           AND a.pid <> pg_catalog.pg_backend_pid()
           AND a.backend_type = 'client backend'
           AND a.backend_xmin IS NOT NULL AND a.xact_start < p_before);
END
$$;

CREATE OR REPLACE FUNCTION awa.ring_slot_busy(p_ring text, p_slot integer, p_sealed_at timestamptz)
RETURNS text
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_open boolean;
BEGIN
    -- A transaction that began before the slot was sealed may still read it,
    -- and TRUNCATE is not MVCC-safe: wait for such a transaction to end.
    IF awa.horizon_pinned(p_sealed_at) THEN
        RETURN 'pinned by an older transaction';
    END IF;
    IF p_ring = 'queue' THEN
        RETURN awa.queue_slot_busy(p_slot);
    ELSIF p_ring = 'claim' THEN
        -- Every item handed out in the slot has closure evidence: distinct
        -- (batch, item) pairs, so evidence written twice cannot stand in for
        -- an item that has none.
        EXECUTE format(
            'SELECT (SELECT COALESCE(sum(cardinality(job_ids)), 0) FROM awa.%I)
                  > (SELECT count(*) FROM (SELECT x.batch_id, x.item FROM awa.%I x
                                           UNION
                                           SELECT y.batch_id, unnest(y.items) FROM awa.%I y) e)',
            'lease_claim_batches_' || p_slot, 'lease_claim_closures_' || p_slot,
            'lease_claim_closure_batches_' || p_slot)
           INTO v_open;
        RETURN CASE WHEN v_open THEN 'open receipts' END;
    ELSE
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM awa.%I)', 'leases_' || p_slot) INTO v_open;
        RETURN CASE WHEN v_open THEN 'live leases' END;
    END IF;
END
$$;

-- Prune's fold: superseded rows are neither carried forward
-- (terminal_jobs skips them) nor counted, and their supersessions go with
-- the slot.  The failed rows carried forward are the done_entries branch of
-- awa.terminal_jobs (console.sql) written out: through the view, the
-- statement was planned with the completion branch too, about 4.5 ms of a
-- leader's CPU on every queue prune (the prune's own truncations invalidate
-- the cached plan), against about 0.4 ms.
CREATE OR REPLACE FUNCTION awa.carry_forward_and_fold(
    p_target integer, p_current integer, p_generation bigint, p_failed_retention interval)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state, queue,
                                  priority, attempt, errors, progress, return_value,
                                  attempted_at, finalized_at, kind, args, kwargs, metadata,
                                  tags, max_attempts, created_at, run_at)
    SELECT p_current, p_generation, d.job_id, d.run_lease, d.state, d.queue,
           COALESCE(d.priority, r.priority), d.attempt, COALESCE(d.errors, r.errors),
           d.progress, d.return_value, d.attempted_at, d.finalized_at,
           COALESCE(d.kind, r.kind), COALESCE(d.args, r.args), COALESCE(d.kwargs, r.kwargs),
           COALESCE(d.metadata, r.metadata), COALESCE(d.tags, r.tags),
           COALESCE(d.max_attempts, r.max_attempts), COALESCE(d.created_at, r.created_at),
           COALESCE(d.run_at, r.run_at)
      FROM awa.done_entries d
      LEFT JOIN awa.ready_entries r
        ON r.ready_slot = d.ready_slot AND r.queue = d.queue AND r.priority = d.priority
       AND r.shard = d.shard AND r.lane_seq = d.lane_seq
     WHERE d.ready_slot = p_target AND d.state = 'failed'
       AND d.finalized_at > now() - p_failed_retention
       AND NOT EXISTS (SELECT 1 FROM awa.done_supersessions x
                        WHERE x.job_id = d.job_id AND x.run_lease = d.run_lease
                          AND x.finalized_at = d.finalized_at);

    INSERT INTO awa.queue_terminal_rollups AS r (queue, state, count)
    SELECT x.queue, x.state, sum(x.n)
      FROM (SELECT d.queue, d.state, count(*) AS n
              FROM awa.done_entries d
             WHERE d.ready_slot = p_target
               AND NOT (d.state = 'failed' AND d.finalized_at > now() - p_failed_retention)
               AND NOT EXISTS (SELECT 1 FROM awa.done_supersessions s
                                WHERE s.job_id = d.job_id AND s.run_lease = d.run_lease
                                  AND s.finalized_at = d.finalized_at)
             GROUP BY d.queue, d.state
            UNION ALL
            SELECT b.queue, 'completed', sum(cardinality(b.job_ids))
              FROM awa.receipt_completion_batches b
             WHERE b.ready_slot = p_target
             GROUP BY b.queue) AS x
     GROUP BY x.queue, x.state
    ON CONFLICT (queue, state) DO UPDATE SET count = r.count + EXCLUDED.count;

    DELETE FROM awa.done_supersessions s WHERE s.ready_slot = p_target;
END
$$;

CREATE OR REPLACE FUNCTION awa.rescue_attempts(
    p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[],
    p_dlq_off text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_rescued integer;
BEGIN
    WITH batches AS MATERIALIZED (
        SELECT b.claim_slot, b.batch_id, b.queue, b.job_ids, b.run_leases, b.attempts,
               b.priorities, b.shards, b.lane_seqs, b.ready_slots, b.claim_nonce
          FROM awa.lease_claim_batches b
         WHERE CASE p_reason
                 WHEN 'deadline_expired' THEN b.deadline_at < clock_timestamp()
                 ELSE NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                   WHERE i.id = b.runtime_id
                                     AND i.heartbeat_at > clock_timestamp() - p_staleness)
               END
           AND (SELECT k.closed FROM awa.claim_batch_closed(b.claim_slot, b.batch_id) k)
               < cardinality(b.job_ids)
    ), candidates AS MATERIALIZED (
        SELECT b.claim_slot, b.batch_id, i.item::integer AS item, i.job_id, i.run_lease,
               b.claim_nonce, i.attempt, b.queue, i.priority, i.shard, i.lane_seq, i.ready_slot
          FROM batches b
         CROSS JOIN LATERAL unnest(b.job_ids, b.run_leases, b.attempts, b.priorities,
                                   b.shards, b.lane_seqs, b.ready_slots)
               WITH ORDINALITY AS i(job_id, run_lease, attempt, priority, shard, lane_seq,
                                    ready_slot, item)
         WHERE NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                            WHERE x.batch_id = b.batch_id AND x.item = i.item
                              AND x.claim_slot = b.claim_slot)
           AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                            WHERE y.batch_id = b.batch_id AND y.claim_slot = b.claim_slot
                              AND i.item = ANY (y.items))
         LIMIT p_limit
    ), routed AS (
        SELECT c.claim_slot, c.batch_id, c.item, c.job_id, c.run_lease, c.claim_nonce,
               c.attempt,
               CASE WHEN c.attempt < r.max_attempts THEN 'retryable'
                    WHEN c.queue = ANY (p_dlq_on)
                      OR (p_dlq_default AND NOT c.queue = ANY (p_dlq_off)) THEN 'dlq'
                    ELSE 'failed' END AS target,
               (COALESCE(r.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                   'attempt', c.attempt,
                   'type', 'awa_django.' || p_reason,
                   'message', CASE p_reason
                       WHEN 'deadline_expired' THEN 'attempt passed its deadline'
                       ELSE 'worker stopped heartbeating' END,
                   'traceback', '',
                   'at', clock_timestamp())))::text AS history
          FROM candidates c
          JOIN awa.ready_entries r
            ON r.ready_slot = c.ready_slot AND r.queue = c.queue AND r.priority = c.priority
           AND r.shard = c.shard AND r.lane_seq = c.lane_seq
    ), ordered AS (
        SELECT * FROM routed ORDER BY batch_id, item
    )
    SELECT count(*) INTO v_rescued
      FROM awa.close_attempts(
          ARRAY(SELECT claim_slot FROM ordered), ARRAY(SELECT batch_id FROM ordered),
          ARRAY(SELECT item FROM ordered), ARRAY(SELECT job_id FROM ordered),
          ARRAY(SELECT run_lease FROM ordered), ARRAY(SELECT claim_nonce FROM ordered),
          ARRAY(SELECT target FROM ordered),
          ARRAY(SELECT p_reason FROM ordered), ARRAY(SELECT clock_timestamp() FROM ordered),
          ARRAY(SELECT attempt FROM ordered), ARRAY(SELECT history FROM ordered),
          ARRAY(SELECT NULL::text FROM ordered), ARRAY(SELECT p_reason FROM ordered),
          ARRAY(SELECT NULL::text FROM ordered));
    RETURN v_rescued;
END
$$;

-- ---------------------------------------------------------------------------
-- Cleanup
-- ---------------------------------------------------------------------------

-- Bounded retention passes on the plain tables; returns rows removed.
CREATE OR REPLACE FUNCTION awa.cleanup(
    p_runtime_retention interval, p_dlq_retention interval, p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_removed integer := 0;
    v_count   integer;
    v_ring    text;
    v_slots   integer;
BEGIN
    DELETE FROM awa.runtime_instances
     WHERE id IN (SELECT id FROM awa.runtime_instances
                   WHERE heartbeat_at < now() - p_runtime_retention LIMIT p_limit);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_removed := v_removed + v_count;

    DELETE FROM awa.dlq_entries
     WHERE job_id IN (SELECT job_id FROM awa.dlq_entries
                       WHERE moved_at < now() - p_dlq_retention LIMIT p_limit);
    GET DIAGNOSTICS v_count = ROW_COUNT;
    v_removed := v_removed + v_count;

    -- Trim rotation ledgers to one ring wrap (the cursor is the max row).
    FOREACH v_ring IN ARRAY ARRAY['queue', 'claim', 'lease'] LOOP
        SELECT slot_count INTO v_slots FROM awa.ring_config WHERE ring = v_ring;
        EXECUTE format('DELETE FROM awa.%I WHERE generation < (SELECT max(generation) FROM awa.%I) - $1',
                       v_ring || '_ring_rotations', v_ring || '_ring_rotations')
          USING v_slots * 2;
        GET DIAGNOSTICS v_count = ROW_COUNT;
        v_removed := v_removed + v_count;
    END LOOP;
    RETURN v_removed;
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

-- Record a rotation's or a prune's outcome in awa.ring_status, with the lock
-- hold of a prune (NULL: a rotation, or a prune that did not get the lock;
-- the last figure is kept).  Rotation and prune share it so the counters
-- and the "only write on a change" rule are spelled once.
CREATE OR REPLACE FUNCTION awa.record_ring_outcome(
    p_ring text, p_action text, p_outcome text, p_slot integer, p_generation bigint,
    p_exclusive_ms double precision)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO awa.ring_status AS s (ring, action, outcome, slot, generation, at,
                                      truncations, rotations, last_prune_exclusive_ms)
    VALUES (p_ring, p_action, p_outcome, p_slot, p_generation, now(),
            (p_outcome = 'pruned')::integer, (p_outcome = 'rotated')::integer, p_exclusive_ms)
    ON CONFLICT (ring, action) DO UPDATE
       SET outcome = EXCLUDED.outcome, slot = EXCLUDED.slot,
           generation = EXCLUDED.generation, at = EXCLUDED.at,
           truncations = s.truncations + EXCLUDED.truncations,
           rotations = s.rotations + EXCLUDED.rotations,
           last_prune_exclusive_ms = COALESCE(EXCLUDED.last_prune_exclusive_ms,
                                              s.last_prune_exclusive_ms)
     WHERE s.outcome IS DISTINCT FROM EXCLUDED.outcome
        OR EXCLUDED.truncations > 0 OR EXCLUDED.rotations > 0
        OR EXCLUDED.last_prune_exclusive_ms IS NOT NULL
$$;

-- True when a transaction that began before p_sealed_at still holds a
-- snapshot: it may still read the slot, and TRUNCATE is not MVCC-safe.
-- VOLATILE, and the cached activity snapshot is dropped, so a second call
-- in the same transaction sees sessions as they are now.
CREATE OR REPLACE FUNCTION awa.ring_slot_pinned(p_sealed_at timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    RETURN awa.horizon_pinned(p_sealed_at);
END
$$;

-- Rows of the slot's root child, the one every write that could outdate the
-- prune proofs appends to (see the header).  READ COMMITTED callers only: a
-- second call must see what committed in between.
CREATE OR REPLACE FUNCTION awa.ring_slot_stamp(p_ring text, p_slot integer) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_rows bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM awa.%I', awa.ring_root(p_ring) || '_' || p_slot)
       INTO v_rows;
    RETURN v_rows;
END
$$;

-- Rescue leases nobody will finish.  p_reason 'stale_heartbeat': a running
-- lease whose runtime (or own heartbeat) is older than p_staleness;
-- 'deadline_expired': a running lease past its deadline; 'callback_timeout':
-- a parked lease whose callback timed out.  Routed like a failed attempt.
CREATE OR REPLACE FUNCTION awa.rescue_leases(
    p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[],
    p_dlq_off text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_rescued integer;
BEGIN
    WITH candidates AS (
        SELECT l.job_id, l.run_lease, l.claim_nonce, l.attempt, l.queue, r.max_attempts,
               r.errors
          FROM awa.leases l
          JOIN awa.ready_entries r
            ON r.ready_slot = l.ready_slot AND r.queue = l.queue AND r.priority = l.priority
           AND r.shard = l.shard AND r.lane_seq = l.lane_seq
         WHERE CASE p_reason
                 WHEN 'deadline_expired' THEN l.state = 'running'
                                          AND l.deadline_at < clock_timestamp()
                 WHEN 'callback_timeout' THEN l.state = 'waiting_external'
                                          AND l.callback_timeout_at < clock_timestamp()
                 ELSE l.state = 'running'
                  AND (l.heartbeat_at < clock_timestamp() - p_staleness
                       OR NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                       WHERE i.id = l.runtime_id
                                         AND i.heartbeat_at > clock_timestamp() - p_staleness))
               END
         ORDER BY l.job_id
         LIMIT p_limit
           FOR UPDATE OF l SKIP LOCKED
    ), routed AS (
        SELECT c.*,
               awa.failure_target(c.attempt, c.max_attempts, c.queue, p_dlq_default, p_dlq_on,
                                  p_dlq_off, true) AS target,
               awa.error_entry(c.errors, c.attempt, 'awa_django.' || p_reason,
                               CASE p_reason
                                   WHEN 'deadline_expired' THEN 'attempt passed its deadline'
                                   WHEN 'callback_timeout' THEN 'callback timed out'
                                   ELSE 'worker stopped heartbeating' END) AS history
          FROM candidates c
    )
    SELECT count(*) INTO v_rescued
      FROM awa.close_leases(
          ARRAY(SELECT job_id FROM routed ORDER BY job_id),
          ARRAY(SELECT run_lease FROM routed ORDER BY job_id),
          ARRAY(SELECT claim_nonce FROM routed ORDER BY job_id),
          ARRAY(SELECT target FROM routed ORDER BY job_id),
          ARRAY(SELECT p_reason FROM routed ORDER BY job_id),
          ARRAY(SELECT clock_timestamp() FROM routed ORDER BY job_id),
          ARRAY(SELECT attempt FROM routed ORDER BY job_id),
          ARRAY(SELECT history FROM routed ORDER BY job_id),
          ARRAY(SELECT NULL::text FROM routed ORDER BY job_id),
          ARRAY(SELECT p_reason FROM routed ORDER BY job_id),
          ARRAY(SELECT NULL::text FROM routed ORDER BY job_id));
    RETURN v_rescued;
END
$$;

-- Rescue receipts and leases in one call (the leader's rescue task): stale
-- heartbeats and expired deadlines for both, callback timeouts for leases.
CREATE OR REPLACE FUNCTION awa.rescue_unchecked(
    p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[],
    p_dlq_off text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_receipts integer := 0;
BEGIN
    IF p_reason <> 'callback_timeout' THEN
        v_receipts := awa.rescue_attempts(p_reason, p_staleness, p_dlq_default, p_dlq_on,
                                          p_dlq_off, p_limit);
    END IF;
    RETURN v_receipts + awa.rescue_leases(p_reason, p_staleness, p_dlq_default, p_dlq_on,
                                          p_dlq_off, p_limit);
END
$$;

-- Drop claims whose holder left its states (the enqueue path takes such a
-- claim over anyway; this only keeps the table small).  Bounded, oldest
-- first, skipping claims a producer holds.
CREATE OR REPLACE FUNCTION awa.cleanup_unique_claims(p_min_age interval, p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_removed integer;
BEGIN
    DELETE FROM awa.unique_claims c
     WHERE c.unique_key IN (
         SELECT x.unique_key FROM awa.unique_claims x
          WHERE x.claimed_at < now() - p_min_age
            AND NOT EXISTS (SELECT 1 FROM awa.jobs j
                             WHERE j.id = x.job_id AND j.state = ANY (x.states))
          ORDER BY x.claimed_at
          LIMIT p_limit
            FOR UPDATE SKIP LOCKED);
    GET DIAGNOSTICS v_removed = ROW_COUNT;
    RETURN v_removed;
END
$$;

-- The role awa.horizon_pinned reads pg_stat_activity as: its owner.
CREATE OR REPLACE FUNCTION awa.horizon_reader() RETURNS name
LANGUAGE sql STABLE AS $$
    SELECT pg_catalog.pg_get_userbyid(p.proowner) FROM pg_catalog.pg_proc p
     WHERE p.pronamespace = 'awa'::pg_catalog.regnamespace AND p.proname = 'horizon_pinned'
$$;

-- Whether p_role sees every session's transaction in pg_stat_activity:
-- superusers and roles with the privileges of pg_read_all_stats (directly
-- or through pg_monitor) do.  NULL for a NULL role.
CREATE OR REPLACE FUNCTION awa.horizon_readable(p_role name) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT pg_catalog.pg_has_role(p_role, 'pg_read_all_stats', 'USAGE')
$$;

-- The root table of a ring: the child every write that could outdate the
-- prune proofs appends to (awa.ring_slot_stamp), and for the queue and
-- lease rings the one hot statements read through their parent with a plan
-- made once per session (claim's lane probes, lease heartbeats and closes),
-- which locks every child.
CREATE OR REPLACE FUNCTION awa.ring_root(p_ring text) RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE p_ring WHEN 'queue' THEN 'ready_segments'
                       WHEN 'claim' THEN 'lease_claim_batches'
                       WHEN 'lease' THEN 'leases' END
$$;

-- The slot a prune of the ring empties (the one after the current slot)
-- and when it was sealed: when the ring first rotated away from it, the
-- rotation that followed its last generation.
CREATE OR REPLACE FUNCTION awa.ring_prune_target(p_ring text, OUT slot integer,
                                                 OUT sealed_at timestamptz)
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_cursor record;
BEGIN
    SELECT * INTO v_cursor FROM awa.ring_cursor(p_ring);
    SELECT (v_cursor.slot + 1) % c.slot_count INTO slot
      FROM awa.ring_config c WHERE c.ring = p_ring;
    EXECUTE format('SELECT min(r.rotated_at) FROM awa.%I r
                     WHERE r.generation > (SELECT max(x.generation) FROM awa.%I x
                                            WHERE x.slot = $1 AND x.generation < $2)',
                   p_ring || '_ring_rotations', p_ring || '_ring_rotations')
       INTO sealed_at USING slot, v_cursor.generation;
    sealed_at := COALESCE(sealed_at, v_cursor.rotated_at);
END
$$;

-- Detach before truncating (schema version 11).  Under the prune's ACCESS
-- EXCLUSIVE lock on the root child of the slot it empties, every statement
-- planned over the root's parent waits, though the slot holds nothing it
-- wants: the plan a claim's lane probe makes once per session names every
-- child, and a cached plan locks all it names.  So the leader first takes
-- that child out of its parent with ALTER TABLE ... DETACH PARTITION ...
-- CONCURRENTLY, which holds SHARE UPDATE EXCLUSIVE on the parent (no hot
-- statement's lock conflicts with it) and waits for the transactions that
-- used the parent before it; from then on no statement plans with the
-- child.  The prune locks, checks and truncates it as before, and attaches
-- it again in the same transaction (SHARE UPDATE EXCLUSIVE again; an empty
-- table is checked against its bounds at once), whatever its outcome.
--
-- This function answers the statement to run, or NULL when no prune would
-- truncate now (so nothing is detached only to be put back): a ring whose
-- hot statements plan over the whole parent (queue, lease), a target with
-- rows whose gates pass, no transaction older than a second holding a
-- snapshot (the detach waits for transactions that used the parent: this
-- keeps the wait short), and a role that owns both tables (ALTER TABLE
-- needs it, and DETACH ... CONCURRENTLY cannot run inside a function that
-- could lend it; awa_roles' worker role is no owner and prunes under the
-- lock).  The detach cannot run inside a transaction block: the leader runs
-- it in autocommit.
CREATE OR REPLACE FUNCTION awa.prune_detach_target(p_ring text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_target record;
    v_child  text;
BEGIN
    IF p_ring NOT IN ('queue', 'lease')
       OR current_setting('server_version_num')::integer < 140000
       OR NOT pg_try_advisory_xact_lock(awa.ring_lock_key(p_ring))
       OR NOT awa.horizon_readable(awa.horizon_reader()) THEN
        RETURN NULL;
    END IF;
    SELECT * INTO v_target FROM awa.ring_prune_target(p_ring);
    v_child := awa.ring_root(p_ring) || '_' || v_target.slot;
    IF NOT EXISTS (SELECT 1 FROM pg_class c
                     JOIN pg_inherits i ON i.inhrelid = c.oid
                     JOIN pg_class p ON p.oid = i.inhparent
                    WHERE c.oid = format('awa.%I', v_child)::regclass
                      AND pg_has_role(c.relowner, 'USAGE') AND pg_has_role(p.relowner, 'USAGE'))
       OR awa.ring_slot_empty(p_ring, v_target.slot)
       OR awa.ring_slot_busy(p_ring, v_target.slot,
                             GREATEST(v_target.sealed_at, clock_timestamp() - interval '1 second'))
          IS NOT NULL THEN
        RETURN NULL;
    END IF;
    RETURN format('ALTER TABLE awa.%I DETACH PARTITION awa.%I CONCURRENTLY',
                  awa.ring_root(p_ring), v_child);
END
$$;

-- The root children of the ring that are out of their parent, or on their
-- way out (a detach cut short in its wait), with their slots.
CREATE OR REPLACE FUNCTION awa.ring_detached(p_ring text)
RETURNS TABLE (relname name, slot integer, pending boolean)
LANGUAGE sql STABLE AS $$
    SELECT c.relname, substring(c.relname FROM '_([0-9]+)$')::integer,
           COALESCE((to_jsonb(i) ->> 'inhdetachpending')::boolean, false)
      FROM pg_catalog.pg_class c
      LEFT JOIN pg_catalog.pg_inherits i ON i.inhrelid = c.oid
     WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind = 'r'
       AND c.relname ~ ('^' || awa.ring_root(p_ring) || '_[0-9]+$')
       AND (i.inhrelid IS NULL OR (to_jsonb(i) ->> 'inhdetachpending')::boolean)
     ORDER BY c.relname
$$;

-- Whether every root child of the ring is in its parent, settled: what a
-- prune asks before anything else (awa.ring_reattach then finds the ones
-- that are not).  The ring's root children are <root>_0 .. <root>_{n-1}
-- for its slot_count n (awa.ensure_ring_partitions never drops one and
-- slot_count never shrinks), so they all are exactly when n of them are
-- attached and not pending: an index lookup in pg_inherits, where
-- awa.ring_detached matches every relation of the schema against a pattern
-- (about 1 ms a prune, planned again after each prune's truncations).
CREATE OR REPLACE FUNCTION awa.ring_attached(p_ring text) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
BEGIN
    RETURN (SELECT count(*) FILTER (
                       WHERE NOT COALESCE((to_jsonb(i) ->> 'inhdetachpending')::boolean, false))
              FROM pg_catalog.pg_inherits i
             WHERE i.inhparent = format('awa.%I', awa.ring_root(p_ring))::regclass)
         = (SELECT c.slot_count FROM awa.ring_config c WHERE c.ring = p_ring);
END
$$;

-- Attach every root child of the ring that is out of its parent: the one a
-- prune detached, or one a leader left detached when it died between the
-- detach and the prune (a detach cut short in its wait is finished first).
-- SECURITY DEFINER like awa.ensure_ring_partitions: run as the owner, so a
-- maintainer that is not one still puts a child back.
CREATE OR REPLACE FUNCTION awa.ring_reattach(p_ring text) RETURNS integer
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_root  text := awa.ring_root(p_ring);
    v_child record;
    v_count integer := 0;
BEGIN
    FOR v_child IN SELECT * FROM awa.ring_detached(p_ring) LOOP
        IF v_child.pending THEN
            EXECUTE format('ALTER TABLE awa.%I DETACH PARTITION awa.%I FINALIZE',
                           v_root, v_child.relname);
        END IF;
        EXECUTE format('ALTER TABLE awa.%I ATTACH PARTITION awa.%I FOR VALUES IN (%s)',
                       v_root, v_child.relname, v_child.slot);
        v_count := v_count + 1;
    END LOOP;
    RETURN v_count;
END
$$;

-- The prune itself (see the header), the root child locked last.
CREATE OR REPLACE FUNCTION awa.prune_ring_unchecked(
    p_ring text, p_lock_timeout_ms integer, p_failed_retention interval)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_cursor    record;
    v_target    integer;
    v_sealed_at timestamptz;
    v_stamp     bigint;
    v_children  text[];
    v_stored    text;
    v_root      text;
    v_timeout   text;
    v_locked_at timestamptz;
    v_held_ms   double precision;
    v_outcome   text;
    v_detached  boolean;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'awa.prune_ring_unchecked needs READ COMMITTED, not %',
                        current_setting('transaction_isolation')
              USING ERRCODE = 'invalid_transaction_state';
    END IF;
    IF NOT pg_try_advisory_xact_lock(awa.ring_lock_key(p_ring)) THEN
        RETURN 'skipped_busy';
    END IF;
    v_detached := NOT awa.ring_attached(p_ring);
    SELECT * INTO v_cursor FROM awa.ring_cursor(p_ring);
    SELECT t.slot, t.sealed_at INTO v_target, v_sealed_at FROM awa.ring_prune_target(p_ring) t;

    IF awa.ring_slot_empty(p_ring, v_target) THEN
        v_outcome := 'already_pruned';
    ELSE
        -- The stamp comes before the gates: what committed before it, the
        -- gates see; what commits after it moves it.
        v_stamp := awa.ring_slot_stamp(p_ring, v_target);
        IF awa.ring_slot_busy(p_ring, v_target, v_sealed_at) IS NOT NULL THEN
            v_outcome := 'skipped_busy';
        ELSE
            -- Every child but the root (the table awa.ring_slot_stamp
            -- counts): the root goes last.
            v_root := awa.ring_root(p_ring);
            SELECT array_agg(format('awa.%I', t.name || '_' || v_target) ORDER BY t.n)
              INTO v_children
              FROM unnest(awa.ring_tables(p_ring)) WITH ORDINALITY AS t(name, n)
             WHERE t.name <> v_root;
            v_root := format('awa.%I', v_root || '_' || v_target);
            v_timeout := current_setting('lock_timeout');
            -- A subtransaction: the carry-forward and fold writes, and the
            -- locks, go if the lock times out or the check under it fails.
            BEGIN
                -- Before the lock, so they do not count towards its hold.
                IF p_ring = 'queue' THEN
                    PERFORM awa.carry_forward_and_fold(v_target, v_cursor.slot,
                                                       v_cursor.generation, p_failed_retention);
                END IF;
                PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
                IF v_children IS NOT NULL THEN
                    EXECUTE 'LOCK TABLE ' || array_to_string(v_children, ', ')
                         || ' IN ACCESS EXCLUSIVE MODE';
                END IF;
                IF awa.ring_slot_pinned(v_sealed_at)
                   OR awa.ring_slot_stamp(p_ring, v_target) <> v_stamp THEN
                    RAISE EXCEPTION 'ring % slot %: a late writer or an older snapshot',
                                    p_ring, v_target
                          USING ERRCODE = 'AW001';
                END IF;
                -- Only the children that have storage: a TRUNCATE costs the
                -- same for an empty table (new files for it, its TOAST table
                -- and each index, and their invalidations in every session),
                -- and most slots never get a tombstone, a failure or an
                -- explicit closure.  No page means no row, live or dead, and
                -- under the lock none can come.
                IF v_children IS NOT NULL THEN
                    SELECT string_agg(c.name, ', ' ORDER BY c.n) INTO v_stored
                      FROM unnest(v_children) WITH ORDINALITY AS c(name, n)
                      JOIN pg_catalog.pg_class r ON r.oid = c.name::regclass
                     WHERE pg_relation_size(r.oid) > 0
                        OR (r.reltoastrelid <> 0 AND pg_relation_size(r.reltoastrelid) > 0);
                    IF v_stored IS NOT NULL THEN
                        EXECUTE 'TRUNCATE ' || v_stored;
                    END IF;
                END IF;
                -- The root last: the child every claim reads, locked for its
                -- own TRUNCATE and the commit only.  No writer can have
                -- changed it (every writer of the slot appends to it with
                -- the rest): checked again all the same.
                EXECUTE 'LOCK TABLE ' || v_root || ' IN ACCESS EXCLUSIVE MODE';
                v_locked_at := clock_timestamp();
                PERFORM set_config('lock_timeout', v_timeout, true);
                IF awa.ring_slot_stamp(p_ring, v_target) <> v_stamp THEN
                    RAISE EXCEPTION 'ring % slot %: a late writer', p_ring, v_target
                          USING ERRCODE = 'AW001';
                END IF;
                EXECUTE 'TRUNCATE ' || v_root;
                -- The hold goes on until commit (the rest of this function,
                -- the commit's WAL flush and the unlink of the old files),
                -- which no statement inside the transaction can measure.
                v_held_ms := extract(epoch FROM clock_timestamp() - v_locked_at) * 1000;
                v_outcome := 'pruned';
            EXCEPTION
                WHEN lock_not_available THEN
                    v_outcome := 'blocked';
                WHEN SQLSTATE 'AW001' THEN
                    -- The abort released the root's lock: held until now (NULL:
                    -- the check under the other children's locks failed).
                    v_held_ms := extract(epoch FROM clock_timestamp() - v_locked_at) * 1000;
                    v_outcome := 'skipped_busy';
            END;
        END IF;
    END IF;
    -- A root child the leader detached for this prune goes back, emptied or
    -- not (awa.prune_detach_target); looked up before the locks, so a prune
    -- with nothing detached spends no time on it under them.
    IF v_detached THEN
        PERFORM awa.ring_reattach(p_ring);
    END IF;
    PERFORM awa.record_ring_outcome(p_ring, 'prune', v_outcome, v_target, NULL, v_held_ms);
    RETURN v_outcome;
END
$$;

-- Prune, once awa.horizon_pinned is known to read the horizon (see the
-- header).
CREATE OR REPLACE FUNCTION awa.prune_ring(
    p_ring text, p_lock_timeout_ms integer, p_failed_retention interval)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_target integer;
BEGIN
    IF awa.horizon_readable(awa.horizon_reader()) THEN
        RETURN awa.prune_ring_unchecked(p_ring, p_lock_timeout_ms, p_failed_retention);
    END IF;
    SELECT (c.slot + 1) % r.slot_count INTO v_target
      FROM awa.ring_cursor(p_ring) c JOIN awa.ring_config r ON r.ring = p_ring;
    PERFORM awa.record_ring_outcome(p_ring, 'prune', 'horizon_unreadable', v_target,
                                       NULL, NULL);
    RETURN 'horizon_unreadable';
END
$$;

-- awa.rescue_unchecked, when a batch or a lease could need it (see the
-- header): each test here is implied by the item-level test it makes.
CREATE OR REPLACE FUNCTION awa.rescue(
    p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[],
    p_dlq_off text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
BEGIN
    IF p_reason = 'deadline_expired' THEN
        IF NOT EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                        WHERE b.deadline_at < clock_timestamp())
           AND NOT EXISTS (SELECT 1 FROM awa.leases l
                            WHERE l.state = 'running' AND l.deadline_at < clock_timestamp()) THEN
            RETURN 0;
        END IF;
    ELSIF p_reason = 'callback_timeout' THEN
        IF NOT EXISTS (SELECT 1 FROM awa.leases l
                        WHERE l.state = 'waiting_external'
                          AND l.callback_timeout_at < clock_timestamp()) THEN
            RETURN 0;
        END IF;
    ELSIF NOT EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                       WHERE NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                          WHERE i.id = b.runtime_id
                                            AND i.heartbeat_at > clock_timestamp() - p_staleness))
          AND NOT EXISTS (SELECT 1 FROM awa.leases l
                           WHERE l.state = 'running'
                             AND (l.heartbeat_at < clock_timestamp() - p_staleness
                                  OR NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                                  WHERE i.id = l.runtime_id
                                                    AND i.heartbeat_at
                                                        > clock_timestamp() - p_staleness))) THEN
        RETURN 0;
    END IF;
    RETURN awa.rescue_unchecked(p_reason, p_staleness, p_dlq_default, p_dlq_on, p_dlq_off, p_limit);
END
$$;
