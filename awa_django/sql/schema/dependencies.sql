-- Job dependencies: a job that runs once the jobs it depends on completed.
--
-- Dependencies must exist when the dependent is enqueued and ids grow with
-- enqueue time, so every edge points from a newer job to an older one: no
-- cycle can be written.
--
-- A dependent waits in awa.deferred_jobs in state 'waiting' (run_at in the
-- far future, so promotion ignores it; the views, counts, cancel and drain
-- see it like any deferred job).  awa.job_dependencies holds one row per
-- edge still open; awa.dependency_holds one row per waiting job with the
-- number of open edges, the failure policy and the run_at it asked for.
-- The counter makes release exact: two dependencies completing at once
-- each delete their edge and decrement the same row under its lock, so
-- exactly one of them sees zero.
--
-- Release happens in the completion's own transaction: row triggers on
-- receipt_completion_batches, done_entries and dlq_entries call
-- awa.settle_dependencies with the ids that reached an outcome.  Until the
-- first dependent is ever enqueued this costs one read of
-- awa.dependency_use_seq per batch.  A dependent that reaches zero becomes
-- 'scheduled' and promotion places it in its lane (never the closer, which
-- must not wait on a producer's lane lock).  A failed, cancelled or
-- dead-lettered dependency cancels a 'cancel' dependent -- its own terminal
-- row fires the trigger again, so cancellation runs down the graph -- and
-- counts as satisfied for 'run'.
--
-- A dependent enqueued in a transaction still open when its dependency
-- completes is seen by neither side; the leader's
-- awa.recheck_dependencies closes that gap, checking never-checked edges
-- first, then the rest oldest check first.  Settling locks the hold rows
-- in job_id order before deleting any edge, so concurrent settlements
-- queue instead of deadlocking.

-- Used once a dependent was ever enqueued (never reset; see the header).
CREATE SEQUENCE IF NOT EXISTS awa.dependency_use_seq;

CREATE TABLE IF NOT EXISTS awa.job_dependencies (
    depends_on bigint      NOT NULL,
    job_id     bigint      NOT NULL,
    checked_at timestamptz,  -- the recheck's last look; NULL: never looked at
    PRIMARY KEY (depends_on, job_id)
);

CREATE INDEX IF NOT EXISTS job_dependencies_job_idx ON awa.job_dependencies (job_id);

CREATE INDEX IF NOT EXISTS job_dependencies_checked_idx
    ON awa.job_dependencies (checked_at NULLS FIRST);

COMMENT ON TABLE awa.job_dependencies IS
    'Open dependency edges: job_id waits for depends_on to reach a terminal state.';

CREATE TABLE IF NOT EXISTS awa.dependency_holds (
    job_id     bigint      PRIMARY KEY,
    remaining  integer     NOT NULL CHECK (remaining >= 0),
    on_failure text        NOT NULL CHECK (on_failure IN ('cancel', 'run')),
    run_at     timestamptz NOT NULL
);

COMMENT ON TABLE awa.dependency_holds IS
    'Jobs waiting on dependencies: open edges left, failure policy, the run_at to release at.';

-- A job's state by id (NULL when no job has it): the job window's row,
-- a live one first should two sources briefly hold the id.
CREATE OR REPLACE FUNCTION awa.job_state(p_job_id bigint) RETURNS text
LANGUAGE sql STABLE AS $$
    SELECT w.state FROM awa.job_window(p_job_id, p_job_id) w
     ORDER BY w.state IN ('completed', 'failed', 'cancelled', 'dlq')
     LIMIT 1
$$;

-- Cancel waiting dependents (their hold rows already locked and deleted by
-- the caller): their deferred rows become cancelled done rows, whose
-- trigger settles their own dependents.
CREATE OR REPLACE FUNCTION awa.cancel_dependents(p_job_ids bigint[], p_message text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_cursor record;
    v_count  integer;
BEGIN
    DELETE FROM awa.job_dependencies e WHERE e.job_id = ANY (p_job_ids);
    SELECT * INTO v_cursor FROM awa.queue_ring_cursor();
    WITH gone AS (
        DELETE FROM awa.deferred_jobs d
         WHERE d.job_id = ANY (p_job_ids) AND d.state = 'waiting'
     RETURNING d.*)
    INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                  queue, priority, attempt, errors, progress,
                                  attempted_at, kind, args, kwargs, metadata, tags,
                                  max_attempts, created_at, run_at)
    SELECT v_cursor.slot, v_cursor.generation, g.job_id, g.run_lease, 'cancelled',
           g.queue, g.priority, g.attempt,
           awa.error_entry(g.errors, g.attempt, 'awa_django.dependency_failed',
                           p_message)::jsonb,
           g.progress, g.attempted_at, g.kind, g.args, g.kwargs, g.metadata, g.tags,
           g.max_attempts, g.created_at, g.run_at
      FROM gone g;
    GET DIAGNOSTICS v_count = ROW_COUNT;
    RETURN v_count;
END
$$;

-- The dependencies p_job_ids reached a terminal state: 'completed', or a
-- failure ('failed', 'cancelled', 'dlq').  Returns how many dependents it
-- released or cancelled.
CREATE OR REPLACE FUNCTION awa.settle_dependencies(p_job_ids bigint[], p_outcome text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_release bigint[];
    v_cancel  bigint[];
    v_done    integer := 0;
BEGIN
    -- A job that fails or is cancelled while it waits (cancel, drain)
    -- leaves no hold or edge of its own behind.
    IF p_outcome <> 'completed'
       AND EXISTS (SELECT 1 FROM awa.dependency_holds h WHERE h.job_id = ANY (p_job_ids)) THEN
        DELETE FROM awa.dependency_holds h WHERE h.job_id = ANY (p_job_ids);
        DELETE FROM awa.job_dependencies e WHERE e.job_id = ANY (p_job_ids);
    END IF;
    IF NOT EXISTS (SELECT 1 FROM awa.job_dependencies e WHERE e.depends_on = ANY (p_job_ids)) THEN
        RETURN 0;
    END IF;

    -- Lock the dependents' holds in id order, then take the edges.
    PERFORM 1 FROM awa.dependency_holds h
     WHERE h.job_id IN (SELECT e.job_id FROM awa.job_dependencies e
                         WHERE e.depends_on = ANY (p_job_ids))
     ORDER BY h.job_id
       FOR UPDATE;

    IF p_outcome = 'completed' THEN
        WITH gone AS (
            DELETE FROM awa.job_dependencies e WHERE e.depends_on = ANY (p_job_ids)
         RETURNING e.job_id),
        counted AS (SELECT g.job_id, count(*)::integer AS n FROM gone g GROUP BY g.job_id),
        left_over AS (
            UPDATE awa.dependency_holds h SET remaining = h.remaining - c.n
              FROM counted c
             WHERE h.job_id = c.job_id
         RETURNING h.job_id, h.remaining)
        SELECT COALESCE(array_agg(l.job_id) FILTER (WHERE l.remaining = 0), '{}')
          INTO v_release
          FROM left_over l;
    ELSE
        WITH gone AS (
            DELETE FROM awa.job_dependencies e WHERE e.depends_on = ANY (p_job_ids)
         RETURNING e.job_id),
        counted AS (SELECT g.job_id, count(*)::integer AS n FROM gone g GROUP BY g.job_id),
        cancelled AS (
            DELETE FROM awa.dependency_holds h
             USING counted c
             WHERE h.job_id = c.job_id AND h.on_failure = 'cancel'
         RETURNING h.job_id),
        left_over AS (
            UPDATE awa.dependency_holds h SET remaining = h.remaining - c.n
              FROM counted c
             WHERE h.job_id = c.job_id AND h.on_failure = 'run'
         RETURNING h.job_id, h.remaining)
        SELECT COALESCE((SELECT array_agg(x.job_id) FROM cancelled x), '{}'),
               COALESCE((SELECT array_agg(l.job_id) FROM left_over l WHERE l.remaining = 0),
                        '{}')
          INTO v_cancel, v_release;
        IF cardinality(v_cancel) > 0 THEN
            v_done := v_done + awa.cancel_dependents(
                v_cancel, format('a dependency was %s', p_outcome));
        END IF;
    END IF;

    IF cardinality(v_release) > 0 THEN
        WITH released AS (
            DELETE FROM awa.dependency_holds h WHERE h.job_id = ANY (v_release)
         RETURNING h.job_id, h.run_at)
        UPDATE awa.deferred_jobs d
           SET state = 'scheduled', run_at = r.run_at
          FROM released r
         WHERE d.job_id = r.job_id AND d.state = 'waiting';
        v_done := v_done + cardinality(v_release);
    END IF;
    RETURN v_done;
END
$$;

-- The triggers' body.  TG_ARGV[0] names the table's shape: 'batch' (a
-- completion batch row, its job_ids all completed), 'row' (a terminal row,
-- its own state) or 'dlq' (a dead-letter row).
CREATE OR REPLACE FUNCTION awa.settle_outcome() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    IF (SELECT s.is_called FROM awa.dependency_use_seq s) THEN
        IF TG_ARGV[0] = 'batch' THEN
            PERFORM awa.settle_dependencies(NEW.job_ids, 'completed');
        ELSIF TG_ARGV[0] = 'row' THEN
            PERFORM awa.settle_dependencies(ARRAY[NEW.job_id], NEW.state);
        ELSE
            PERFORM awa.settle_dependencies(ARRAY[NEW.job_id], 'dlq');
        END IF;
    END IF;
    RETURN NULL;
END
$$;

-- Write job p_job_id straight to the history as cancelled, never run, with
-- one error entry saying why (a failed dependency; for the outbox relay
-- also a unique key another job holds, or dependencies no job has): the
-- producer's reference then reads the reason (schema version 10).
CREATE OR REPLACE FUNCTION awa.write_cancelled(
    p_job_id bigint, p_queue text, p_priority smallint, p_kind text, p_args json,
    p_kwargs json, p_metadata jsonb, p_tags text[], p_max_attempts smallint,
    p_run_at timestamptz, p_error_type text, p_message text)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    v_cursor record;
BEGIN
    SELECT * INTO v_cursor FROM awa.queue_ring_cursor();
    INSERT INTO awa.done_entries (ready_slot, ready_generation, job_id, run_lease, state,
                                  queue, priority, attempt, errors, attempted_at, kind,
                                  args, kwargs, metadata, tags, max_attempts, created_at,
                                  run_at)
    VALUES (v_cursor.slot, v_cursor.generation, p_job_id, 0, 'cancelled', p_queue,
            p_priority, 0, awa.error_entry(NULL, 0::smallint, p_error_type, p_message)::jsonb,
            NULL, p_kind, p_args, p_kwargs, p_metadata, p_tags, p_max_attempts, now(),
            COALESCE(p_run_at, now()));
END
$$;

-- Enqueue a job that depends on p_depends_on (ids, duplicates ignored).
-- Writes nothing and returns state 'unknown' with the ids no job has when
-- any is missing (the caller raises; its transaction stays usable).
-- Otherwise: every dependency completed -> an ordinary enqueue; one failed
-- under policy 'cancel' -> the job is written cancelled; else it waits.
-- p_job_id: the job's id, or NULL for a new one (schema version 10, for the
-- outbox relay; awa.enqueue_dependent below calls it with NULL).
CREATE OR REPLACE FUNCTION awa.enqueue_dependent_with_id(
    p_job_id bigint, p_queue text, p_priority smallint, p_kind text, p_args json,
    p_kwargs json, p_metadata jsonb, p_tags text[], p_max_attempts smallint,
    p_run_at timestamptz, p_ordering_key text, p_depends_on bigint[], p_on_failure text,
    OUT job_id bigint, OUT state text, OUT run_at timestamptz, OUT missing bigint[])
LANGUAGE plpgsql AS $$
DECLARE
    v_open   bigint[];
    v_failed text;
BEGIN
    WITH deps AS (
        SELECT DISTINCT x.id, awa.job_state(x.id) AS state FROM unnest(p_depends_on) AS x(id))
    SELECT COALESCE(array_agg(d.id ORDER BY d.id) FILTER (WHERE d.state IS NULL), '{}'),
           COALESCE(array_agg(d.id ORDER BY d.id)
                        FILTER (WHERE d.state NOT IN ('completed', 'failed', 'cancelled',
                                                      'dlq')), '{}'),
           min(format('%s (job %s)', d.state, d.id))
               FILTER (WHERE d.state IN ('failed', 'cancelled', 'dlq'))
      INTO missing, v_open, v_failed
      FROM deps d;
    IF cardinality(missing) > 0 THEN
        state := 'unknown';
        RETURN;
    END IF;
    missing := NULL;

    IF v_failed IS NOT NULL AND p_on_failure = 'cancel' THEN
        job_id := COALESCE(p_job_id, nextval('awa.job_id_seq'));
        state := 'cancelled';
        run_at := COALESCE(p_run_at, now());
        PERFORM awa.write_cancelled(job_id, p_queue, p_priority, p_kind, p_args, p_kwargs,
                                    p_metadata, p_tags, p_max_attempts, run_at,
                                    'awa_django.dependency_failed',
                                    'a dependency was ' || v_failed);
        RETURN;
    END IF;

    IF cardinality(v_open) = 0 THEN
        SELECT e.job_id, e.state, e.run_at INTO job_id, state, run_at
          FROM awa.enqueue_job_with_id(p_job_id, p_queue, p_priority, p_kind, p_args,
                                       p_kwargs, p_metadata, p_tags, p_max_attempts, p_run_at,
                                       p_ordering_key) e;
        RETURN;
    END IF;

    job_id := COALESCE(p_job_id, nextval('awa.job_id_seq'));
    state := 'waiting';
    run_at := COALESCE(p_run_at, now());
    INSERT INTO awa.deferred_jobs (job_id, state, queue, priority, kind, args, kwargs,
                                   metadata, tags, max_attempts, ordering_key,
                                   created_at, run_at)
    VALUES (job_id, state, p_queue, p_priority, p_kind, p_args, p_kwargs,
            p_metadata, p_tags, p_max_attempts, p_ordering_key, now(),
            '9999-01-01 00:00:00+00');
    PERFORM nextval('awa.dependency_use_seq');
    INSERT INTO awa.dependency_holds (job_id, remaining, on_failure, run_at)
    VALUES (job_id, cardinality(v_open), p_on_failure, run_at);
    INSERT INTO awa.job_dependencies (depends_on, job_id)
    SELECT o.id, job_id FROM unnest(v_open) AS o(id);
END
$$;

-- awa.enqueue_dependent under a new id (the signature producers call).
CREATE OR REPLACE FUNCTION awa.enqueue_dependent(
    p_queue text, p_priority smallint, p_kind text, p_args json, p_kwargs json,
    p_metadata jsonb, p_tags text[], p_max_attempts smallint, p_run_at timestamptz,
    p_ordering_key text, p_depends_on bigint[], p_on_failure text,
    OUT job_id bigint, OUT state text, OUT run_at timestamptz, OUT missing bigint[])
LANGUAGE plpgsql AS $$
BEGIN
    SELECT e.job_id, e.state, e.run_at, e.missing INTO job_id, state, run_at, missing
      FROM awa.enqueue_dependent_with_id(NULL::bigint, p_queue, p_priority, p_kind, p_args,
                                         p_kwargs, p_metadata, p_tags, p_max_attempts,
                                         p_run_at, p_ordering_key, p_depends_on,
                                         p_on_failure) AS e;
END
$$;

-- The leader's repair pass: of p_limit edges, never checked ones first,
-- those whose dependency is terminal are settled (see the header).  Returns how many
-- dependents it released or cancelled.
CREATE OR REPLACE FUNCTION awa.recheck_dependencies(p_limit integer) RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_states record;
    v_done   integer := 0;
BEGIN
    IF NOT EXISTS (SELECT 1 FROM awa.job_dependencies LIMIT 1) THEN
        RETURN 0;
    END IF;
    FOR v_states IN
        WITH picked AS (
            SELECT e.depends_on, e.job_id FROM awa.job_dependencies e
             ORDER BY e.checked_at NULLS FIRST
             LIMIT p_limit
               FOR UPDATE SKIP LOCKED),
        touched AS (
            UPDATE awa.job_dependencies e SET checked_at = clock_timestamp()
              FROM picked p
             WHERE e.depends_on = p.depends_on AND e.job_id = p.job_id
         RETURNING e.depends_on)
        SELECT s.state, array_agg(s.id) AS ids
          FROM (SELECT DISTINCT t.depends_on AS id, awa.job_state(t.depends_on) AS state
                  FROM touched t) s
         WHERE s.state IN ('completed', 'failed', 'cancelled', 'dlq')
         GROUP BY s.state
    LOOP
        v_done := v_done + awa.settle_dependencies(v_states.ids, v_states.state);
    END LOOP;
    RETURN v_done;
END
$$;

-- What the console shows on a job's page: the open edges it waits on and
-- the waiting jobs that wait on it.
CREATE OR REPLACE FUNCTION awa.job_dependency_edges(p_job_id bigint)
RETURNS TABLE (waiting_on bigint[], blocking bigint[])
LANGUAGE sql STABLE AS $$
    SELECT ARRAY(SELECT e.depends_on FROM awa.job_dependencies e
                  WHERE e.job_id = p_job_id ORDER BY e.depends_on),
           ARRAY(SELECT e.job_id FROM awa.job_dependencies e
                  WHERE e.depends_on = p_job_id ORDER BY e.job_id)
$$;

DROP TRIGGER IF EXISTS settle_dependencies ON awa.receipt_completion_batches;
CREATE TRIGGER settle_dependencies AFTER INSERT ON awa.receipt_completion_batches
    FOR EACH ROW EXECUTE FUNCTION awa.settle_outcome('batch');

DROP TRIGGER IF EXISTS settle_dependencies ON awa.done_entries;
CREATE TRIGGER settle_dependencies AFTER INSERT ON awa.done_entries
    FOR EACH ROW WHEN (NEW.state IN ('completed', 'failed', 'cancelled'))
    EXECUTE FUNCTION awa.settle_outcome('row');

DROP TRIGGER IF EXISTS settle_dependencies ON awa.dlq_entries;
CREATE TRIGGER settle_dependencies AFTER INSERT ON awa.dlq_entries
    FOR EACH ROW EXECUTE FUNCTION awa.settle_outcome('dlq');
