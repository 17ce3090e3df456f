-- Leases: attempts that need mutable state.
--
-- A short attempt lives and dies as a receipt.  One that needs more -- a
-- registered callback, a wait, explicit heartbeats, a long-running queue --
-- escalates to a row in the lease ring (awa.materialize_lease).  In the
-- same transaction its receipt gets closure evidence ('materialized'), so a
-- long wait never pins the claim ring; the lease carries the attempt's lane
-- keys and ready slot, so the queue ring keeps the job body while the lease
-- lives.
--
-- Leases are the one mutable execution table: heartbeats and parking are
-- UPDATEs, and the close is a DELETE.  The row's disappearance is the
-- closure evidence and the DELETE is the guard: two closers serialise on
-- the row and the second finds nothing.  Lease rows are few and short
-- lived; the lease ring truncates a slot once it holds none.
--
-- awa.close_leases writes the same outcome rows as a receipt close (a
-- narrow terminal row, a deferred row for a retry, a dead-letter row).
-- External callbacks (awa.resolve_callback) and the rescue of stale,
-- expired and timed-out leases go through it.
--
-- A sequential wait (ctx.wait_for_callback) keeps the lease 'running': its
-- handler is still there, heartbeats it and takes the payload of a resume.
-- What the spec calls waiting_external for it is shown, not stored as the
-- state: the wait marks the callback it blocks on (waiting_for, set by
-- awa.mark_callback_wait in the same round trip as its first look for the
-- payload), and awa.lease_state reads a lease whose waiting_for is its
-- registered callback as waiting_external.  The resume spends the callback
-- (callback_id NULL), so the same row reads running again with no second
-- write; a callback registered but not yet waited on reads running.  The
-- lease is the one mutable execution table, so the mark is an UPDATE of a
-- row that heartbeats already update (no indexed column: a HOT update),
-- never a write on the hot append-only tables.

-- Added by substrate 3 (migration 0003_dlq_retry_ready re-runs this file):
-- taken here, first, like rings.sql for 0001, so two migrate runs serialise.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
-- Substrate 3: the sequential wait's mark below, and awa.dlq_retry placing
-- retried jobs ready at once (dlq.sql).
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 3);

-- The callback a sequential wait blocks on (see the header).  Added after
-- the table, not in rings.sql's CREATE TABLE, so a fresh install and a
-- migrated one have the same columns in the same order.
ALTER TABLE awa.leases ADD COLUMN IF NOT EXISTS waiting_for uuid;

-- The state a lease is shown in (awa.jobs, awa.job_window, the counts).
CREATE OR REPLACE FUNCTION awa.lease_state(p_state text, p_callback_id uuid, p_waiting_for uuid)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN p_waiting_for = p_callback_id THEN 'waiting_external' ELSE p_state END
$$;

-- Escalate an open receipt to a lease (or update the lease it already has).
-- p_callback_id registers a callback that times out after p_callback_timeout.
-- Returns false when the attempt is no longer open (rescued, cancelled).
CREATE OR REPLACE FUNCTION awa.materialize_lease(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint, p_claim_nonce bigint, p_runtime uuid, p_callback_id uuid,
    p_callback_timeout interval)
RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    v_item   record;
    v_cursor record;
BEGIN
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    -- The receipt's batch lock, as every close takes it.
    PERFORM 1 FROM awa.lease_claim_batches b
      WHERE b.claim_slot = p_claim_slot AND b.batch_id = p_batch_id
        FOR UPDATE;
    UPDATE awa.leases l
       SET heartbeat_at = clock_timestamp(),
           callback_id = COALESCE(p_callback_id, l.callback_id),
           callback_timeout_at = CASE WHEN p_callback_id IS NULL THEN l.callback_timeout_at
                                      ELSE clock_timestamp() + p_callback_timeout END
     WHERE l.job_id = p_job_id AND l.run_lease = p_run_lease
       AND l.claim_nonce IS NOT DISTINCT FROM p_claim_nonce AND l.state = 'running';
    IF FOUND THEN
        RETURN true;
    END IF;
    IF NOT awa.receipt_is_open(p_claim_slot, p_batch_id, p_item, p_job_id, p_run_lease,
                               p_claim_nonce) THEN
        RETURN false;
    END IF;
    SELECT c.* INTO v_item
      FROM awa.claim_items c
     WHERE c.claim_slot = p_claim_slot AND c.batch_id = p_batch_id AND c.item = p_item;
    SELECT * INTO v_cursor FROM awa.ring_cursor('lease');
    INSERT INTO awa.leases (lease_slot, lease_generation, job_id, run_lease, claim_slot, state,
                            runtime_id, heartbeat_at, deadline_at, callback_id,
                            callback_timeout_at, queue, priority, effective_priority, shard,
                            lane_seq, ready_slot, attempt, claimed_at, batch_id, item,
                            claim_nonce)
    VALUES (v_cursor.slot, v_cursor.generation, p_job_id, p_run_lease, p_claim_slot, 'running',
            p_runtime, clock_timestamp(), v_item.deadline_at, p_callback_id,
            CASE WHEN p_callback_id IS NOT NULL THEN clock_timestamp() + p_callback_timeout END,
            v_item.queue, v_item.priority, v_item.effective_priority, v_item.shard,
            v_item.lane_seq, v_item.ready_slot, v_item.attempt, v_item.claimed_at, p_batch_id,
            p_item, p_claim_nonce);
    INSERT INTO awa.lease_claim_closures (claim_slot, batch_id, item, job_id, run_lease, outcome)
    VALUES (p_claim_slot, p_batch_id, p_item, p_job_id, p_run_lease, 'materialized');
    RETURN true;
