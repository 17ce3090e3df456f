-- The transactional outbox (sql/schema/outbox.sql) and the relay's side of
-- it in the queue database (sql/schema/0011_outbox_fence.sql).

-- name: write_one
-- One job, in the caller's transaction on the application's database.
INSERT INTO awa_outbox.entries (slot, job_id, queue, priority, kind, args, kwargs, metadata,
                                tags, max_attempts, run_at, ordering_key, unique_key,
                                unique_states, depends_on, on_dependency_failure)
SELECT r.slot, %s, %s, %s::smallint, %s, %s::json, %s::json, %s::jsonb, %s::text[],
       %s::smallint, %s::timestamptz, %s::text, %s::text, %s::text[], %s::bigint[], %s::text
  FROM awa_outbox.ring r, pg_notify('awa_outbox', '')
RETURNING created_at

-- name: open_slot
-- Before a COPY of entries: the slot to write them in (and the relay's
-- wake-up, delivered at commit).
SELECT r.slot, now() FROM awa_outbox.ring r, pg_notify('awa_outbox', '')

-- name: copy_entries
COPY awa_outbox.entries (slot, job_id, queue, priority, kind, args, kwargs, metadata, tags,
                         max_attempts, run_at, ordering_key, unique_key, unique_states,
                         depends_on, on_dependency_failure)
FROM STDIN

-- name: pending
-- Committed entries not relayed yet, in relay order, and the read's
-- snapshot (for pending_after).  JSON columns as text: the relay writes
-- them to the queue as they are.
SELECT e.slot, e.seq, e.job_id, e.queue, e.priority, e.kind, e.args::text, e.kwargs::text,
       e.metadata::text, e.tags, e.max_attempts, e.run_at, e.ordering_key, e.unique_key,
       e.unique_states, e.depends_on, e.on_dependency_failure, pg_current_snapshot()::text
  FROM awa_outbox.entries e
 WHERE NOT EXISTS (SELECT 1 FROM awa_outbox.relayed r WHERE r.slot = e.slot AND r.seq = e.seq)
 ORDER BY e.seq
 LIMIT %(limit)s

-- name: pending_after
-- The next batch of a backlog (awa_outbox.pending_after).
SELECT * FROM awa_outbox.pending_after(%(after)s, %(xmax)s::xid8, %(xip)s::xid8[], %(limit)s)

-- name: find
-- One job by id, and whether it was relayed.
SELECT e.job_id, e.kind, e.queue, e.priority, e.max_attempts, e.args, e.kwargs, e.metadata,
       e.tags, e.created_at, e.run_at,
       EXISTS (SELECT 1 FROM awa_outbox.relayed r WHERE r.slot = e.slot AND r.seq = e.seq)
  FROM awa_outbox.entries e
 WHERE e.job_id = %s

-- name: mark_relayed
-- The outbox's record of a batch may be lost in a crash: the entries are
-- then read again and the fence turns them away.  So its commit need not
-- wait for the WAL flush (the queue database's commit of the jobs does):
-- the statement turns synchronous_commit off for its transaction itself,
-- once (a materialised CTE), instead of a SET LOCAL round trip before it.
-- (With no entry the planner may skip the CTE: nothing is written then,
-- and the relay never records an empty batch.)
WITH relaxed AS MATERIALIZED (SELECT set_config('synchronous_commit', 'off', true))
INSERT INTO awa_outbox.relayed (slot, seq)
SELECT e.slot, e.seq
  FROM relaxed, unnest(%s::smallint[], %s::bigint[]) AS e(slot, seq)

-- name: depth
-- Entries waiting to be relayed, and when the oldest of them was written.
SELECT count(*), min(e.created_at), now()
  FROM awa_outbox.entries e
 WHERE NOT EXISTS (SELECT 1 FROM awa_outbox.relayed r WHERE r.slot = e.slot AND r.seq = e.seq)

-- name: ring
-- The current slot, when it became current, and which slots hold rows.
SELECT r.slot, r.rotated_at, now(),
       ARRAY(SELECT DISTINCT e.slot FROM awa_outbox.entries e ORDER BY e.slot)
  FROM awa_outbox.ring r

-- name: rotate
-- Make the next slot current, if it is empty and the ring is still at the
-- slot the caller saw (another relay may have turned it).
UPDATE awa_outbox.ring r
   SET slot = (r.slot + 1) %% 4, generation = r.generation + 1, rotated_at = now()
 WHERE r.slot = %(from)s
   AND NOT EXISTS (SELECT 1 FROM awa_outbox.entries e WHERE e.slot = (%(from)s + 1) %% 4)
RETURNING r.slot

-- name: empty_slot
SELECT awa_outbox.empty_slot(%s::smallint, %s)

-- name: installed
SELECT to_regclass('awa_outbox.entries') IS NOT NULL

-- name: fence
-- The keys of a batch this database does not hold yet: only those become jobs.
INSERT INTO awa.outbox_fence (slot, job_id)
SELECT * FROM unnest(%s::smallint[], %s::bigint[])
    ON CONFLICT DO NOTHING
RETURNING job_id

-- name: relay_unique
SELECT awa.relay_unique(%s, %s, %s::text[], %s, %s::smallint, %s, %s::json, %s::json, %s::jsonb,
                        %s::text[], %s::smallint, %s::timestamptz, %s::text)

-- name: relay_dependent
SELECT awa.relay_dependent(%s, %s, %s::smallint, %s, %s::json, %s::json, %s::jsonb, %s::text[],
                           %s::smallint, %s::timestamptz, %s::text, %s::bigint[], %s)

-- name: truncate_fence
SELECT awa.truncate_outbox_fence(%s::smallint)

-- name: reserve_ids
SELECT nextval('awa.job_id_seq') FROM generate_series(1, %s)
