-- The statements of manage.py awa_roles (awa_django.roles).  {role},
-- {owner}, {worker}, {web} and {group} are role names composed with
-- psycopg.sql.Identifier; {role_name}, {owner_name}, {worker_name} and
-- {web_name} the same names as psycopg.sql.Literal values.  awa_django.roles
-- accepts only plain lower-case names, so none can end a dollar quote.
-- Every statement is idempotent: the script runs again after every migrate.

-- name: create_group_role
DO $awa$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {role_name}) THEN
        CREATE ROLE {role} NOLOGIN;
    END IF;
END
$awa$

-- name: create_login_role
-- An existing role keeps its attributes; a new one gets no special ones.
DO $awa$
BEGIN
    IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = {role_name}) THEN
        CREATE ROLE {role} LOGIN INHERIT NOSUPERUSER NOCREATEDB NOCREATEROLE NOREPLICATION
            NOBYPASSRLS;
    END IF;
END
$awa$

-- name: grant_membership
GRANT {group} TO {role}

-- name: act_as_owner
-- Sessions of the owner's login role act as the owner, so what migrate
-- creates belongs to the owner (and gets its default privileges).
ALTER ROLE {role} SET role = {owner_name}

-- name: read_all_stats
-- Prune's horizon gate (awa.horizon_pinned, SECURITY DEFINER) reads other
-- sessions' transactions in pg_stat_activity as the owner; the worker, which
-- runs job code, does not read them (an older awa_roles made it a member).
DO $awa$
BEGIN
    GRANT pg_read_all_stats TO {owner};
    IF EXISTS (SELECT FROM pg_catalog.pg_auth_members m
                WHERE m.roleid = 'pg_read_all_stats'::regrole
                  AND m.member = pg_catalog.to_regrole({worker_name})) THEN
        REVOKE pg_read_all_stats FROM {worker};
    END IF;
END
$awa$

-- name: database_privileges
-- The database this runs in: the three roles connect, the owner creates
-- schema awa (CREATE SCHEMA IF NOT EXISTS checks the privilege first).
DO $awa$
BEGIN
    EXECUTE 'GRANT CONNECT ON DATABASE ' || quote_ident(current_database()) || ' TO '
         || quote_ident({owner_name}) || ', ' || quote_ident({worker_name}) || ', '
         || quote_ident({web_name});
    EXECUTE 'GRANT CREATE ON DATABASE ' || quote_ident(current_database()) || ' TO '
         || quote_ident({owner_name});
END
$awa$

-- name: create_schema
-- A schema that exists keeps its owner until awa.grant_roles hands it and
-- its objects to the owner (after the migration to version 20): the role
-- that migrated it so far must still be able to.
CREATE SCHEMA IF NOT EXISTS awa AUTHORIZATION {owner}

-- name: schema_privileges
DO $awa$
BEGIN
    REVOKE CREATE ON SCHEMA awa FROM PUBLIC;
    REVOKE CREATE ON SCHEMA awa FROM {worker}, {web};
    GRANT USAGE ON SCHEMA awa TO {worker}, {web};
END
$awa$

-- name: default_privileges
-- What the owner creates in schema awa later (tables and partitions,
-- sequences, functions of later versions) gets the privileges below at
-- once; awa.grant_roles covers what exists.  New functions are not
-- executable by PUBLIC (this holds for everything the owner creates).
DO $awa$
BEGIN
    ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA awa
        GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON TABLES TO {worker};
    -- TRUNCATE stays on the ring partitions only: the migration that creates
    -- the other tables takes it back (awa.restrict_maintenance).
    ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA awa
        GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {web};
    ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA awa
        GRANT USAGE, SELECT, UPDATE ON SEQUENCES TO {worker};
    ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA awa
        GRANT USAGE, SELECT ON SEQUENCES TO {web};
    ALTER DEFAULT PRIVILEGES FOR ROLE {owner}
        REVOKE EXECUTE ON FUNCTIONS FROM PUBLIC;
    ALTER DEFAULT PRIVILEGES FOR ROLE {owner} IN SCHEMA awa
        GRANT EXECUTE ON FUNCTIONS TO {worker}, {web};
END
$awa$

-- name: object_privileges
-- Everything that exists in schema awa (schema/roles.sql explains the rules).
DO $awa$
BEGIN
    IF pg_catalog.to_regprocedure('awa.grant_roles(name, name, name)') IS NULL THEN
        RAISE NOTICE 'schema awa holds no substrate of version 20 or later yet: run '
                     'manage.py migrate as the owner, then these statements again';
    ELSE
        PERFORM awa.grant_roles({owner_name}, {worker_name}, {web_name});
    END IF;
END
$awa$

-- name: set_password
-- {verifier} is the SCRAM-SHA-256 verifier computed by the client: the
-- password itself never reaches the server (or its statement log).
ALTER ROLE {role} PASSWORD {verifier}

-- name: current_database
SELECT current_database()
