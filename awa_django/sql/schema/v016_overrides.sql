-- awa_django substrate, version 16: Live per-queue overrides of a running fleet's policy.
--
-- One row per (queue, option) an operator overrides without a restart
-- (ops.set_queue_override, manage.py awa_queue overrides).  The value is the
-- option as JSON, already validated by the settings parser that reads
-- AWA["QUEUES"] (seconds for durations, [max_rate, burst] or null for
-- rate_limit).  Workers read the rows of their queues every few seconds and
-- apply them on top of their settings; deleting a row reverts the option.
-- A control-plane table: a handful of rows, written by operators, never on
-- the hot path.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 16);

CREATE TABLE IF NOT EXISTS awa.queue_overrides (
    queue      text        NOT NULL,
    key        text        NOT NULL CHECK (key IN ('poll_interval', 'claim_batch_size',
                                                   'max_workers', 'rate_limit', 'deadline')),
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, key)
);
