-- awa_django substrate, version 11: leases for attempts that need mutable
-- state, external callbacks, and cancellation in every state.
--
-- A short attempt lives as a receipt: an item of a claim batch, closed by
-- evidence.  An attempt that needs more -- a registered callback, a
-- sequential wait, explicit heartbeats, a long-running queue -- escalates to
-- a lease row in the lease ring (awa.materialize_lease).  In the same
-- transaction its receipt gets closure evidence ('materialized'), so a long
-- wait never pins the claim ring; the lease carries the attempt's lane keys
-- and ready slot, so the queue ring keeps the job body while the lease
-- lives (awa.queue_slot_busy checks leases by their own ready slot).
--
-- Leases are the one mutable execution table: heartbeats and the parked
-- state are UPDATEs, the close is a DELETE (the row's disappearance is the
-- closure evidence, and the DELETE is the guard: two closers serialise on
-- the row, the second finds nothing).  Lease rows are few and short-lived;
-- the lease ring truncates slots once they are empty.
--
-- Closing a lease (awa.close_leases) writes the same outcome rows as a
-- receipt close: a narrow terminal row in the ready slot, a deferred row
-- for a retry, a dead-letter row.  Callbacks (awa.resolve_callback) and
-- rescue of stale, expired and timed-out leases (awa.rescue_leases) go
-- through it.  awa.cancel_job cancels a job in any live state with
-- append-only writes on the hot tables: a ready tombstone plus a terminal
-- row for an available job, never an UPDATE or DELETE of a ready row.
-- awa.retry_job runs a failed or cancelled job again; the terminal row it
-- leaves behind is listed in awa.done_supersessions, which the read views
-- and prune's fold honour.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 11);

ALTER TABLE awa.leases
    ADD COLUMN IF NOT EXISTS queue              text,
    ADD COLUMN IF NOT EXISTS priority           smallint,
    ADD COLUMN IF NOT EXISTS effective_priority smallint,
    ADD COLUMN IF NOT EXISTS shard              smallint,
    ADD COLUMN IF NOT EXISTS lane_seq           bigint,
    ADD COLUMN IF NOT EXISTS ready_slot         smallint,
    ADD COLUMN IF NOT EXISTS attempt            smallint,
    ADD COLUMN IF NOT EXISTS claimed_at         timestamptz,
    ADD COLUMN IF NOT EXISTS batch_id           bigint,
    ADD COLUMN IF NOT EXISTS item               integer,
    ADD COLUMN IF NOT EXISTS claim_nonce        bigint;

-- Only the receipt: is this claim item handed out and not closed?
CREATE OR REPLACE FUNCTION awa.receipt_is_open(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint, p_claim_nonce bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM awa.lease_claim_batches b
                    WHERE b.batch_id = p_batch_id AND b.claim_slot = p_claim_slot
                      AND b.job_ids[p_item] = p_job_id AND b.run_leases[p_item] = p_run_lease
                      AND b.claim_nonce IS NOT DISTINCT FROM p_claim_nonce)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closures x
                        WHERE x.batch_id = p_batch_id AND x.item = p_item
                          AND x.claim_slot = p_claim_slot)
       AND NOT EXISTS (SELECT 1 FROM awa.lease_claim_closure_batches y
                        WHERE y.batch_id = p_batch_id AND y.claim_slot = p_claim_slot
                          AND p_item = ANY (y.items))
$$;

