-- Fleet-wide rate limits (see schema/queues.sql).

-- name: take_rate_tokens
SELECT granted, wait_seconds FROM awa.take_rate_tokens(%s, %s, %s, %s)

-- name: refund_rate_tokens
SELECT awa.refund_rate_tokens(%s, %s, %s)
