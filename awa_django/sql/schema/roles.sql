-- Roles: who may run what.
--
-- Three roles (made by manage.py awa_roles, see docs/howto/roles.md): the
-- owner owns schema awa and runs the migrations; the worker runs jobs and
-- maintenance (every row privilege, TRUNCATE on the ring partitions only,
-- no CREATE); the web role enqueues, reads and runs operator actions (never
-- TRUNCATE, no maintenance).
--
-- TRUNCATE is for ring partitions only (the slot children prune empties):
-- awa.restrict_maintenance() takes it on every other table of schema awa
-- from PUBLIC and every grantee, the parents of the ring tables included
-- (TRUNCATE of a partitioned table checks the privilege on the parent
-- alone and empties every slot).
--
-- A maintainer is a role holding TRUNCATE on awa.ready_entries_0, slot 0
-- of the queue ring, which every installation has (the owner and
-- superusers always are).  awa.restrict_maintenance() applies that
-- rule to the functions named by awa.maintenance_functions() and the
-- tables named by awa.maintenance_tables(): PUBLIC and every grantee that
-- is no maintainer lose EXECUTE and write privileges on them, and each
-- maintainer gets EXECUTE.  The rule needs no role names, so it runs at
-- migrate time too: a role that got EXECUTE on every new function through
-- default privileges loses it on the maintenance functions before any
-- worker starts.  The function list is completed from pg_proc: whatever
-- calls a listed function is restricted too, so a wrapper never escapes.
-- A migration that adds a new maintenance entry point or table names it in
-- these lists and calls awa.restrict_maintenance() again.
--
-- awa.grant_roles(owner, worker, web) is the object-level half of
-- awa_roles: it hands every object to the owner (adopting an installation
-- another role migrated), grants the worker and web role what they need,
-- revokes what PUBLIC had, and applies the rule above.  Role
-- administration itself stays with the owner.
--
-- awa.ensure_ring_partitions (rings.sql) is SECURITY DEFINER with a fixed
-- search_path: creating a partition needs CREATE on the schema and
-- ownership of the parent, which a worker does not have, so it runs as the
-- owner, callable by maintainers only, with a ring name it looks up and a
-- bounded slot count as its only inputs.  awa.horizon_pinned
-- (maintenance.sql) is SECURITY DEFINER too: prune's question about other
-- sessions' transactions, answered as the owner with one boolean, so the
-- worker role needs no pg_read_all_stats.  awa.ring_reattach
-- (maintenance.sql) is SECURITY DEFINER too: it puts a ring's root child
-- a prune detached back into its parent, the ring looked up by name.

-- Names of the functions only maintainers may run (every overload): the
-- maintenance entry points and leader helpers named here, and every function
-- of schema awa whose body calls one of them, directly or through another.
-- The second half is read from pg_proc, so a new function wrapping a
-- maintenance function (a faster prune over the old one, a cheap first look
-- before a rescue) is restricted without being named.  A new maintenance
-- function that calls none of these must still be named here.
CREATE OR REPLACE FUNCTION awa.maintenance_functions() RETURNS text[]
LANGUAGE sql STABLE AS $$
    WITH RECURSIVE restricted(name) AS (
        SELECT unnest(ARRAY[
            'ensure_ring_partitions', 'rotate_ring', 'prune_ring', 'prune_ring_unchecked',
            'record_ring_outcome', 'carry_forward_and_fold', 'rescue',
            'rescue_unchecked', 'rescue_attempts', 'rescue_leases', 'promote_due_skip_busy',
            'cleanup', 'cleanup_unique_claims', 'cleanup_descriptors', 'sample_queues',
            'recheck_dependencies', 'batch_op_step', 'horizon_pinned', 'prune_detach_target',
            'ring_reattach']) COLLATE "C"
        UNION
        SELECT p.proname::text COLLATE "C"
          FROM pg_proc p, restricted r
         WHERE p.pronamespace = 'awa'::regnamespace
           -- Calls only: a comment that names a function does not count.
           AND regexp_replace(p.prosrc, '--[^\n]*', '', 'g') ~ ('awa\.' || r.name || '\s*\(')
    )
    SELECT array_agg(name::text ORDER BY name) FROM restricted
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
    v_ring    constant regclass := 'awa.ready_entries_0';
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

    -- TRUNCATE on ring partitions only (see the header).
    FOR v_object IN
        SELECT c.oid::regclass::text AS name, c.relowner AS owner, c.relacl AS acl
          FROM pg_class c
         WHERE c.relnamespace = 'awa'::regnamespace AND c.relkind IN ('r', 'p')
           AND NOT EXISTS (
                   SELECT 1 FROM pg_inherits i JOIN pg_class p ON p.oid = i.inhparent
                    WHERE i.inhrelid = c.oid AND p.relnamespace = c.relnamespace
                      AND p.relname = ANY (awa.ring_tables('queue') || awa.ring_tables('claim')
                                           || awa.ring_tables('lease')))
    LOOP
        EXECUTE format('REVOKE TRUNCATE ON %s FROM PUBLIC', v_object.name);
        FOR v_grantee IN
            SELECT DISTINCT a.grantee FROM aclexplode(v_object.acl) a
             WHERE a.privilege_type = 'TRUNCATE' AND a.grantee NOT IN (0, v_object.owner)
        LOOP
            EXECUTE format('REVOKE TRUNCATE ON %s FROM %s', v_object.name, v_grantee::regrole);
        END LOOP;
    END LOOP;
END
$$;

-- The object-level grants of manage.py awa_roles (see the header): the
-- owner owns the schema and everything in it; the worker may read and
-- write every table, truncate the ring partitions (the maintainer rule
-- takes TRUNCATE on the rest) and run every function; the web role may read
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

    -- Ownership (the close's composite type too: it has a pg_class row).
    -- Sequences that belong to a column move with their table.
    IF (SELECT n.nspowner FROM pg_namespace n WHERE n.nspname = 'awa') <> v_owner THEN
        EXECUTE format('ALTER SCHEMA awa OWNER TO %I', p_owner);
    END IF;
    FOR v_object IN
        SELECT c.oid::regclass::text AS name,
               CASE c.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW'
                              WHEN 'm' THEN 'MATERIALIZED VIEW' WHEN 'c' THEN 'TYPE'
                              ELSE 'TABLE' END AS kind
          FROM pg_class c
         WHERE c.relnamespace = 'awa'::regnamespace AND c.relowner <> v_owner
           AND c.relkind IN ('r', 'p', 'v', 'm', 'S', 'c')
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
