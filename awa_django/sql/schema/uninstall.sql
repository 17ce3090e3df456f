-- Removes the substrate: the whole awa schema and every job in it.  Roles
-- made by `awa_roles` are the operator's and stay; they only lose the
-- privileges the schema carried.
SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));
DROP SCHEMA IF EXISTS awa CASCADE;
