-- Substrate inspection.

-- name: substrate_installed
SELECT to_regclass('awa.substrate_info') IS NOT NULL

-- name: schema_version
SELECT schema_version FROM awa.substrate_info

-- name: ping
-- The cheapest round trip: a readiness probe's "the database answers".
SELECT 1
