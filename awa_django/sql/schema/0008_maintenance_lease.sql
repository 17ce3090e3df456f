-- The maintenance lease: leadership without a session of its own.
--
-- The maintenance election normally holds a session advisory lock
-- (runtime/leadership/leader.py).  Through a transaction-mode pooler a
-- session outlives the client's transaction and is handed to the next
-- client, lock included, so processes whose database is pooled and that
-- have no direct connection (AWA["SESSION_DATABASE"]) elect through this
-- one-row table instead (runtime/leadership/lease.py).
--
-- A process leads while it is the holder and expires_at is ahead.  The
-- leader renews every election interval, pushing expires_at one lease
-- length (the time a silent leader keeps the lead) ahead; a standby takes a
-- lease that expired, and each take increments generation.  The holder
-- checks, before each maintenance task, that the lease is still its own at
-- the generation it won: a leader paused past its lease (SIGSTOP, a VM
-- paused) finds on waking that the lead is gone before it runs another
-- task.  As with the lock, leadership makes maintenance efficient, never
-- correct: every maintenance statement is safe to run concurrently.
--
-- One UPDATE per second on one row: dead tuples of a one-row table, which
-- HOT updates and autovacuum keep to a page; no queue table is touched.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
-- Substrate 8: the maintenance lease.
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 8);

-- How each runtime reaches PostgreSQL (WorkerConfig.connection_mode):
-- 'direct', 'pooled-session' (through a pooler, LISTEN and the election on
-- a direct connection) or 'pooled' (polling, the lease).  NULL: a runtime
-- of a release before this column.
ALTER TABLE awa.runtime_instances ADD COLUMN IF NOT EXISTS connection_mode text;

CREATE TABLE IF NOT EXISTS awa.maintenance_lease (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    holder     uuid        NOT NULL,
    generation bigint      NOT NULL,
    won_at     timestamptz NOT NULL,
    expires_at timestamptz NOT NULL
);

-- Renew (p_runtime holds the lease at p_generation and it has not expired)
-- or take (the lease is free or expired) the lease for p_length; returns the
-- generation p_runtime now leads in, or NULL while another holds it.
CREATE OR REPLACE FUNCTION awa.claim_maintenance_lease(
    p_runtime uuid, p_generation bigint, p_length interval)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_now        timestamptz := clock_timestamp();
    v_generation bigint;
BEGIN
    INSERT INTO awa.maintenance_lease AS m (holder, generation, won_at, expires_at)
    VALUES (p_runtime, 1, v_now, v_now + p_length)
    ON CONFLICT (singleton) DO UPDATE
       SET holder = EXCLUDED.holder,
           generation = CASE WHEN m.expires_at > v_now THEN m.generation
                             ELSE m.generation + 1 END,
           won_at = CASE WHEN m.expires_at > v_now THEN m.won_at ELSE v_now END,
           expires_at = EXCLUDED.expires_at
     WHERE m.expires_at <= v_now
        OR (m.holder = EXCLUDED.holder AND m.generation = p_generation)
    RETURNING m.generation INTO v_generation;
    RETURN v_generation;
END
$$;

-- Whether p_runtime still leads in p_generation (the fence before a task).
CREATE OR REPLACE FUNCTION awa.holds_maintenance_lease(p_runtime uuid, p_generation bigint)
RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM awa.maintenance_lease m
                    WHERE m.holder = p_runtime AND m.generation = p_generation
                      AND m.expires_at > clock_timestamp())
$$;

-- Give the lease up at once (a leader on its way out), so a standby takes
-- it on its next round instead of waiting for it to expire.
CREATE OR REPLACE FUNCTION awa.release_maintenance_lease(p_runtime uuid, p_generation bigint)
RETURNS void
LANGUAGE sql AS $$
    UPDATE awa.maintenance_lease m SET expires_at = clock_timestamp()
     WHERE m.holder = p_runtime AND m.generation = p_generation
$$;
