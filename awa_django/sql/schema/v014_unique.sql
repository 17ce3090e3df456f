-- awa_django substrate, version 14: unique jobs.
--
-- A unique enqueue takes a claim on its key (a hash of the kind and the
-- chosen parts of the call, computed by the producer) in awa.unique_claims,
-- a narrow control table.  The claim names the job holding it and the states
-- in which it holds: the claim is *released* the moment its job leaves those
-- states, without any write on the hot path -- the next enqueue with the key
-- finds the holder's state (awa.jobs) outside the states and takes the claim
-- over.  So completions, failures, cancels, DLQ moves and purges need not
-- know about uniqueness at all.
--
-- awa.enqueue_unique never raises on a duplicate: it returns the holder's id
-- (existing_id) and writes nothing, so the caller's transaction stays usable.
-- Concurrent producers of one key serialise on the claim row: the first
-- inserts it (the others' INSERT ... ON CONFLICT waits for its transaction),
-- every later one locks it and checks the holder.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 14);

CREATE TABLE IF NOT EXISTS awa.unique_claims (
    unique_key text        PRIMARY KEY,
    job_id     bigint      NOT NULL,
    states     text[]      NOT NULL,
    claimed_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS unique_claims_claimed_at_idx ON awa.unique_claims (claimed_at);

CREATE OR REPLACE FUNCTION awa.enqueue_unique(
    p_unique_key text, p_states text[], p_queue text, p_priority smallint, p_kind text,
    p_args json, p_kwargs json, p_metadata jsonb, p_tags text[], p_max_attempts smallint,
    p_run_at timestamptz, p_ordering_key text,
    OUT job_id bigint, OUT state text, OUT run_at timestamptz, OUT existing_id bigint)
LANGUAGE plpgsql AS $$
DECLARE
    v_holder bigint;
    v_states text[];
    v_state  text;
BEGIN
    INSERT INTO awa.unique_claims AS c (unique_key, job_id, states)
    VALUES (p_unique_key, 0, p_states)
    ON CONFLICT (unique_key) DO NOTHING;
    IF NOT FOUND THEN
        SELECT c.job_id, c.states INTO v_holder, v_states
          FROM awa.unique_claims c
         WHERE c.unique_key = p_unique_key
           FOR UPDATE;
        SELECT j.state INTO v_state FROM awa.jobs j WHERE j.id = v_holder;
        IF v_state = ANY (v_states) THEN
            existing_id := v_holder;
            RETURN;
        END IF;
    END IF;
    SELECT e.job_id, e.state, e.run_at INTO job_id, state, run_at
      FROM awa.enqueue_job(p_queue, p_priority, p_kind, p_args, p_kwargs, p_metadata, p_tags,
                           p_max_attempts, p_run_at, p_ordering_key) AS e;
    UPDATE awa.unique_claims c
       SET job_id = enqueue_unique.job_id, states = p_states, claimed_at = now()
     WHERE c.unique_key = p_unique_key;
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
