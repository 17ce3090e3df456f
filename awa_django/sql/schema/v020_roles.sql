-- awa_django substrate, version 20: least-privilege roles, and a prune that
-- refuses to run blind.
--
-- Three roles (created by manage.py awa_roles, see docs/howto/roles.md):
--
-- * the owner owns schema awa and everything in it and runs the
--   migrations;
-- * the worker runs jobs and maintenance: every row privilege on every
--   table (TRUNCATE included: prune empties ring slots with it), no CREATE
--   on the schema, no ownership;
-- * the web role enqueues, reads and runs operator actions: SELECT,
--   INSERT, UPDATE, DELETE, never TRUNCATE, no CREATE, no maintenance.
--
-- Maintenance belongs to the roles that may empty the rings.  A role is a
-- maintainer when it holds TRUNCATE on awa.ready_entries (the owner and
-- superusers always are).  awa.restrict_maintenance() applies that rule to
-- the maintenance functions (awa.maintenance_functions(): rotate, prune,
-- rescue, promotion, cleanup, partition creation) and to the tables only
-- maintenance writes (awa.maintenance_tables(): ring ledgers, ring status,
-- rollups, runtime rows): PUBLIC loses EXECUTE and every write privilege
-- on them, so does any other grantee that is no maintainer, and each role
-- holding TRUNCATE on awa.ready_entries directly is granted EXECUTE.  The
-- rule needs no role names, so it runs here, at migrate time: a role that
-- got EXECUTE on every new function through ALTER DEFAULT PRIVILEGES (the
-- web role, when awa_roles ran before the first migrate) loses it on the
-- maintenance functions before any worker starts.  A later version that
-- adds a maintenance function or table names it in those lists and calls
-- awa.restrict_maintenance() again.
--
-- awa.grant_roles(owner, worker, web) is the object-level half of
-- awa_roles: it hands the schema and every object in it to the owner (an
-- installation migrated by another role is adopted), grants the worker and
-- the web role what they need on every existing table, partition,
-- sequence and function, revokes what PUBLIC had, and applies the rule
-- above.  awa_roles runs it after the role-level half (roles, memberships,
-- pg_read_all_stats, database and schema privileges, default privileges
-- for what the owner creates later).
--
-- Partitions.  A leader creates missing ring partitions when its term
-- starts (awa.ensure_ring_partitions, also when a *_SLOT_COUNT setting
-- grew).  CREATE TABLE ... PARTITION OF needs CREATE on the schema even
-- when the partition exists (the IF NOT EXISTS test comes after the
-- privilege check) and ownership of the parent, so a worker that owns
-- nothing could not start a term.  The function is now SECURITY DEFINER
-- with a fixed search_path: it runs as the owner, only maintainers may call
-- it, its arguments are a ring name it looks up and a bounded integer.
-- The partitions it creates belong to the owner and get the privileges
-- ALTER DEFAULT PRIVILEGES gives the worker (TRUNCATE included) and the
-- web role.  Its arguments and result are unchanged, so workers of the
-- previous release call it as before.
--
-- The horizon.  Prune may truncate a slot only when no transaction that
-- began before the slot was sealed still holds a snapshot; it reads that
-- from pg_stat_activity (backend_xmin, xact_start, backend_type).  For the
-- sessions of other roles PostgreSQL hides xact_start and backend_type
-- unless the reader is a superuser or has the privileges of
-- pg_read_all_stats, and the gate then reads NULL -- "no such
-- transaction" -- for every one of them: a report or an admin page running
-- as the web role could see ring rows vanish under its snapshot.
-- awa.prune_ring_v3 (the arguments and outcomes of awa.prune_ring_v2, plus
-- one) therefore checks first that its role can read the horizon
-- (awa.horizon_readable) and otherwise truncates nothing and returns
-- 'horizon_unreadable', recorded in awa.ring_status like every outcome.
-- awa.prune_ring_v2 stays for leaders of the previous release.
--
-- The down file drops what this version adds and makes
-- awa.ensure_ring_partitions SECURITY INVOKER again; privileges are left as
-- they are (no down file widens them).

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 20);

