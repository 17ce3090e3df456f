-- Fleet-wide rate limits (see v018_fleet_rate.sql).

-- name: take_rate_tokens
SELECT granted, wait_seconds FROM awa.take_rate_tokens(%s, %s, %s, %s)

-- name: refund_rate_tokens
SELECT awa.refund_rate_tokens(%s, %s, %s)
