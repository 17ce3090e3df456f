-- The transactional outbox, installed in the application's database
-- (AWA["OUTBOX_DATABASE"]) when the queue lives in another one
-- (AWA["DATABASE"]).  Only migrate on that alias runs this file.
--
-- Producers append one row per job to awa_outbox.entries inside the
-- application's transaction, so a job is relayed exactly when the business
-- rows it goes with commit.  Its id is the queue's own (reserved in blocks
-- from awa.job_id_seq of the queue database), so the reference enqueue
-- returns names the job the relay writes.  Each write notifies the channel
-- awa_outbox at commit, which wakes the relay (it also polls).
--
-- Storage follows the queue's rings: four slots, one of them current
-- (awa_outbox.ring).  Nothing is ever updated or deleted in a slot: the
-- relay records each relayed entry by appending its key to awa_outbox.relayed,
-- and empties a slot with TRUNCATE once the ring has moved past it and every
-- entry in it is recorded.  A producer that read the ring just before it
-- turned may still write into the previous slot; such a row is relayed like
-- any other (the relay reads every slot), and the TRUNCATE happens under an
-- ACCESS EXCLUSIVE lock taken NOWAIT, after a check made under that lock,
-- so it never removes a row it has not seen relayed.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.outbox'));

CREATE SCHEMA IF NOT EXISTS awa_outbox;

CREATE TABLE IF NOT EXISTS awa_outbox.ring (
    singleton  boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    slot       smallint    NOT NULL DEFAULT 0,
    generation bigint      NOT NULL DEFAULT 0,
    rotated_at timestamptz NOT NULL DEFAULT now()
);
INSERT INTO awa_outbox.ring DEFAULT VALUES ON CONFLICT DO NOTHING;

-- Relay order: entries are relayed by seq.  Jobs of one transaction keep
-- their order, and so do jobs of transactions that committed one after the
-- other (the later one drew its numbers after the earlier one committed).
CREATE SEQUENCE IF NOT EXISTS awa_outbox.entry_seq;

CREATE TABLE IF NOT EXISTS awa_outbox.entries (
    slot         smallint    NOT NULL,
    seq          bigint      NOT NULL DEFAULT nextval('awa_outbox.entry_seq'),
    job_id       bigint      NOT NULL,
    queue        text        NOT NULL,
    priority     smallint    NOT NULL,
    kind         text        NOT NULL,
    args         json        NOT NULL,
    kwargs       json        NOT NULL,
    metadata     jsonb       NOT NULL,
    tags         text[]      NOT NULL,
    max_attempts smallint    NOT NULL,
    run_at       timestamptz,
    ordering_key text,
    created_at   timestamptz NOT NULL DEFAULT now(),
    -- A unique job's claim key and states, checked when it is relayed.
    unique_key   text,
    unique_states text[],
    -- Dependencies (ids of jobs in the queue, or relayed before this one).
    depends_on   bigint[],
    on_dependency_failure text,
    -- The writing transaction: lets the relay read a backlog batch after
    -- batch without reading its relayed part again (see the pending_after
    -- statement of sql/queries/outbox.sql).
    xid          xid8        NOT NULL DEFAULT pg_current_xact_id()
) PARTITION BY LIST (slot);

CREATE TABLE IF NOT EXISTS awa_outbox.relayed (
    slot       smallint    NOT NULL,
    seq        bigint      NOT NULL,
    relayed_at timestamptz NOT NULL DEFAULT now()
) PARTITION BY LIST (slot);

DO $$
BEGIN
    FOR s IN 0..3 LOOP
        EXECUTE format('CREATE TABLE IF NOT EXISTS awa_outbox.entries_%s '
                       'PARTITION OF awa_outbox.entries FOR VALUES IN (%s)', s, s);
        EXECUTE format('CREATE TABLE IF NOT EXISTS awa_outbox.relayed_%s '
                       'PARTITION OF awa_outbox.relayed FOR VALUES IN (%s)', s, s);
    END LOOP;
