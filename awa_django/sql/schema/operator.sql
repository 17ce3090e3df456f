-- Operator actions on single jobs and whole queues: cancel, retry, drain.
--
-- None of them updates or deletes a row of a hot table.  Cancelling an
-- available job writes a ready tombstone and a terminal row; a claimed job
-- is closed through the same closes the workers use (so a worker that
-- still runs it learns its attempt is stale); a deferred, dead-lettered or
-- held job is removed from its hold table (awa.cancel_backlog, which
-- awa.cancel_job and awa.drain_queue share).  Both lock the claim heads of
-- the lanes they touch, so a claim skips such a lane for that moment.
--
-- awa.retry_job runs a failed or cancelled job again under the same id.
-- The terminal row it leaves behind is listed in awa.done_supersessions
-- (awa.supersede_terminal, shared with the DLQ's awa.move_failed_to_dlq),
-- which the views and prune's fold honour; the queue ring's shared lock
-- keeps a prune from folding a slot while one of its rows is superseded.

-- Cancel backlog rows: scheduled or waiting for a retry (deferred_jobs), or
-- held for a concurrency slot (concurrency_waiting), of one job (p_job_id)
-- or of a whole queue (p_queue), the other argument NULL.  No ready row
-- holds their body, so each becomes a self-contained terminal row in the
-- queue ring's current slot.  Returns how many were cancelled.
CREATE OR REPLACE FUNCTION awa.cancel_backlog(p_job_id bigint, p_queue text, p_reason text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_cursor    record;
    v_cancelled bigint;
BEGIN
    -- Planned with the actual values: the NULL filter drops out of each
    -- OR, leaving one index scan per table.
    PERFORM set_config('plan_cache_mode', 'force_custom_plan', true);
    SELECT * INTO v_cursor FROM awa.queue_ring_cursor();
    WITH deferred AS (
        DELETE FROM awa.deferred_jobs d WHERE d.job_id = p_job_id OR d.queue = p_queue
        RETURNING d.job_id, d.run_lease, d.queue, d.priority, d.attempt, d.errors, d.progress,
                  d.attempted_at, d.kind, d.args, d.kwargs, d.metadata, d.tags,
                  d.max_attempts, d.created_at, d.run_at
    ), held AS (
        DELETE FROM awa.concurrency_waiting w WHERE w.job_id = p_job_id OR w.queue = p_queue
        RETURNING w.job_id, w.run_lease, w.queue, w.priority, w.attempt, w.errors, w.progress,
                  NULL::timestamptz AS attempted_at, w.kind, w.args, w.kwargs, w.metadata,
                  w.tags, w.max_attempts, w.created_at, w.run_at
    )
    INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                  queue, priority, attempt, errors, progress,
                                  attempted_at, kind, args, kwargs, metadata, tags,
                                  max_attempts, created_at, run_at)
    SELECT v_cursor.slot, v_cursor.generation, g.job_id, g.run_lease, 'cancelled', g.queue,
           g.priority, g.attempt,
           awa.error_entry(g.errors, g.attempt, 'awa_django.cancelled', p_reason)::jsonb,
           g.progress, g.attempted_at, g.kind, g.args, g.kwargs, g.metadata, g.tags,
           g.max_attempts, g.created_at, g.run_at
      FROM (TABLE deferred UNION ALL TABLE held) g;
    GET DIAGNOSTICS v_cancelled = ROW_COUNT;
    RETURN v_cancelled;
END
$$;

-- What an operator action answers for a job it left as it was:
-- 'already_<state>', or NULL for an unknown id.
CREATE OR REPLACE FUNCTION awa.already_state(p_job_id bigint)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT 'already_' || j.state FROM awa.jobs j WHERE j.id = p_job_id
$$;

-- The newest terminal row of a job in one of p_states, now listed in
-- awa.done_supersessions for p_reason (the views and prune's fold pass
-- over it); NULL when the job has no such row or another transaction
-- superseded it first.  Holds the queue ring's lock shared, so a prune
-- never folds a slot while one of its rows is being superseded.  Running
-- a job again (awa.retry_job) and moving it to the DLQ
-- (awa.move_failed_to_dlq) both start here.
CREATE OR REPLACE FUNCTION awa.supersede_terminal(
    p_job_id bigint, p_states text[], p_reason text)
RETURNS awa.terminal_jobs
LANGUAGE plpgsql AS $$
DECLARE
    v_done awa.terminal_jobs;
BEGIN
    PERFORM pg_advisory_xact_lock_shared(awa.ring_lock_key('queue'));
    SELECT t.* INTO v_done
      FROM awa.terminal_jobs t
     WHERE t.id = p_job_id AND t.state = ANY (p_states)
     ORDER BY t.finalized_at DESC
     LIMIT 1;
    IF FOUND THEN
        INSERT INTO awa.done_supersessions (job_id, run_lease, finalized_at, ready_slot, reason)
        VALUES (p_job_id, v_done.run_lease, v_done.finalized_at, v_done.ready_slot, p_reason)
        ON CONFLICT DO NOTHING;
        IF FOUND THEN
            RETURN v_done;
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- The ordering key a job was enqueued with (its newest ready row).
CREATE OR REPLACE FUNCTION awa.job_ordering_key(p_job_id bigint)
RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT r.ordering_key FROM awa.ready_entries r
     WHERE r.job_id = p_job_id ORDER BY r.run_lease DESC LIMIT 1
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
    v_ready   record;
    v_receipt record;
    v_lease   record;
    v_errors  text;
BEGIN
    -- Held for a concurrency slot, scheduled, or waiting for a retry.
    IF awa.cancel_backlog(p_job_id, NULL, p_reason) > 0 THEN
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
        PERFORM awa.close_attempts(
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

    RETURN awa.already_state(p_job_id);
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
    v_done awa.terminal_jobs := awa.supersede_terminal(p_job_id, ARRAY['failed', 'cancelled'],
                                                       p_reason);
BEGIN
    IF v_done.id IS NULL THEN
        RETURN awa.already_state(p_job_id);
    END IF;
    INSERT INTO awa.deferred_jobs (job_id, state, queue, priority, kind, args, kwargs,
                                   metadata, tags, attempt, max_attempts, run_lease,
                                   ordering_key, errors, progress, created_at, run_at,
                                   attempted_at)
    VALUES (p_job_id, 'retryable', v_done.queue, v_done.priority, v_done.kind, v_done.args,
            v_done.kwargs, v_done.metadata, v_done.tags, 0, v_done.max_attempts,
            v_done.run_lease, awa.job_ordering_key(p_job_id), v_done.errors, v_done.progress,
            v_done.created_at, clock_timestamp(), v_done.attempted_at);
    RETURN 'retried';
END
$$;

-- ---------------------------------------------------------------------------
-- Queue control
-- ---------------------------------------------------------------------------

-- Cancel every available, scheduled, retry-waiting and held job of a queue;
-- running and waiting attempts finish as they would.  Returns how many were
-- cancelled.  The queue's claim heads are locked for the moment it takes,
-- so no claim can pass a row while it is being tombstoned.
CREATE OR REPLACE FUNCTION awa.drain_queue(p_queue text, p_reason text)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_ready bigint;
BEGIN
    PERFORM 1 FROM awa.queue_claim_heads h WHERE h.queue = p_queue
      ORDER BY h.priority, h.shard FOR UPDATE;

    WITH live AS (
        SELECT r.ready_slot, r.queue, r.priority, r.shard, r.lane_seq, r.job_id, r.run_lease,
               r.attempt, r.errors, r.progress
          FROM awa.ready_segments s
          JOIN awa.queue_claim_heads h
            ON h.queue = s.queue AND h.priority = s.priority AND h.shard = s.shard
          JOIN awa.ready_entries r
            ON r.ready_slot = s.ready_slot AND r.queue = s.queue AND r.priority = s.priority
           AND r.shard = s.shard AND r.lane_seq >= GREATEST(s.start_seq, h.claim_seq)
           AND r.lane_seq < s.end_seq
         WHERE s.queue = p_queue AND s.end_seq > h.claim_seq
           AND NOT EXISTS (SELECT 1 FROM awa.ready_tombstones t
                            WHERE t.ready_slot = r.ready_slot AND t.queue = r.queue
                              AND t.priority = r.priority AND t.shard = r.shard
                              AND t.lane_seq = r.lane_seq)),
    stone AS (
        INSERT INTO awa.ready_tombstones (ready_slot, queue, priority, shard, lane_seq, job_id,
                                          reason)
        SELECT ready_slot, queue, priority, shard, lane_seq, job_id, 'cancelled' FROM live)
    INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state, queue,
                                  priority, shard, lane_seq, attempt, errors, progress)
    SELECT l.ready_slot, 0, l.job_id, l.run_lease, 'cancelled', l.queue, l.priority, l.shard,
           l.lane_seq, l.attempt,
           awa.error_entry(l.errors, l.attempt, 'awa_django.cancelled', p_reason)::jsonb,
           l.progress
      FROM live l;
    GET DIAGNOSTICS v_ready = ROW_COUNT;

    -- Then its scheduled, retry-waiting and held jobs.
    RETURN v_ready + awa.cancel_backlog(NULL, p_queue, p_reason);
END
$$;
