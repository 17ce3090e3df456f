-- Undo version 20: drop what it added; awa.ensure_ring_partitions runs as
-- its caller again (its body keeps the slot bound: same arguments, same
-- result).  Privileges are left as they are: no down file widens them.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP FUNCTION IF EXISTS awa.grant_roles(name, name, name);
DROP FUNCTION IF EXISTS awa.restrict_maintenance();
DROP FUNCTION IF EXISTS awa.maintenance_tables();
DROP FUNCTION IF EXISTS awa.maintenance_functions();
DROP FUNCTION IF EXISTS awa.prune_ring_v3(text, integer, interval);
DROP FUNCTION IF EXISTS awa.horizon_readable(name);
ALTER FUNCTION awa.ensure_ring_partitions(text, integer) SECURITY INVOKER RESET search_path;
UPDATE awa.substrate_info SET schema_version = 19;
