-- [from v016_overrides.sql]
CREATE TABLE IF NOT EXISTS awa.queue_overrides (
    queue      text        NOT NULL,
    key        text        NOT NULL CHECK (key IN ('poll_interval', 'claim_batch_size',
                                                   'max_workers', 'rate_limit', 'deadline')),
    value      jsonb       NOT NULL,
    updated_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (queue, key)
);

-- [from v018_fleet_rate.sql]
CREATE TABLE IF NOT EXISTS awa.rate_buckets (
    queue       text             PRIMARY KEY,
    tokens      double precision NOT NULL,
    refilled_at timestamptz      NOT NULL
) WITH (fillfactor = 50);

-- [from v018_fleet_rate.sql]
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

-- [from v018_fleet_rate.sql]
-- Give back tokens a claim took but found no job for.
CREATE OR REPLACE FUNCTION awa.refund_rate_tokens(p_queue text, p_count integer, p_burst integer)
RETURNS void
LANGUAGE sql AS $$
    UPDATE awa.rate_buckets b SET tokens = LEAST(p_burst::double precision, b.tokens + p_count)
     WHERE b.queue = p_queue AND p_count > 0
$$;
