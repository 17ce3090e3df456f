-- awa_django substrate, version 4: no data-wiping function in production.
--
-- Version 1 shipped awa.reset_data(), which truncates every queue table.
-- It exists for test suites only, and a function that discards every job
-- has no place in a production schema (one mistaken call, or a role that
-- may EXECUTE it, loses the queue).  Test suites now bring their own reset.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 4);

DROP FUNCTION IF EXISTS awa.reset_data();