END
$$;

-- Park a running lease that has a callback: the handler returned
-- WaitForCallback, its worker slot is free, the job waits for the callback
-- (or its timeout).  False when the lease is gone (a callback or a cancel
-- closed it first) or has no callback registered.
CREATE OR REPLACE FUNCTION awa.park_lease(
    p_job_id bigint, p_run_lease bigint, p_claim_nonce bigint, p_progress text)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE awa.leases l
       SET state = 'waiting_external', runtime_id = NULL, heartbeat_at = clock_timestamp()
     WHERE l.job_id = p_job_id AND l.run_lease = p_run_lease
       AND l.claim_nonce IS NOT DISTINCT FROM p_claim_nonce
       AND l.state = 'running' AND l.callback_id IS NOT NULL;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    IF p_progress IS NOT NULL THEN
        INSERT INTO awa.attempt_state AS s (job_id, run_lease, progress, updated_at)
        VALUES (p_job_id, p_run_lease, p_progress::jsonb, now())
        ON CONFLICT ON CONSTRAINT attempt_state_pkey
        DO UPDATE SET progress = EXCLUDED.progress, updated_at = EXCLUDED.updated_at;
    END IF;
    RETURN true;
END
$$;

-- A handler enters (p_waiting) or leaves a sequential wait on p_callback_id:
-- mark or unmark its running lease, and return the payload a resume handed
-- to that callback (JSON text; 'null' for a null payload), or NULL when none
-- came yet.  One round trip: the wait's first look for the payload marks it,
-- and a wait that times out unmarks and looks one last time.  A resume that
-- came first spent the callback, so nothing is marked.
CREATE OR REPLACE FUNCTION awa.mark_callback_wait(
    p_job_id bigint, p_run_lease bigint, p_callback_id uuid, p_waiting boolean)
RETURNS text
LANGUAGE sql AS $$
    WITH marked AS (
        UPDATE awa.leases l
           SET waiting_for = CASE WHEN p_waiting THEN p_callback_id END
         WHERE l.job_id = p_job_id AND l.run_lease = p_run_lease
           AND l.callback_id = p_callback_id AND l.state = 'running'
        RETURNING 1
    )
    SELECT (s.callback_result -> 'payload')::text
      FROM awa.attempt_state s
     WHERE s.job_id = p_job_id AND s.run_lease = p_run_lease
       AND s.callback_result ->> 'callback_id' = p_callback_id::text
$$;

