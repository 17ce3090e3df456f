-- awa_django substrate, version 16: Live per-queue overrides of a running fleet's policy.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 16);
