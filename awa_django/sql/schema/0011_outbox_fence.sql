-- The relay's fence: which outbox entries the queue already holds.
--
-- In outbox mode (AWA["OUTBOX_DATABASE"], docs/howto/queue-database.md)
-- producers write jobs to awa_outbox.entries in the application's database,
-- inside the application's transaction, and a relay moves the committed
-- ones here.  The two databases commit separately, so a relay can die after
-- this database committed a batch and before the outbox recorded it as
-- relayed; the next relay then reads the same entries again.  Each batch
-- therefore first inserts its entries' keys here, in the same transaction
-- as the jobs, and only the keys that insert is the first to write get a
-- job: an entry becomes a job exactly once, whichever relay, however often
-- retried.
--
-- The key is the entry's job id: reserved from this database's
-- awa.job_id_seq, it names one entry for good, even across a reinstall of
-- the outbox (whose own sequence starts again).  The table is partitioned
-- by the entry's outbox slot like awa_outbox.entries, and a partition is
-- emptied by TRUNCATE when the outbox empties its slot (after every entry
-- in it was recorded as relayed, under a lock no relay in flight can hold
-- at the same time): append-only, no dead tuples.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
-- Substrate 10: the outbox relay's fence.
UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 10);

CREATE TABLE IF NOT EXISTS awa.outbox_fence (
    slot       smallint    NOT NULL,
    job_id     bigint      NOT NULL,
    relayed_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (slot, job_id)
) PARTITION BY LIST (slot);

DO $$
BEGIN
    FOR s IN 0..3 LOOP
        EXECUTE format('CREATE TABLE IF NOT EXISTS awa.outbox_fence_%s '
                       'PARTITION OF awa.outbox_fence FOR VALUES IN (%s)', s, s);
    END LOOP;
END
$$;

-- Empty the fence partition of an outbox slot the outbox is emptying (it
-- holds that slot's lock, so no relay is writing keys of it here).
CREATE OR REPLACE FUNCTION awa.truncate_outbox_fence(p_slot smallint)
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    EXECUTE format('TRUNCATE awa.outbox_fence_%s', p_slot);
END
$$;

-- A relayed unique job: written under its reserved id, or -- its key held
-- by another job -- written cancelled with the holder named, so the
-- producer's reference (state 'pending' when it enqueued) reads the
-- outcome.  Returns the state it was written in.
CREATE OR REPLACE FUNCTION awa.relay_unique(
    p_job_id bigint, p_unique_key text, p_states text[], p_queue text, p_priority smallint,
    p_kind text, p_args json, p_kwargs json, p_metadata jsonb, p_tags text[],
    p_max_attempts smallint, p_run_at timestamptz, p_ordering_key text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_written record;
BEGIN
    SELECT * INTO v_written
      FROM awa.enqueue_unique_with_id(p_job_id, p_unique_key, p_states, p_queue, p_priority,
                                      p_kind, p_args, p_kwargs, p_metadata, p_tags,
                                      p_max_attempts, p_run_at, p_ordering_key);
    IF v_written.existing_id IS NULL THEN
        RETURN v_written.state;
    END IF;
    PERFORM awa.write_cancelled(p_job_id, p_queue, p_priority, p_kind, p_args, p_kwargs,
                                p_metadata, p_tags, p_max_attempts, p_run_at,
                                'awa_django.unique_conflict',
                                format('job %s holds the unique key', v_written.existing_id));
    RETURN 'cancelled';
END
$$;

-- A relayed job with dependencies: written under its reserved id (waiting,
-- due, or cancelled by a failed dependency), or -- a dependency no job has
-- -- written cancelled saying which.  Returns the state it was written in.
CREATE OR REPLACE FUNCTION awa.relay_dependent(
    p_job_id bigint, p_queue text, p_priority smallint, p_kind text, p_args json,
    p_kwargs json, p_metadata jsonb, p_tags text[], p_max_attempts smallint,
    p_run_at timestamptz, p_ordering_key text, p_depends_on bigint[], p_on_failure text)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_written record;
BEGIN
    SELECT * INTO v_written
      FROM awa.enqueue_dependent_with_id(p_job_id, p_queue, p_priority, p_kind, p_args,
                                         p_kwargs, p_metadata, p_tags, p_max_attempts,
                                         p_run_at, p_ordering_key, p_depends_on, p_on_failure);
    IF v_written.state <> 'unknown' THEN
        RETURN v_written.state;
    END IF;
    PERFORM awa.write_cancelled(p_job_id, p_queue, p_priority, p_kind, p_args, p_kwargs,
                                p_metadata, p_tags, p_max_attempts, p_run_at,
                                'awa_django.unknown_dependency',
                                format('no job has id %s',
                                       array_to_string(v_written.missing, ', ')));
    RETURN 'cancelled';
END
$$;
