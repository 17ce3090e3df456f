-- Queue policy: runtime overrides and fleet-wide rate limits.
--
-- awa.queue_overrides holds one row per (queue, option) an operator
-- changed without a restart.  The value is the option as JSON, validated
-- by the same parser that reads AWA["QUEUES"]; workers re-read the rows of
-- their queues every few seconds, and deleting a row reverts the option.
--
-- A queue with "rate_limit_scope": "fleet" shares one token bucket across
-- every worker: one row per queue in awa.rate_buckets, refilled by elapsed
-- time when a claimer takes from it.  That is one row update per claim
-- statement (not per job), plus one refund when the queue had fewer jobs
-- than tokens taken.  The row is narrow and the table keeps free space on
-- its pages, so the updates stay HOT.

CREATE TABLE IF NOT EXISTS awa.queue_overrides (
    queue      text        NOT NULL,
    key        text        NOT NULL CHECK (key IN ('poll_interval', 'claim_batch_size',
                                                   'max_workers', 'rate_limit', 'deadline')),
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, key)
);

CREATE TABLE IF NOT EXISTS awa.rate_buckets (
    queue       text             PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at timestamptz      NOT NULL
) WITH (fillfactor = 50);

-- Take up to p_want tokens from the queue's bucket (created full on first
-- use) after refilling it at p_rate per second up to p_burst; returns how
-- many were granted and, when none were, how long until one is due.
CREATE OR REPLACE FUNCTION awa.take_rate_tokens(
    p_queue text, p_want integer, p_rate double precision, p_burst integer)
RETURNS TABLE (granted integer, wait_seconds double precision)
LANGUAGE plpgsql AS $$
DECLARE
    v_now    timestamptz := clock_timestamp();
    v_row    awa.rate_buckets;
    v_tokens double precision;
BEGIN
    INSERT INTO awa.rate_buckets (queue, tokens, refilled_at)
    VALUES (p_queue, p_burst, v_now) ON CONFLICT (queue) DO NOTHING;
    SELECT * INTO v_row FROM awa.rate_buckets b WHERE b.queue = p_queue FOR UPDATE;
    v_tokens := LEAST(p_burst::double precision,
                      v_row.tokens + p_rate * GREATEST(0, extract(epoch FROM v_now - v_row.refilled_at)));
    granted := GREATEST(0, LEAST(p_want, floor(v_tokens)::integer));
    UPDATE awa.rate_buckets b SET tokens = v_tokens - granted, refilled_at = v_now
     WHERE b.queue = p_queue;
    wait_seconds := CASE WHEN granted > 0 THEN 0
                         ELSE (1 - (v_tokens - granted)) / p_rate END;
    RETURN NEXT;
END
$$;

-- Give back tokens a claim took but found no job for.
CREATE OR REPLACE FUNCTION awa.refund_rate_tokens(p_queue text, p_count integer, p_burst integer)
RETURNS void
LANGUAGE sql AS $$
    UPDATE awa.rate_buckets b SET tokens = LEAST(p_burst::double precision, b.tokens + p_count)
     WHERE b.queue = p_queue AND p_count > 0
$$;
