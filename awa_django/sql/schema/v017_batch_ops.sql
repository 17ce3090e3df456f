-- awa_django substrate, version 17: Batch operations (set_priority, move_queue) applied by the leader in chunks.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 17);
