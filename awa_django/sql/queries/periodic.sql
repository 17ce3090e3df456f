-- Periodic (cron) schedules: declaration sync, the leader's evaluation, and
-- the operator's pause/resume/trigger (design in schema/periodic.sql).

-- name: clock
SELECT clock_timestamp()

-- name: sync_lock
-- Start-up syncs of several processes serialise: each sees the table as the
-- previous one left it, and none deadlocks against another's row locks.
SELECT pg_advisory_xact_lock(hashtext('awa_django.periodic_sync'))

-- name: stale_among
SELECT name FROM awa.periodic_schedules
 WHERE stale_at IS NOT NULL AND name = ANY (%(names)s::text[])
 ORDER BY name

-- name: upsert_declared
-- A changed cron or timezone starts over from the next occurrence; so does a
-- stale schedule declared again whose occurrence passed while it was stale
-- (no catch-up for the time nobody declared it).  Otherwise next_fire_at is
-- kept: a restart neither skips nor repeats an occurrence.  paused_at is the
-- operator's and is never touched here.
INSERT INTO awa.periodic_schedules AS s
       (name, kind, cron, timezone, args, kwargs, queue, priority, max_attempts,
        next_fire_at, created_at, declared_at)
SELECT d.name, d.kind, d.cron, d.timezone, d.args::json, d.kwargs::json, d.queue, d.priority,
       d.max_attempts, d.first_fire, %(now)s, %(now)s
  FROM unnest(%(names)s::text[], %(kinds)s::text[], %(crons)s::text[], %(timezones)s::text[],
              %(args)s::text[], %(kwargs)s::text[], %(queues)s::text[],
              %(priorities)s::smallint[], %(max_attempts)s::smallint[],
              %(first_fires)s::timestamptz[])
       AS d(name, kind, cron, timezone, args, kwargs, queue, priority, max_attempts, first_fire)
 ORDER BY d.name
ON CONFLICT (name) DO UPDATE
   SET kind = EXCLUDED.kind,
       cron = EXCLUDED.cron,
       timezone = EXCLUDED.timezone,
       args = EXCLUDED.args,
       kwargs = EXCLUDED.kwargs,
       queue = EXCLUDED.queue,
       priority = EXCLUDED.priority,
       max_attempts = EXCLUDED.max_attempts,
       next_fire_at = CASE
           WHEN s.cron <> EXCLUDED.cron OR s.timezone <> EXCLUDED.timezone
             OR (s.stale_at IS NOT NULL AND s.next_fire_at <= %(now)s)
           THEN EXCLUDED.next_fire_at
           ELSE s.next_fire_at
       END,
       stale_at = NULL,
       declared_at = EXCLUDED.declared_at
RETURNING s.name

-- name: mark_stale
UPDATE awa.periodic_schedules
   SET stale_at = %(now)s
 WHERE stale_at IS NULL AND NOT (name = ANY (%(names)s::text[]))
RETURNING name

-- name: due
-- One row even when nothing is due (name NULL), so the caller learns the
-- clock the rows were chosen by.
SELECT c.now, s.name, s.cron, s.timezone, s.next_fire_at
  FROM (SELECT COALESCE(%(now)s::timestamptz, clock_timestamp()) AS now) AS c
  LEFT JOIN LATERAL (
        SELECT p.name, p.cron, p.timezone, p.next_fire_at
          FROM awa.periodic_schedules p
         WHERE p.next_fire_at <= c.now AND p.paused_at IS NULL AND p.stale_at IS NULL
         ORDER BY p.next_fire_at, p.name
         LIMIT %(limit)s) AS s ON true

-- name: fire
-- The compare-and-set and the enqueue are one statement: the job is written
-- only for the row this UPDATE moved, and the UPDATE re-checks the guard on
-- the latest committed row (a concurrent fire or pause wins).
WITH fired AS (
    UPDATE awa.periodic_schedules s
       SET last_fire_at = s.next_fire_at,
           next_fire_at = %(next)s
     WHERE s.name = %(name)s
       AND s.next_fire_at = %(expected)s
       AND s.paused_at IS NULL
       AND s.stale_at IS NULL
    RETURNING s.kind, s.args, s.kwargs, s.queue, s.priority, s.max_attempts
)
SELECT e.job_id, f.kind, f.queue, f.priority, e.state, e.run_at
  FROM fired AS f
 CROSS JOIN LATERAL awa.enqueue_job(f.queue, f.priority, f.kind, f.args, f.kwargs,
                                    %(metadata)s::jsonb, '{}'::text[], f.max_attempts,
                                    NULL::timestamptz, NULL::text) AS e

-- name: trigger
-- One job now, whatever the schedule's state; next_fire_at is not touched.
WITH s AS MATERIALIZED (
    SELECT p.kind, p.args, p.kwargs, p.queue, p.priority, p.max_attempts
      FROM awa.periodic_schedules p
     WHERE p.name = %(name)s
)
SELECT e.job_id, s.kind, s.queue, s.priority, e.state, e.run_at
  FROM s
 CROSS JOIN LATERAL awa.enqueue_job(s.queue, s.priority, s.kind, s.args, s.kwargs,
                                    %(metadata)s::jsonb, '{}'::text[], s.max_attempts,
                                    NULL::timestamptz, NULL::text) AS e

-- name: pause
-- Returns whether this call paused it (no row: no such schedule).  The row
-- lock waits for a fire in progress; a fire after the commit finds the guard
-- false.
UPDATE awa.periodic_schedules s
   SET paused_at = COALESCE(o.paused_at, clock_timestamp())
  FROM (SELECT p.name, p.paused_at
          FROM awa.periodic_schedules p
         WHERE p.name = %(name)s
           FOR UPDATE) AS o
 WHERE s.name = o.name
RETURNING o.paused_at IS NULL

-- name: lock_for_resume
SELECT p.cron, p.timezone, p.next_fire_at, p.paused_at IS NOT NULL,
       COALESCE(%(now)s::timestamptz, clock_timestamp())
  FROM awa.periodic_schedules p
 WHERE p.name = %(name)s
   FOR UPDATE

-- name: resume
UPDATE awa.periodic_schedules
   SET paused_at = NULL, next_fire_at = %(next)s
 WHERE name = %(name)s AND paused_at IS NOT NULL

-- name: schedules
SELECT name, kind, cron, timezone, args::text, kwargs::text, queue, priority, max_attempts,
       next_fire_at, last_fire_at, paused_at, stale_at, created_at, declared_at
  FROM awa.periodic_schedules
 WHERE %(name)s::text IS NULL OR name = %(name)s
 ORDER BY name
