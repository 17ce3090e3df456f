-- Removes the outbox, and every job still waiting in it to be relayed.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.outbox'));
DROP SCHEMA IF EXISTS awa_outbox CASCADE;
