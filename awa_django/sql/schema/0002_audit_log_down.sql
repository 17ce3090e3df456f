-- Unapply 0002_audit_log: drop the audit log and step the substrate back.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP TABLE IF EXISTS awa.audit_log;
UPDATE awa.substrate_info SET schema_version = LEAST(schema_version, 1);