-- An attempt is open while its receipt is, or once materialised, while its
-- lease lives (progress writes and the worker's "was I closed?" use this).
CREATE OR REPLACE FUNCTION awa.attempt_is_open_v2(
    p_claim_slot smallint, p_batch_id bigint, p_item integer, p_job_id bigint,
    p_run_lease bigint, p_claim_nonce bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT awa.receipt_is_open(p_claim_slot, p_batch_id, p_item, p_job_id, p_run_lease,
                               p_claim_nonce)
        OR EXISTS (SELECT 1 FROM awa.leases l
                    WHERE l.job_id = p_job_id AND l.run_lease = p_run_lease
                      AND l.claim_nonce IS NOT DISTINCT FROM p_claim_nonce)
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

-- Close leased attempts; same closure arrays as awa.close_attempts_v3 minus
-- the receipt locators (a lease is found by its attempt: the lease ring
-- may have rotated since the claim).  Returns the attempts closed; a
-- closure missing from the result was stale.
CREATE OR REPLACE FUNCTION awa.close_leases(
    p_job_ids bigint[], p_run_leases bigint[], p_claim_nonces bigint[], p_targets text[],
    p_outcomes text[], p_run_ats timestamptz[], p_attempts smallint[], p_errors text[],
    p_results text[], p_reasons text[], p_progress text[])
RETURNS TABLE (job_id bigint, run_lease bigint)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    WITH input AS (
        SELECT DISTINCT ON (i.job_id, i.run_lease)
               i.job_id, i.run_lease, i.claim_nonce,
               COALESCE(i.target, 'completed') AS target, i.run_at,
               COALESCE(i.attempt, 0)::smallint AS next_attempt, i.errors, i.result, i.reason,
               i.progress
          FROM unnest(p_job_ids, p_run_leases, p_claim_nonces, p_targets, p_run_ats,
                      p_attempts, p_errors, p_results, p_reasons, p_progress)
               AS i(job_id, run_lease, claim_nonce, target, run_at, attempt, errors, result,
                    reason, progress)
    ), won AS (
        -- The guard: the lease row goes; a second closer finds nothing.
        DELETE FROM awa.leases l
         USING input i
         WHERE l.job_id = i.job_id AND l.run_lease = i.run_lease
           AND l.claim_nonce IS NOT DISTINCT FROM i.claim_nonce
        RETURNING i.*, l.queue, l.priority, l.shard, l.lane_seq, l.ready_slot,
                  l.attempt AS claim_attempt, l.claimed_at
    ), settled AS (
        SELECT w.*, r.kind, r.args, r.kwargs, r.metadata, r.tags, r.max_attempts,
               r.ordering_key, r.created_at, r.run_at AS ready_run_at,
               COALESCE(w.errors::jsonb, r.errors) AS history,
               COALESCE(w.progress::jsonb, s.progress, r.progress) AS last_progress
          FROM won w
          JOIN awa.ready_entries r
            ON r.ready_slot = w.ready_slot AND r.queue = w.queue AND r.priority = w.priority
           AND r.shard = w.shard AND r.lane_seq = w.lane_seq
          LEFT JOIN awa.attempt_state s ON s.job_id = w.job_id AND s.run_lease = w.run_lease
    ), terminal AS (
        -- Narrow rows in the ready slot; a completion keeps no progress.
        INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                      queue, priority, shard, lane_seq, attempt, errors,
                                      progress, return_value, attempted_at)
        SELECT t.ready_slot, 0, t.job_id, t.run_lease, t.target, t.queue, t.priority, t.shard,
               t.lane_seq, t.claim_attempt,
               CASE WHEN t.target = 'completed' THEN NULL ELSE t.history END,
               CASE WHEN t.target = 'completed' THEN NULL ELSE t.last_progress END,
               t.result::json, t.claimed_at
          FROM settled t
         WHERE t.target IN ('completed', 'failed', 'cancelled')
    ), deferred AS (
        INSERT INTO awa.deferred_jobs (job_id, state, queue, priority, kind, args, kwargs,
                                       metadata, tags, attempt, max_attempts, run_lease,
                                       ordering_key, errors, progress, created_at, run_at,
                                       attempted_at)
        SELECT t.job_id, t.target, t.queue, t.priority, t.kind, t.args, t.kwargs, t.metadata,
               t.tags, t.next_attempt, t.max_attempts, t.run_lease, t.ordering_key, t.history,
               t.last_progress, t.created_at, COALESCE(t.run_at, clock_timestamp()),
               t.claimed_at
          FROM settled t
         WHERE t.target IN ('retryable', 'scheduled')
    ), dead AS (
        INSERT INTO awa.dlq_entries (job_id, queue, priority, kind, args, kwargs, metadata,
                                     tags, attempt, max_attempts, run_lease, ordering_key,
                                     errors, progress, reason, created_at, run_at,
                                     attempted_at)
        SELECT t.job_id, t.queue, t.priority, t.kind, t.args, t.kwargs, t.metadata, t.tags,
               t.claim_attempt, t.max_attempts, t.run_lease, t.ordering_key, t.history,
               t.last_progress, COALESCE(t.reason, 'failed'), t.created_at, t.ready_run_at,
               t.claimed_at
          FROM settled t
         WHERE t.target = 'dlq'
    ), forgotten AS (
        DELETE FROM awa.attempt_state s
         USING won w
         WHERE s.job_id = w.job_id AND s.run_lease = w.run_lease
    )
    SELECT w.job_id, w.run_lease FROM won w;
END
$$;

-- One error-history entry written by the database (rescue, callbacks).
CREATE OR REPLACE FUNCTION awa.error_entry(
    p_history jsonb, p_attempt smallint, p_type text, p_message text)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT (COALESCE(p_history, '[]'::jsonb) || jsonb_build_array(jsonb_build_object(
               'attempt', p_attempt, 'type', p_type, 'message', p_message,
               'traceback', '', 'at', clock_timestamp())))::text
$$;

-- Where a failed attempt goes: retry while attempts remain, else DLQ or failed.
CREATE OR REPLACE FUNCTION awa.failure_target(
    p_attempt smallint, p_max_attempts smallint, p_queue text, p_dlq_default boolean,
    p_dlq_on text[], p_dlq_off text[], p_retry boolean)
RETURNS text
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN p_retry AND p_attempt < p_max_attempts THEN 'retryable'
                WHEN p_queue = ANY (p_dlq_on)
                  OR (p_dlq_default AND NOT p_queue = ANY (p_dlq_off)) THEN 'dlq'
                ELSE 'failed' END
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

-- Cancel a job in whatever live state it is.  Returns 'cancelled', or
-- 'already_<state>' when it had finished ('already_completed', ...:
-- nothing changes), or NULL for an unknown id.  A
-- running attempt is closed at once and its worker is told over NOTIFY
-- (channel awa!cancel, payload "job_id:run_lease"); the heartbeat's
-- closed-attempt check is the fallback.
CREATE OR REPLACE FUNCTION awa.cancel_job(p_job_id bigint, p_reason text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_row     awa.deferred_jobs;
    v_ready   record;
    v_receipt record;
    v_lease   record;
    v_cursor  record;
    v_state   text;
    v_errors  text;
BEGIN
    -- Scheduled or waiting for a retry: a plain backlog row.
    DELETE FROM awa.deferred_jobs d WHERE d.job_id = p_job_id RETURNING d.* INTO v_row;
    IF FOUND THEN
        SELECT * INTO v_cursor FROM awa.queue_ring_cursor();
        INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                      queue, priority, attempt, errors, progress,
                                      attempted_at, kind, args, kwargs, metadata, tags,
                                      max_attempts, created_at, run_at)
        VALUES (v_cursor.slot, v_cursor.generation, v_row.job_id, v_row.run_lease, 'cancelled',
                v_row.queue, v_row.priority, v_row.attempt,
                awa.error_entry(v_row.errors, v_row.attempt, 'awa_django.cancelled',
                                p_reason)::jsonb,
                v_row.progress, v_row.attempted_at, v_row.kind, v_row.args, v_row.kwargs,
                v_row.metadata, v_row.tags, v_row.max_attempts, v_row.created_at, v_row.run_at);
        RETURN 'cancelled';
    END IF;

    -- Available: the lane's claim head is locked (claims skip the lane for
    -- that moment) and the row, still ahead of the cursor, is tombstoned.
    SELECT r.ready_slot, r.queue, r.priority, r.shard, r.lane_seq, r.run_lease, r.attempt,
           r.errors, r.progress
      INTO v_ready
      FROM awa.ready_entries r
      JOIN awa.queue_claim_heads h
        ON h.queue = r.queue AND h.priority = r.priority AND h.shard = r.shard
     WHERE r.job_id = p_job_id AND r.lane_seq >= h.claim_seq
       AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                        WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                          AND t.priority = r.priority AND t.shard = r.shard
                          AND t.lane_seq = r.lane_seq)
       FOR UPDATE OF h;
    IF FOUND THEN
        -- Rechecked under the head lock (a claim may have passed the row).
        IF EXISTS (SELECT 1 FROM awa.queue_claim_heads h
                    WHERE h.queue = v_ready.queue AND h.priority = v_ready.priority
                      AND h.shard = v_ready.shard AND h.claim_seq <= v_ready.lane_seq) THEN
            INSERT INTO awa.ready_tombstones (ready_slot, queue, priority, shard, lane_seq, job_id,
                                              reason)
            VALUES (v_ready.ready_slot, v_ready.queue, v_ready.priority, v_ready.shard,
                    v_ready.lane_seq, p_job_id, 'cancelled');
            INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                          queue, priority, shard, lane_seq, attempt, errors,
                                          progress)
            VALUES (v_ready.ready_slot, 0, p_job_id, v_ready.run_lease, 'cancelled',
                    v_ready.queue, v_ready.priority, v_ready.shard, v_ready.lane_seq,
                    v_ready.attempt,
                    awa.error_entry(v_ready.errors, v_ready.attempt, 'awa_django.cancelled',
                                    p_reason)::jsonb,
                    v_ready.progress);
            RETURN 'cancelled';
        END IF;
    END IF;

    -- Running on a receipt: closed through the guarded close.
    SELECT c.claim_slot, c.batch_id, c.item, c.job_id, c.run_lease, c.attempt, b.claim_nonce,
           r.errors
      INTO v_receipt
      FROM awa.open_receipts c
      JOIN awa.lease_claim_batches b ON b.claim_slot = c.claim_slot AND b.batch_id = c.batch_id
      JOIN awa.ready_entries r
        ON r.ready_slot = c.ready_slot AND r.queue = c.queue AND r.priority = c.priority
       AND r.shard = c.shard AND r.lane_seq = c.lane_seq
     WHERE c.job_id = p_job_id;
    IF FOUND THEN
        v_errors := awa.error_entry(v_receipt.errors, v_receipt.attempt, 'awa_django.cancelled',
                                    p_reason);
        PERFORM awa.close_attempts_v3(
            ARRAY[v_receipt.claim_slot], ARRAY[v_receipt.batch_id], ARRAY[v_receipt.item],
            ARRAY[v_receipt.job_id], ARRAY[v_receipt.run_lease], ARRAY[v_receipt.claim_nonce],
            ARRAY['cancelled'], ARRAY['cancelled'], ARRAY[NULL::timestamptz],
            ARRAY[v_receipt.attempt], ARRAY[v_errors], ARRAY[NULL::text], ARRAY[p_reason],
            ARRAY[NULL::text]);
        IF awa.receipt_is_open(v_receipt.claim_slot, v_receipt.batch_id, v_receipt.item,
                               v_receipt.job_id, v_receipt.run_lease,
                               v_receipt.claim_nonce) THEN
            RAISE EXCEPTION 'job % could not be cancelled; try again', p_job_id
                USING ERRCODE = '40001';
        END IF;
        PERFORM pg_notify('awa!cancel', p_job_id || ':' || v_receipt.run_lease);
        IF EXISTS (SELECT 1 FROM awa.done_entries d
                    WHERE d.job_id = p_job_id AND d.run_lease = v_receipt.run_lease
                      AND d.state = 'cancelled') THEN
            RETURN 'cancelled';
        END IF;
    END IF;

    -- Running or waiting on a lease.
    SELECT l.job_id, l.run_lease, l.claim_nonce, l.attempt, l.state, r.errors
      INTO v_lease
      FROM awa.leases l
      JOIN awa.ready_entries r
        ON r.ready_slot = l.ready_slot AND r.queue = l.queue AND r.priority = l.priority
       AND r.shard = l.shard AND r.lane_seq = l.lane_seq
     WHERE l.job_id = p_job_id
       FOR UPDATE OF l;
    IF FOUND THEN
        PERFORM awa.close_leases(
            ARRAY[v_lease.job_id], ARRAY[v_lease.run_lease], ARRAY[v_lease.claim_nonce],
            ARRAY['cancelled'], ARRAY['cancelled'], ARRAY[NULL::timestamptz],
            ARRAY[v_lease.attempt],
            ARRAY[awa.error_entry(v_lease.errors, v_lease.attempt, 'awa_django.cancelled',
                                  p_reason)],
            ARRAY[NULL::text], ARRAY[p_reason], ARRAY[NULL::text]);
        IF v_lease.state = 'running' THEN
            PERFORM pg_notify('awa!cancel', p_job_id || ':' || v_lease.run_lease);
        END IF;
        RETURN 'cancelled';
    END IF;

    SELECT j.state INTO v_state FROM awa.jobs j WHERE j.id = p_job_id;
    RETURN 'already_' || v_state;
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

