-- awa_django substrate, version 3: the maintenance leader.
--
-- Ring rotation and prune, rescue of abandoned attempts, terminal count
-- rollups, retention cleanup.  Idempotent, under the substrate lock.
--
-- Rings.  Each ring's cursor is the max-generation row of its rotation
-- ledger.  Rotation appends (generation + 1, next slot); the primary key
-- makes the append a compare-and-swap.  The slot after the current one is
-- the oldest sealed slot: prune empties it (TRUNCATE of its children) once
-- it is proven inactive, and rotation only moves onto an empty slot.
--
-- Prune safety, for every ring:
--   1. pg_try_advisory_xact_lock(ring key): a busy tick skips, never queues;
--   2. cheap gates first (queue ring: no claimable ready rows, no open
--      receipts or live leases pointing at the slot, no transaction older
--      than the slot's sealing; claim ring: every receipt has a closure);
--   3. ACCESS EXCLUSIVE on the slot's children under a short lock_timeout
--      (in-flight producers, claimers and completers hold weaker locks, so
--      uncommitted rows can never be truncated; on timeout: 'blocked');
--   4. the gates again, now that nothing can change under us;
--   5. carry forward what must outlive the slot, fold counts, TRUNCATE.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 3);

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
    PRIMARY KEY (ring, action)
);

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

-- True when every child of the ring's slot is empty.
CREATE OR REPLACE FUNCTION awa.ring_slot_empty(p_ring text, p_slot integer) RETURNS boolean
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_table text;
    v_found boolean;
BEGIN
    FOREACH v_table IN ARRAY awa.ring_tables(p_ring) LOOP
        EXECUTE format('SELECT EXISTS (SELECT 1 FROM awa.%I)', v_table || '_' || p_slot)
           INTO v_found;
        IF v_found THEN
            RETURN false;
        END IF;
    END LOOP;
    RETURN true;
END
$$;

CREATE OR REPLACE FUNCTION awa.record_ring_outcome(
    p_ring text, p_action text, p_outcome text, p_slot integer, p_generation bigint)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO awa.ring_status AS s (ring, action, outcome, slot, generation, at,
                                      truncations, rotations)
    VALUES (p_ring, p_action, p_outcome, p_slot, p_generation, now(),
            (p_outcome = 'pruned')::integer, (p_outcome = 'rotated')::integer)
    ON CONFLICT (ring, action) DO UPDATE
       SET outcome = EXCLUDED.outcome, slot = EXCLUDED.slot,
           generation = EXCLUDED.generation, at = EXCLUDED.at,
           truncations = s.truncations + EXCLUDED.truncations,
           rotations = s.rotations + EXCLUDED.rotations
     WHERE s.outcome IS DISTINCT FROM EXCLUDED.outcome
        OR EXCLUDED.truncations > 0 OR EXCLUDED.rotations > 0
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
        v_cursor.generation + (v_outcome = 'rotated')::integer);
    RETURN v_outcome;
END
$$;

-- Why the queue-ring slot cannot be pruned now, or NULL when it can.
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
    IF EXISTS (SELECT 1 FROM awa.open_receipts c WHERE c.ready_slot = p_slot) THEN
        RETURN 'open receipts';
    END IF;
    IF EXISTS (
        SELECT 1 FROM awa.leases l
          JOIN awa.claim_items c ON c.job_id = l.job_id AND c.run_lease = l.run_lease
         WHERE c.ready_slot = p_slot
    ) THEN
        RETURN 'live leases';
    END IF;
    RETURN NULL;
END
$$;

-- Lock every child of a ring slot ACCESS EXCLUSIVE; false on lock timeout.
CREATE OR REPLACE FUNCTION awa.lock_ring_slot(p_ring text, p_slot integer, p_timeout_ms integer)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_table text;
BEGIN
    PERFORM set_config('lock_timeout', p_timeout_ms || 'ms', true);
    FOREACH v_table IN ARRAY awa.ring_tables(p_ring) LOOP
        EXECUTE format('LOCK TABLE awa.%I IN ACCESS EXCLUSIVE MODE', v_table || '_' || p_slot);
    END LOOP;
    PERFORM set_config('lock_timeout', '0', true);
    RETURN true;
EXCEPTION WHEN lock_not_available THEN
    RETURN false;
END
$$;