-- Whether p_role sees every session's transaction in pg_stat_activity:
-- superusers and roles with the privileges of pg_read_all_stats (directly
-- or through pg_monitor) do.  NULL for a NULL role.
CREATE OR REPLACE FUNCTION awa.horizon_readable(p_role name) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT pg_catalog.pg_has_role(p_role, 'pg_read_all_stats', 'USAGE')
$$;

-- awa.prune_ring_v2, unless this role cannot read the horizon: then
-- nothing is truncated and the outcome is 'horizon_unreadable' (recorded
-- for the slot prune would have targeted).
CREATE OR REPLACE FUNCTION awa.prune_ring_v3(
    p_ring text, p_lock_timeout_ms integer, p_failed_retention interval)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_target integer;
BEGIN
    IF awa.horizon_readable(current_user) THEN
        RETURN awa.prune_ring_v2(p_ring, p_lock_timeout_ms, p_failed_retention);
    END IF;
    SELECT (c.slot + 1) % r.slot_count INTO v_target
      FROM awa.ring_cursor(p_ring) c JOIN awa.ring_config r ON r.ring = p_ring;
    PERFORM awa.record_ring_outcome_v2(p_ring, 'prune', 'horizon_unreadable', v_target,
                                       NULL, NULL);
    RETURN 'horizon_unreadable';
END
$$;

-- Create the child partitions of a ring for slots 0..p_slots-1 (never
-- drops), as the owner of the ring tables (see the header).
CREATE OR REPLACE FUNCTION awa.ensure_ring_partitions(p_ring text, p_slots integer) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_table text;
    v_slot  integer;
BEGIN
    IF awa.ring_tables(p_ring) IS NULL THEN
        RAISE EXCEPTION 'unknown ring %', p_ring USING ERRCODE = 'invalid_parameter_value';
    END IF;
    IF p_slots IS NULL OR p_slots NOT BETWEEN 2 AND 256 THEN
        RAISE EXCEPTION 'ring % cannot have % slots (2 to 256)', p_ring, p_slots
              USING ERRCODE = 'invalid_parameter_value';
    END IF;
    FOREACH v_table IN ARRAY awa.ring_tables(p_ring) LOOP
        FOR v_slot IN 0 .. p_slots - 1 LOOP
            EXECUTE format(
                'CREATE TABLE IF NOT EXISTS awa.%I PARTITION OF awa.%I FOR VALUES IN (%s)',
                v_table || '_' || v_slot, v_table, v_slot);
        END LOOP;
    END LOOP;
    INSERT INTO awa.ring_config (ring, slot_count) VALUES (p_ring, p_slots)
    ON CONFLICT (ring) DO UPDATE SET slot_count = EXCLUDED.slot_count
     WHERE awa.ring_config.slot_count < EXCLUDED.slot_count;
END
$$;

-- Names of the functions only maintainers may run (every overload).
CREATE OR REPLACE FUNCTION awa.maintenance_functions() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[
        'ensure_ring_partitions', 'rotate_ring', 'prune_ring', 'prune_ring_v2', 'prune_ring_v3',
        'lock_ring_slot', 'truncate_ring_slot', 'record_ring_outcome', 'record_ring_outcome_v2',
        'carry_forward_and_fold', 'rescue_attempts', 'rescue_leases', 'rescue_v2',
        'promote_due', 'promote_due_skip_busy', 'cleanup', 'cleanup_unique_claims',
        'cleanup_descriptors', 'sample_queues']
$$;