-- Close leased attempts; the closure arrays of awa.close_attempts minus the
-- receipt locators (a lease is found by its attempt: the lease ring may
-- have rotated since the claim).  Every target, completed included, leaves
-- its row through awa.write_outcomes.  Returns the attempts closed; a
-- closure missing from the result was stale.
CREATE OR REPLACE FUNCTION awa.close_leases(
    p_job_ids bigint[], p_run_leases bigint[], p_claim_nonces bigint[], p_targets text[],
    p_outcomes text[], p_run_ats timestamptz[], p_attempts smallint[], p_errors text[],
    p_results text[], p_reasons text[], p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_won awa.won_closure[];
BEGIN
    -- The guard: the lease row goes; a second closer finds nothing.
    WITH input AS (
        SELECT DISTINCT ON (i.job_id, i.run_lease)
               i.job_id, i.run_lease, i.claim_nonce,
               COALESCE(i.target, 'completed') AS target, i.run_at,
               COALESCE(i.attempt, 0)::smallint AS attempt, i.errors, i.result, i.reason,
               i.progress
          FROM unnest(p_job_ids, p_run_leases, p_claim_nonces, p_targets, p_run_ats,
                      p_attempts, p_errors, p_results, p_reasons, p_progress)
               AS i(job_id, run_lease, claim_nonce, target, run_at, attempt, errors, result,
                    reason, progress)
    ), won AS (
        DELETE FROM awa.leases l
         USING input i
         WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease
           AND l.claim_nonce IS NOT DISTINCT FROM i.claim_nonce
        RETURNING ROW(i.job_id, i.run_lease, i.target, i.run_at, i.attempt, i.errors, i.result,
                      i.reason, i.progress, l.queue, l.priority, l.shard, l.lane_seq,
                      l.ready_slot, l.attempt, l.claimed_at)::awa.won_closure AS closure
    )
    SELECT COALESCE(array_agg(w.closure), '{}') INTO v_won FROM won w;

    PERFORM count(*) FROM awa.write_outcomes(v_won);
    DELETE FROM awa.attempt_state s
     USING unnest(v_won) w
     WHERE s.job_id = w.job_id AND s.run_lease = w.run_lease;
    RETURN QUERY SELECT w.job_id, w.run_lease FROM unnest(v_won) w;
END
$$;

-- Resolve a callback.  p_action: 'complete' (result p_payload), 'fail'
-- (terminal: DLQ or failed, p_error in the history), 'retry' (due now),
-- 'resume' (a sequential wait: the payload is handed to the waiting
-- handler, the lease goes on; on a parked attempt, which has no handler to
-- hand it to, it completes like 'complete').  Returns the attempt's new
-- state, or NULL when no live lease has this callback (unknown, already
-- resolved, or its attempt closed).
CREATE OR REPLACE FUNCTION awa.resolve_callback(
    p_callback_id uuid, p_action text, p_payload text, p_error text, p_dlq_default boolean,
    p_dlq_on text[], p_dlq_off text[])
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_lease  record;
    v_target text;
    v_errors text;
BEGIN
    SELECT l.*, r.max_attempts, r.errors AS history
      INTO v_lease
      FROM awa.leases l
      JOIN awa.ready_entries r
        ON r.ready_slot = l.ready_slot AND r.queue = l.queue AND r.priority = l.priority
       AND r.shard = l.shard AND r.lane_seq = l.lane_seq
     WHERE l.callback_id = p_callback_id
       FOR UPDATE OF l;
    IF NOT FOUND THEN
        RETURN NULL;
    END IF;
    IF p_action = 'resume' AND v_lease.state = 'running' THEN
        INSERT INTO awa.attempt_state AS s (job_id, run_lease, callback_result, updated_at)
        VALUES (v_lease.job_id, v_lease.run_lease,
                json_build_object('callback_id', p_callback_id,
                                  'payload', COALESCE(p_payload, 'null')::json),
                now())
        ON CONFLICT ON CONSTRAINT attempt_state_pkey
        DO UPDATE SET callback_result = EXCLUDED.callback_result, updated_at = EXCLUDED.updated_at;
        -- The id is spent: a second resume finds nothing.
        UPDATE awa.leases l SET callback_id = NULL, callback_timeout_at = NULL
         WHERE l.job_id = v_lease.job_id AND l.run_lease = v_lease.run_lease;
        PERFORM pg_notify('awa!callbacks', p_callback_id::text);
        RETURN 'resumed';
    END IF;
    IF p_action IN ('complete', 'resume') THEN
        v_target := 'completed';
    ELSIF p_action = 'retry' THEN
        v_target := 'retryable';
    ELSIF p_action = 'fail' THEN
        v_target := awa.failure_target(v_lease.attempt, v_lease.max_attempts, v_lease.queue,
                                       p_dlq_default, p_dlq_on, p_dlq_off, false);
        v_errors := awa.error_entry(v_lease.history, v_lease.attempt, 'awa_django.callback_failed',
                                    COALESCE(p_error, 'callback failed'));
    ELSE
        RAISE EXCEPTION 'unknown callback action %', p_action USING ERRCODE = '22023';
    END IF;
    PERFORM awa.close_leases(ARRAY[v_lease.job_id], ARRAY[v_lease.run_lease],
                             ARRAY[v_lease.claim_nonce], ARRAY[v_target],
                             ARRAY['callback_' || p_action], ARRAY[clock_timestamp()],
                             ARRAY[v_lease.attempt], ARRAY[v_errors],
                             ARRAY[CASE WHEN v_target = 'completed' THEN p_payload END],
                             ARRAY[CASE WHEN v_target = 'dlq' THEN 'callback_failed' END],
                             ARRAY[NULL::text]);
    IF v_lease.state = 'running' THEN
        -- A handler is still running this attempt: tell its worker.
        PERFORM pg_notify('awa!cancel', v_lease.job_id || ':' || v_lease.run_lease);
    END IF;
    RETURN v_target;
END
$$;

-- The heartbeat of a runtime's leases.  Only the attempts it still runs
-- (named by the caller) are refreshed: a lease the runtime lost track of (a
-- materialisation whose reply never arrived) goes stale and is rescued.
CREATE OR REPLACE FUNCTION awa.heartbeat_leases(
    p_runtime uuid, p_job_ids bigint[], p_run_leases bigint[])
RETURNS integer
LANGUAGE sql AS $$
    WITH beat AS (
        UPDATE awa.leases l SET heartbeat_at = clock_timestamp()
          FROM unnest(p_job_ids, p_run_leases) AS i(job_id, run_lease)
         WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease
           AND l.runtime_id = p_runtime AND l.state = 'running'
        RETURNING 1
    )
    SELECT count(*)::integer FROM beat
$$;
