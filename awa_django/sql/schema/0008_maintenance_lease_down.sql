-- Unapply 0008_maintenance_lease: drop the lease and step the substrate back.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.release_maintenance_lease(uuid, bigint);
DROP FUNCTION IF EXISTS awa.holds_maintenance_lease(uuid, bigint);
DROP FUNCTION IF EXISTS awa.claim_maintenance_lease(uuid, bigint, interval);
DROP TABLE IF EXISTS awa.maintenance_lease;
ALTER TABLE awa.runtime_instances DROP COLUMN IF EXISTS connection_mode;
UPDATE awa.substrate_info SET schema_version = LEAST(schema_version, 7);
