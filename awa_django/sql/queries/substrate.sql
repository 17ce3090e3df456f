-- Substrate inspection and test support.

-- name: substrate_installed
SELECT to_regclass('awa.substrate_info') IS NOT NULL

-- name: schema_version
SELECT schema_version FROM awa.substrate_info

-- name: reset_data
SELECT awa.reset_data()