CREATE OR REPLACE FUNCTION awa.truncate_ring_slot(p_ring text, p_slot integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE 'TRUNCATE ' || (
        SELECT string_agg(format('awa.%I', t || '_' || p_slot), ', ')
          FROM unnest(awa.ring_tables(p_ring)) AS t);
END
$$;

-- Prune the oldest sealed slot of a ring.  Outcomes: pruned, already_pruned
-- (nothing to reclaim), skipped_busy (a gate says the slot is live, or the
-- ring is being rotated), blocked (lock timeout: someone is still writing).
-- Queue ring: failed rows younger than p_failed_retention are copied into the
-- current slot as self-contained rows first; the terminal rows reclaimed are
-- folded into queue_terminal_rollups so counts stay exact.
CREATE OR REPLACE FUNCTION awa.prune_ring(
    p_ring text, p_lock_timeout_ms integer, p_failed_retention interval)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_cursor    record;
    v_slots     integer;
    v_target    integer;
    v_sealed_at timestamptz;
    v_outcome   text;
BEGIN
    IF NOT pg_try_advisory_xact_lock(awa.ring_lock_key(p_ring)) THEN
        RETURN 'skipped_busy';
    END IF;
    SELECT * INTO v_cursor FROM awa.ring_cursor(p_ring);
    SELECT slot_count INTO v_slots FROM awa.ring_config WHERE ring = p_ring;
    v_target := (v_cursor.slot + 1) % v_slots;
    -- The target was sealed when the ring first rotated away from it: the
    -- rotation that followed its last generation.
    EXECUTE format('SELECT min(r.rotated_at) FROM awa.%I r
                     WHERE r.generation > (SELECT max(x.generation) FROM awa.%I x
                                            WHERE x.slot = $1 AND x.generation < $2)',
                   p_ring || '_ring_rotations', p_ring || '_ring_rotations')
       INTO v_sealed_at USING v_target, v_cursor.generation;
    v_sealed_at := COALESCE(v_sealed_at, v_cursor.rotated_at);

    IF awa.ring_slot_empty(p_ring, v_target) THEN
        v_outcome := 'already_pruned';
    ELSIF awa.ring_slot_busy(p_ring, v_target, v_sealed_at) IS NOT NULL THEN
        v_outcome := 'skipped_busy';
    ELSIF NOT awa.lock_ring_slot(p_ring, v_target, p_lock_timeout_ms) THEN
        v_outcome := 'blocked';
    ELSIF awa.ring_slot_busy(p_ring, v_target, v_sealed_at) IS NOT NULL THEN
        v_outcome := 'skipped_busy';
    ELSE
        IF p_ring = 'queue' THEN
            PERFORM awa.carry_forward_and_fold(v_target, v_cursor.slot, v_cursor.generation,
                                               p_failed_retention);
        END IF;
        PERFORM awa.truncate_ring_slot(p_ring, v_target);
        v_outcome := 'pruned';
    END IF;
    PERFORM awa.record_ring_outcome(p_ring, 'prune', v_outcome, v_target, NULL);
    RETURN v_outcome;
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
    IF EXISTS (
        SELECT 1 FROM pg_stat_activity a
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
           AND a.backend_type = 'client backend'
           AND a.backend_xmin IS NOT NULL AND a.xact_start < p_sealed_at
    ) THEN
        RETURN 'pinned by an older transaction';
    END IF;
    IF p_ring = 'queue' THEN
        RETURN awa.queue_slot_busy(p_slot);
    ELSIF p_ring = 'claim' THEN
        -- Count proof: every item handed out in the slot has exactly one piece
        -- of closure evidence (the close guard never writes two).
        EXECUTE format(
            'SELECT (SELECT COALESCE(sum(cardinality(job_ids)), 0) FROM awa.%I)
                  > (SELECT count(*) FROM awa.%I)
                  + (SELECT COALESCE(sum(cardinality(items)), 0) FROM awa.%I)',
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

CREATE OR REPLACE FUNCTION awa.carry_forward_and_fold(
    p_target integer, p_current integer, p_generation bigint, p_failed_retention interval)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    -- Failed rows inside the retention floor become self-contained rows of
    -- the current slot (body copied from the ready row about to go).
    INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state, queue,
                                  priority, attempt, errors, progress, return_value,
                                  attempted_at, finalized_at, kind, args, kwargs, metadata,
                                  tags, max_attempts, created_at, run_at)
    SELECT p_current, p_generation, t.id, t.run_lease, t.state, t.queue, t.priority, t.attempt,
           t.errors, t.progress, t.return_value, t.attempted_at, t.finalized_at, t.kind,
           t.args, t.kwargs, t.metadata, t.tags, t.max_attempts, t.created_at, t.run_at
      FROM awa.terminal_jobs t
     WHERE t.ready_slot = p_target AND t.state = 'failed'
       AND t.finalized_at > now() - p_failed_retention;

    -- Everything else leaves for good: count it permanently.
    INSERT INTO awa.queue_terminal_rollups AS r (queue, state, count)
    SELECT x.queue, x.state, sum(x.n)
      FROM (SELECT d.queue, d.state, count(*) AS n
              FROM awa.done_entries d
             WHERE d.ready_slot = p_target
               AND NOT (d.state = 'failed' AND d.finalized_at > now() - p_failed_retention)
             GROUP BY d.queue, d.state
            UNION ALL
            SELECT b.queue, 'completed', sum(cardinality(b.job_ids))
              FROM awa.receipt_completion_batches b
             WHERE b.ready_slot = p_target
             GROUP BY b.queue) AS x
     GROUP BY x.queue, x.state
    ON CONFLICT (queue, state) DO UPDATE SET count = r.count + EXCLUDED.count;
END
$$;

-- ---------------------------------------------------------------------------
-- Rescue
-- ---------------------------------------------------------------------------

-- Close open receipts that nobody will finish, appending an error entry and
-- routing each like a failed attempt: retry now, or fail (or DLQ) when its
-- attempts are spent.  p_reason 'stale_heartbeat': the owning runtime's
-- heartbeat is older than p_staleness (or the runtime is gone);
-- 'deadline_expired': the attempt passed its deadline.  DLQ routing follows
-- the settings: p_dlq_on / p_dlq_off override p_dlq_default per queue.
CREATE OR REPLACE FUNCTION awa.rescue_attempts(
    p_reason text, p_staleness interval, p_dlq_default boolean, p_dlq_on text[],
    p_dlq_off text[], p_limit integer)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_rescued integer;
BEGIN
    WITH candidates AS (
        SELECT c.claim_slot, c.batch_id, c.item, c.job_id, c.run_lease, c.attempt, c.queue,
               r.max_attempts, r.errors
          FROM awa.open_receipts c
          JOIN awa.ready_entries r
            ON r.ready_slot = c.ready_slot AND r.queue = c.queue AND r.priority = c.priority
           AND r.shard = c.shard AND r.lane_seq = c.lane_seq
         WHERE CASE p_reason
                 WHEN 'deadline_expired' THEN c.deadline_at < clock_timestamp()
                 ELSE NOT EXISTS (SELECT 1 FROM awa.runtime_instances i
                                   WHERE i.id = c.runtime_id
                                     AND i.heartbeat_at > clock_timestamp() - p_staleness)
               END
         LIMIT p_limit
    ), routed AS (
        SELECT c.*,
               CASE WHEN c.attempt < c.max_attempts THEN 'retryable'
                    WHEN c.queue = ANY (p_dlq_on)
                      OR (p_dlq_default AND NOT c.queue = ANY (p_dlq_off)) THEN 'dlq'
                    ELSE 'failed' END AS target,
               (COALESCE(c.errors, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
                   'attempt', c.attempt,
                   'type', 'awa_django.' || p_reason,
                   'message', CASE p_reason
                       WHEN 'deadline_expired' THEN 'attempt passed its deadline'
                       ELSE 'worker stopped heartbeating' END,
                   'traceback', '',
                   'at', clock_timestamp())))::text AS history
          FROM candidates c
    ), ordered AS (
        SELECT * FROM routed ORDER BY batch_id, item
    )
    SELECT count(*) INTO v_rescued
      FROM awa.close_attempts(
          ARRAY(SELECT claim_slot FROM ordered), ARRAY(SELECT batch_id FROM ordered),
          ARRAY(SELECT item FROM ordered), ARRAY(SELECT job_id FROM ordered),
          ARRAY(SELECT run_lease FROM ordered), ARRAY(SELECT target FROM ordered),
          ARRAY(SELECT p_reason FROM ordered), ARRAY(SELECT clock_timestamp() FROM ordered),
          ARRAY(SELECT attempt FROM ordered), ARRAY(SELECT history FROM ordered),
          ARRAY(SELECT NULL::text FROM ordered), ARRAY(SELECT p_reason FROM ordered),
          ARRAY(SELECT NULL::text FROM ordered));
    RETURN v_rescued;
END
$$;

-- Which of these attempts are already closed (a live worker cancels them).
CREATE OR REPLACE FUNCTION awa.closed_attempts(
    p_claim_slots smallint[], p_batch_ids bigint[], p_items integer[], p_job_ids bigint[],
    p_run_leases bigint[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE sql STABLE AS $$
    SELECT i.job_id, i.run_lease
      FROM unnest(p_claim_slots, p_batch_ids, p_items, p_job_ids, p_run_leases)
           AS i(claim_slot, batch_id, item, job_id, run_lease)
     WHERE NOT awa.attempt_is_open(i.claim_slot, i.batch_id, i.item, i.job_id, i.run_lease)
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
