-- Periodic (cron) schedules.
--
-- A schedule is declared in code and synchronised into
-- awa.periodic_schedules when a worker or awa_maintenance starts; the
-- leader evaluates the rows, so a leader running older or newer code fires
-- what the table says.  Firing is one statement (queries/periodic.sql): an
-- UPDATE that moves next_fire_at forward only if it still holds the value
-- the leader read and the row is neither paused nor stale, whose RETURNING
-- row feeds awa.enqueue_job.  The fire and its job commit or vanish
-- together, two leaders racing on one occurrence serialise on the row (the
-- second finds the guard false), and a pause committed meanwhile wins.
-- Stale and paused rows never fire; nothing deletes a schedule behind an
-- operator's back.

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