-- The queue-ring gate: a lease keeps its job body (by its own ready slot).
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
    IF EXISTS (SELECT 1 FROM awa.open_receipts c WHERE c.ready_slot = p_slot) THEN
        RETURN 'open receipts';
    END IF;
    RETURN NULL;
END
$$;

-- Every job in every state (version 11: materialised attempts come from
-- their lease; an open receipt is always running).
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
SELECT l.job_id, r.kind, l.queue, l.state, l.effective_priority, l.attempt, r.max_attempts,
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
  FROM awa.dlq_entries q;

-- Rescue receipts and leases in one call (the leader's rescue task): stale
-- heartbeats and expired deadlines for both, callback timeouts for leases.
CREATE OR REPLACE FUNCTION awa.rescue_v2(
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

-- Prune's fold (version 11): superseded rows are neither carried forward
-- (terminal_jobs skips them) nor counted, and their supersessions go with
-- the slot.
CREATE OR REPLACE FUNCTION awa.carry_forward_and_fold(
    p_target integer, p_current integer, p_generation bigint, p_failed_retention interval)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
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

-- Run a failed or cancelled job again: same id, a fresh attempt count, due
-- now (through deferred_jobs and promotion).  Returns 'retried',
-- 'already_<state>' when the job is not failed or cancelled (nothing
-- changes), or NULL for an unknown id.  Holds the queue ring's lock shared,
-- so a prune never folds a slot while one of its rows is being superseded.
CREATE OR REPLACE FUNCTION awa.retry_job(p_job_id bigint, p_reason text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_done  record;
    v_state text;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(awa.ring_lock_key('queue'));
    SELECT t.* INTO v_done
      FROM awa.terminal_jobs t
     WHERE t.id = p_job_id AND t.state IN ('failed', 'cancelled')
     ORDER BY t.finalized_at DESC
     LIMIT 1;
    IF FOUND THEN
        INSERT INTO awa.done_supersessions (job_id, run_lease, finalized_at, ready_slot, reason)
        VALUES (p_job_id, v_done.run_lease, v_done.finalized_at, v_done.ready_slot, p_reason)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            INSERT INTO awa.deferred_jobs (job_id, state, queue, priority, kind, args, kwargs,
                                           metadata, tags, attempt, max_attempts, run_lease,
                                           ordering_key, errors, progress, created_at, run_at,
                                           attempted_at)
            VALUES (p_job_id, 'retryable', v_done.queue, v_done.priority, v_done.kind,
                    v_done.args, v_done.kwargs, v_done.metadata, v_done.tags, 0,
                    v_done.max_attempts, v_done.run_lease,
                    (SELECT r.ordering_key FROM awa.ready_entries r
                      WHERE r.job_id = p_job_id ORDER BY r.run_lease DESC LIMIT 1),
                    v_done.errors, v_done.progress, v_done.created_at, clock_timestamp(),
                    v_done.attempted_at);
            RETURN 'retried';
        END IF;
    END IF;
    SELECT j.state INTO v_state FROM awa.jobs j WHERE j.id = p_job_id;
    RETURN 'already_' || v_state;
END
$$;

-- Lease slots are emptied by DELETE, not TRUNCATE: a lease slot counts as
-- empty only once its storage is gone too, so prune truncates it (and its
-- dead rows) before the ring turns onto it again.  Other rings unchanged.
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
