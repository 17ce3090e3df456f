-- Reverse of v001_substrate.sql: removes the whole awa schema and its data.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP SCHEMA IF EXISTS awa CASCADE;