-- Names of the tables only maintenance (and the workers' own registration)
-- writes; everyone with SELECT may still read them.
CREATE OR REPLACE FUNCTION awa.maintenance_tables() RETURNS text[]
LANGUAGE sql IMMUTABLE AS $$
    SELECT ARRAY[
        'substrate_info', 'ring_config', 'queue_ring_rotations', 'claim_ring_rotations',
        'lease_ring_rotations', 'ring_status', 'queue_terminal_rollups', 'runtime_instances',
        'queue_samples']
$$;

-- Apply the maintainer rule (see the header).  Idempotent; run by the
-- migrations (as the owner) and by awa.grant_roles.
CREATE OR REPLACE FUNCTION awa.restrict_maintenance() RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_ring    constant regclass := 'awa.ready_entries';
    v_object  record;
    v_grantee oid;
BEGIN
    FOR v_object IN
        SELECT p.oid::regprocedure::text AS name, p.proowner AS owner, p.proacl AS acl
          FROM pg_proc p
         WHERE p.pronamespace = 'awa'::regnamespace
           AND p.proname = ANY (awa.maintenance_functions())
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM PUBLIC', v_object.name);
        FOR v_grantee IN
            SELECT DISTINCT a.grantee FROM aclexplode(v_object.acl) a
             WHERE a.privilege_type = 'EXECUTE' AND a.grantee NOT IN (0, v_object.owner)
               AND NOT has_table_privilege(a.grantee, v_ring, 'TRUNCATE')
        LOOP
            EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %s', v_object.name,
                           v_grantee::regrole);
        END LOOP;
        FOR v_grantee IN
            SELECT DISTINCT a.grantee FROM pg_class c, aclexplode(c.relacl) a
             WHERE c.oid = v_ring AND a.privilege_type = 'TRUNCATE'
               AND a.grantee NOT IN (0, c.relowner)
        LOOP
            EXECUTE format('GRANT EXECUTE ON FUNCTION %s TO %s', v_object.name,
                           v_grantee::regrole);
        END LOOP;
    END LOOP;

    FOR v_object IN
        SELECT c.oid::regclass::text AS name, c.relowner AS owner, c.relacl AS acl
          FROM pg_class c
         WHERE c.relnamespace = 'awa'::regnamespace
           AND c.relname = ANY (awa.maintenance_tables())
    LOOP
        EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %s FROM PUBLIC',
                       v_object.name);
        FOR v_grantee IN
            SELECT DISTINCT a.grantee FROM aclexplode(v_object.acl) a
             WHERE a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
               AND a.grantee NOT IN (0, v_object.owner)
               AND NOT has_table_privilege(a.grantee, v_ring, 'TRUNCATE')
        LOOP
            EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON %s FROM %s',
                           v_object.name, v_grantee::regrole);
        END LOOP;
    END LOOP;
END
$$;

-- The object-level grants of manage.py awa_roles (see the header): the
-- owner owns the schema and everything in it; the worker may read, write
-- and truncate every table and run every function; the web role may read
-- and write every table but not truncate, and run every function but the
-- maintenance ones; PUBLIC keeps nothing.  The caller must be able to
-- change the owners (a superuser, or a member of both the old and the new
-- owner).  Idempotent.
CREATE OR REPLACE FUNCTION awa.grant_roles(p_owner name, p_worker name, p_web name)
RETURNS void
LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $$
DECLARE
    v_owner  oid := to_regrole(p_owner);
    v_object record;