END
$$;
CREATE INDEX IF NOT EXISTS entries_seq ON awa_outbox.entries (seq);
CREATE INDEX IF NOT EXISTS entries_xid ON awa_outbox.entries (xid);
CREATE INDEX IF NOT EXISTS relayed_seq ON awa_outbox.relayed (seq);
-- ops.get_job of a job not relayed yet (state 'pending').
CREATE INDEX IF NOT EXISTS entries_job_id ON awa_outbox.entries (job_id);

-- Empty slot p_slot if every entry in it was relayed: lock its two
-- partitions NOWAIT (a producer or relay still using them makes this return
-- NULL at once, for the relay to try again later), count what is not
-- relayed, and TRUNCATE when that is nothing.  Returns the count found
-- (0: emptied), or NULL when the lock was not free.  The caller commits;
-- until then the lock keeps late producers and other relays out of the slot.
CREATE OR REPLACE FUNCTION awa_outbox.empty_slot(p_slot smallint, p_truncate boolean)
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_left bigint;
BEGIN
    BEGIN
        EXECUTE format('LOCK TABLE awa_outbox.entries_%s, awa_outbox.relayed_%s '
                       'IN ACCESS EXCLUSIVE MODE NOWAIT', p_slot, p_slot);
    EXCEPTION WHEN lock_not_available THEN
        RETURN NULL;
    END;
    EXECUTE format('SELECT count(*) FROM awa_outbox.entries_%s e '
                   'WHERE NOT EXISTS (SELECT 1 FROM awa_outbox.relayed_%s r '
                   '                   WHERE r.seq = e.seq)', p_slot, p_slot)
       INTO v_left;
    IF v_left = 0 AND p_truncate THEN
        EXECUTE format('TRUNCATE awa_outbox.entries_%s, awa_outbox.relayed_%s', p_slot, p_slot);
    END IF;
    RETURN v_left;
END
$$;

-- The relay's next batch, read on from the previous read (PL/pgSQL, so a
-- relay's session plans it once, not at every batch): the entries after
-- p_after by seq, through a bounded range of the seq index (numbers that
-- rolled-back transactions drew leave gaps), less any another relay took
-- meanwhile; and the entries at or before p_after that the previous read
-- could not see: their sequence numbers were drawn before that read (a
-- later one is past its last entry) by a transaction its snapshot did not
-- see -- one in progress then (p_xip) or one whose id came later (at least
-- p_xmax).  With the read's own snapshot, as text, for the next call.
CREATE OR REPLACE FUNCTION awa_outbox.pending_after(
    p_after bigint, p_xmax xid8, p_xip xid8[], p_limit integer)
RETURNS TABLE (slot smallint, seq bigint, job_id bigint, queue text, priority smallint,
               kind text, args text, kwargs text, metadata text, tags text[],
               max_attempts smallint, run_at timestamptz, ordering_key text,
               unique_key text, unique_states text[], depends_on bigint[],
               on_dependency_failure text, snapshot text)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    SELECT e.slot, e.seq, e.job_id, e.queue, e.priority, e.kind, e.args::text, e.kwargs::text,
           e.metadata::text, e.tags, e.max_attempts, e.run_at, e.ordering_key, e.unique_key,
           e.unique_states, e.depends_on, e.on_dependency_failure, pg_current_snapshot()::text
      FROM ((SELECT n.*
               FROM (SELECT * FROM awa_outbox.entries x
                      WHERE x.seq > p_after AND x.seq <= p_after + 4 * p_limit
                      ORDER BY x.seq
                      LIMIT p_limit) n
              WHERE NOT EXISTS (SELECT 1 FROM awa_outbox.relayed r
                                 WHERE r.slot = n.slot AND r.seq = n.seq))
            UNION ALL
            (SELECT l.* FROM awa_outbox.entries l
              WHERE l.seq <= p_after
                AND (l.xid >= p_xmax OR l.xid = ANY (p_xip))
                AND NOT EXISTS (SELECT 1 FROM awa_outbox.relayed r
                                 WHERE r.slot = l.slot AND r.seq = l.seq))) e
     ORDER BY e.seq
     LIMIT p_limit;
END
$$;
