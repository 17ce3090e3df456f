-- awa_django substrate, version 12: periodic (cron) schedules.
--
-- A schedule is declared in code (@periodic over a @job) and synchronised
-- into awa.periodic_schedules when a worker or awa_maintenance starts; the
-- row is what the maintenance leader evaluates, so a leader running older or
-- newer code still fires what the table says.  The table is plain control
-- metadata (a few rows, updated once per fire), not part of the hot path.
--
-- Firing is one statement (queries/periodic.sql, "fire"): an UPDATE that
-- moves next_fire_at forward guarded by compare-and-set on the value the
-- leader read (next_fire_at = expected) and by paused_at/stale_at being
-- NULL, whose RETURNING row feeds awa.enqueue_job in the same statement.
-- So the fire and its job commit or vanish together (a leader killed
-- mid-fire leaves next_fire_at as it was, and the next leader fires it),
-- two leaders racing on one occurrence serialise on the row and the second
-- finds the guard false (READ COMMITTED re-checks the WHERE on the row the
-- first one committed), and a pause committed after the leader read the
-- row still wins.
--
-- Stale rows (stale_at set: no process declared them at its last start) and
-- paused rows never fire; nothing deletes a schedule behind an operator's
-- back.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 12);

CREATE TABLE IF NOT EXISTS awa.periodic_schedules (
    name         text PRIMARY KEY,
    kind         text NOT NULL,
    cron         text NOT NULL,
    timezone     text NOT NULL,
    args         json NOT NULL DEFAULT '[]',
    kwargs       json NOT NULL DEFAULT '{}',
    queue        text NOT NULL,
    priority     smallint NOT NULL,
    max_attempts smallint NOT NULL,
    -- The occurrence the leader fires next; the compare-and-set key.
    next_fire_at timestamptz NOT NULL,
    -- The occurrence of the last fire (not when it ran: a catch-up fire after
    -- downtime runs later than its occurrence).
    last_fire_at timestamptz,
    paused_at    timestamptz,
    stale_at     timestamptz,
    -- First declared, and last declared by a starting process.
    created_at   timestamptz NOT NULL DEFAULT now(),
    declared_at  timestamptz NOT NULL DEFAULT now()
);

-- The leader's read: live schedules whose occurrence is due.
CREATE INDEX IF NOT EXISTS periodic_schedules_due_idx
    ON awa.periodic_schedules (next_fire_at)
    WHERE paused_at IS NULL AND stale_at IS NULL;