BEGIN
    IF v_owner IS NULL OR to_regrole(p_worker) IS NULL OR to_regrole(p_web) IS NULL THEN
        RAISE EXCEPTION 'awa.grant_roles: roles %, % and % must exist', p_owner, p_worker, p_web
              USING ERRCODE = 'undefined_object';
    END IF;
    IF p_owner IN (p_worker, p_web) OR p_worker = p_web THEN
        RAISE EXCEPTION 'awa.grant_roles: the owner, worker and web roles must differ'
              USING ERRCODE = 'invalid_parameter_value';
    END IF;

    -- Ownership.  Sequences that belong to a column move with their table.
    IF (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'awa') <> v_owner THEN
        EXECUTE format('ALTER SCHEMA awa OWNER TO %I', p_owner);
    END IF;
    FOR v_object IN
        SELECT c.oid::regclass::text AS name,
               CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                              WHEN 'm' THEN 'MATERIALIZED VIEW' ELSE 'TABLE' END AS kind
          FROM pg_class c
         WHERE c.relnamespace = 'awa'::regnamespace AND c.relowner <> v_owner
           AND c.relkind IN ('r', 'p', 'v', 'm', 'S')
           AND NOT (c.relkind = 'S' AND EXISTS (
                   SELECT 1 FROM pg_depend d
                    WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                      AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i')))
         ORDER BY c.relispartition, c.oid
    LOOP
        EXECUTE format('ALTER %s %s OWNER TO %I', v_object.kind, v_object.name, p_owner);
    END LOOP;
    FOR v_object IN
        SELECT p.oid::regprocedure::text AS name FROM pg_proc p
         WHERE p.pronamespace = 'awa'::regnamespace AND p.proowner <> v_owner
    LOOP
        EXECUTE format('ALTER ROUTINE %s OWNER TO %I', v_object.name, p_owner);
    END LOOP;

    -- The schema: usage, never CREATE.
    EXECUTE format('REVOKE CREATE ON SCHEMA awa FROM PUBLIC, %I, %I', p_worker, p_web);
    EXECUTE format('GRANT USAGE ON SCHEMA awa TO %I, %I', p_worker, p_web);

    -- Tables, views and partitions.
    EXECUTE 'REVOKE ALL ON ALL TABLES IN SCHEMA awa FROM PUBLIC';
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE, TRUNCATE ON ALL TABLES IN SCHEMA awa TO %I',
                   p_worker);
    EXECUTE format('REVOKE REFERENCES, TRIGGER ON ALL TABLES IN SCHEMA awa FROM %I, %I',
                   p_worker, p_web);
    EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA awa TO %I', p_web);
    EXECUTE format('REVOKE TRUNCATE ON ALL TABLES IN SCHEMA awa FROM %I', p_web);

    -- Sequences: the web role draws job ids, only the worker may set them.
    EXECUTE 'REVOKE ALL ON ALL SEQUENCES IN SCHEMA awa FROM PUBLIC';
    EXECUTE format('GRANT USAGE, SELECT, UPDATE ON ALL SEQUENCES IN SCHEMA awa TO %I', p_worker);
    EXECUTE format('GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA awa TO %I', p_web);
    EXECUTE format('REVOKE UPDATE ON ALL SEQUENCES IN SCHEMA awa FROM %I', p_web);

    -- Functions: both roles, then the maintainer rule takes the maintenance
    -- ones from the web role (it holds no TRUNCATE).
    EXECUTE 'REVOKE ALL ON ALL FUNCTIONS IN SCHEMA awa FROM PUBLIC';
    EXECUTE format('GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA awa TO %I, %I', p_worker, p_web);
    PERFORM awa.restrict_maintenance();
    -- Role administration stays with the owner (and superusers).
    EXECUTE format('REVOKE EXECUTE ON FUNCTION awa.grant_roles(name, name, name), '
                   'awa.restrict_maintenance() FROM %I, %I', p_worker, p_web);
END
$$;

SELECT awa.restrict_maintenance();

-- Role administration is for the owner (and superusers) alone, whoever got
-- EXECUTE on new functions by default.
DO $$
DECLARE
    v_grant record;
BEGIN
    FOR v_grant IN
        SELECT p.oid::regprocedure::text AS name,
               CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE a.grantee::regrole::text END AS grantee
          FROM pg_proc p, aclexplode(COALESCE(p.proacl, acldefault('f', p.proowner))) a
         WHERE p.oid IN ('awa.grant_roles(name, name, name)'::regprocedure,
                         'awa.restrict_maintenance()'::regprocedure)
           AND a.privilege_type = 'EXECUTE' AND a.grantee <> p.proowner
    LOOP
        EXECUTE format('REVOKE EXECUTE ON FUNCTION %s FROM %s', v_grant.name, v_grant.grantee);
    END LOOP;
END
$$;
