-- awa_django substrate, version 10: a short prune critical section.
--
-- awa.prune_ring (version 3) proved its gates, locked every child of the
-- target slot ACCESS EXCLUSIVE, and then, under that lock, proved every
-- gate again (the claim ring's proof unnests the whole claim slot, the
-- queue ring's scans open_receipts), carried failed rows forward, folded
-- the counts and truncated.  Every claim, close or read that needed one of
-- those children, and everything queued behind it, waited for all of that:
-- for a 5,000-job slot the lock was held for tens of milliseconds per ring.
--
-- awa.prune_ring_v2 does the expensive work before the lock:
--
-- 1. it stamps the slot (the rows of its root child, below), then proves
--    the gates of awa.ring_slot_busy once, without the lock;
-- 2. in one subtransaction it carries failed rows forward and folds the
--    counts (queue ring), then takes the lock (short lock_timeout): a
--    timeout ('blocked') or a failed check rolls the writes back with it;
-- 3. under the lock it only checks that no transaction older than the
--    slot's sealing pins it and that the stamp did not move, then
--    truncates.
--
-- What remains under the lock is the TRUNCATE itself: it gives every child
-- and index a new file and rebuilds each (empty) index with an fsync, so
-- its cost grows with the number of indexes, not with the rows.
--
-- Why proving once is enough.  Once the gates pass, the slot can only gain
-- rows through a writer that was already in flight while they ran: enqueue,
-- promotion and carry-forward write into the current slot, but a producer
-- that read the cursor before the slot was sealed may still append to it
-- and commit later -- its uncommitted rows are invisible to the gates, and
-- a producer idle in its transaction has no backend_xmin, so the "older
-- transaction" gate does not see it either.  Everything else needs such a
-- row: closes write into an attempt's slots only while its receipt is open
-- (and commit their evidence with their rows), receipts come only from
-- claimable rows, and claim-ring closure evidence only grows.  Each of
-- those writes appends to the slot's root child in the same transaction:
-- a segment (ready_segments) for queue rows, a claim batch
-- (lease_claim_batches) for receipts.  Both are append-only until prune
-- truncates them, so a row count taken before the gates and found
-- unchanged under the lock proves that nothing the gates did not see was
-- added since; that the queue ring has no claimable row follows (segments
-- unchanged, claim cursors only advance).  The lease ring's gate is that
-- the slot holds no lease at all; its stamp (the leases' count) re-proves
-- exactly that.  Writers that have not committed yet are waited out by the
-- lock itself, as before.
--
-- pg_stat_activity is read once per transaction and then cached, so the
-- version-3 recheck of old transactions under the lock saw the state of
-- the first check; awa.ring_slot_pinned clears that snapshot first.
--
-- ring_status.last_prune_exclusive_ms records, per ring, how long the last
-- prune that got its lock held it, up to the end of its TRUNCATE.
--
-- awa.prune_ring and awa.record_ring_outcome stay for leaders of the
-- previous release.

SET LOCAL client_min_messages = warning;
SELECT pg_advisory_xact_lock(hashtext('awa_django.substrate'));

UPDATE awa.substrate_info SET schema_version = GREATEST(schema_version, 10);

ALTER TABLE awa.ring_status ADD COLUMN IF NOT EXISTS last_prune_exclusive_ms double precision;
COMMENT ON COLUMN awa.ring_status.last_prune_exclusive_ms IS
    'Milliseconds the last prune that got its ACCESS EXCLUSIVE lock held it, from the grant '
    'to the end of its TRUNCATE (commit not included); NULL before the first one.';

-- Like awa.record_ring_outcome, plus the lock hold of a prune (NULL: this
-- prune did not get the lock, keep the last figure).
CREATE OR REPLACE FUNCTION awa.record_ring_outcome_v2(
    p_ring text, p_action text, p_outcome text, p_slot integer, p_generation bigint,
    p_exclusive_ms double precision)
RETURNS void
LANGUAGE sql AS $$
    INSERT INTO awa.ring_status AS s (ring, action, outcome, slot, generation, at,
                                      truncations, rotations, last_prune_exclusive_ms)
    VALUES (p_ring, p_action, p_outcome, p_slot, p_generation, now(),
            (p_outcome = 'pruned')::integer, (p_outcome = 'rotated')::integer, p_exclusive_ms)
    ON CONFLICT (ring, action) DO UPDATE
       SET outcome = EXCLUDED.outcome, slot = EXCLUDED.slot,
           generation = EXCLUDED.generation, at = EXCLUDED.at,
           truncations = s.truncations + EXCLUDED.truncations,
           rotations = s.rotations + EXCLUDED.rotations,
           last_prune_exclusive_ms = COALESCE(EXCLUDED.last_prune_exclusive_ms,
                                              s.last_prune_exclusive_ms)
     WHERE s.outcome IS DISTINCT FROM EXCLUDED.outcome
        OR EXCLUDED.truncations > 0 OR EXCLUDED.rotations > 0
        OR EXCLUDED.last_prune_exclusive_ms IS NOT NULL
$$;

-- True when a transaction that began before p_sealed_at still holds a
-- snapshot: it may still read the slot, and TRUNCATE is not MVCC-safe.
-- VOLATILE, and the cached activity snapshot is dropped, so a second call
-- in the same transaction sees sessions as they are now.
CREATE OR REPLACE FUNCTION awa.ring_slot_pinned(p_sealed_at timestamptz) RETURNS boolean
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_stat_clear_snapshot();
    RETURN EXISTS (
        SELECT 1 FROM pg_stat_activity a
         WHERE a.datname = current_database() AND a.pid <> pg_backend_pid()
           AND a.backend_type = 'client backend'
           AND a.backend_xmin IS NOT NULL AND a.xact_start < p_sealed_at);
END
$$;

-- Rows of the slot's root child, the one every write that could outdate the
-- prune proofs appends to (see the header).  READ COMMITTED callers only: a
-- second call must see what committed in between.
CREATE OR REPLACE FUNCTION awa.ring_slot_stamp(p_ring text, p_slot integer) RETURNS bigint
LANGUAGE plpgsql STABLE AS $$
DECLARE
    v_rows bigint;
BEGIN
    EXECUTE format('SELECT count(*) FROM awa.%I',
                   CASE p_ring WHEN 'queue' THEN 'ready_segments'
                               WHEN 'claim' THEN 'lease_claim_batches'
                               ELSE 'leases' END || '_' || p_slot)
       INTO v_rows;
    RETURN v_rows;
END
$$;

-- Prune the oldest sealed slot of a ring.  Same arguments, outcomes and
-- effects as awa.prune_ring: pruned, already_pruned, skipped_busy (a gate
-- says the slot is live, or the ring is being rotated), blocked (lock
-- timeout: someone is still using it).  Queue ring: failed rows younger
-- than p_failed_retention are copied into the current slot, the terminal
-- rows reclaimed are folded into queue_terminal_rollups; neither survives
-- an outcome other than pruned.
--
-- Needs READ COMMITTED: the check under the lock must see what committed
-- while prune waited for it, so every statement needs a fresh snapshot.
CREATE OR REPLACE FUNCTION awa.prune_ring_v2(
    p_ring text, p_lock_timeout_ms integer, p_failed_retention interval)
RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
    v_cursor    record;
    v_slots     integer;
    v_target    integer;
    v_sealed_at timestamptz;
    v_stamp     bigint;
    v_children  text;
    v_timeout   text;
    v_locked_at timestamptz;
    v_held_ms   double precision;
    v_outcome   text;
BEGIN
    IF current_setting('transaction_isolation') <> 'read committed' THEN
        RAISE EXCEPTION 'awa.prune_ring_v2 needs READ COMMITTED, not %',
                        current_setting('transaction_isolation')
              USING ERRCODE = 'invalid_transaction_state';
    END IF;
    IF NOT pg_try_advisory_xact_lock(awa.ring_lock_key(p_ring)) THEN
        RETURN 'skipped_busy';
    END IF;
    SELECT * INTO v_cursor FROM awa.ring_cursor(p_ring);
    SELECT slot_count INTO v_slots FROM awa.ring_config WHERE ring = p_ring;
    v_target := (v_cursor.slot + 1) % v_slots;
    -- The target was sealed when the ring first rotated away from it: the
    -- rotation that followed its last generation.
    EXECUTE format('SELECT min(r.rotated_at) FROM awa.%I r
                     WHERE r.generation > (SELECT max(x.generation) FROM awa.%I x
                                            WHERE x.slot = $1 AND x.generation < $2)',
                   p_ring || '_ring_rotations', p_ring || '_ring_rotations')
       INTO v_sealed_at USING v_target, v_cursor.generation;
    v_sealed_at := COALESCE(v_sealed_at, v_cursor.rotated_at);

    IF awa.ring_slot_empty(p_ring, v_target) THEN
        v_outcome := 'already_pruned';
    ELSE
        -- The stamp comes before the gates: what committed before it, the
        -- gates see; what commits after it moves it.
        v_stamp := awa.ring_slot_stamp(p_ring, v_target);
        IF awa.ring_slot_busy(p_ring, v_target, v_sealed_at) IS NOT NULL THEN
            v_outcome := 'skipped_busy';
        ELSE
            SELECT string_agg(format('awa.%I', t.name || '_' || v_target), ', ' ORDER BY t.n)
              INTO v_children
              FROM unnest(awa.ring_tables(p_ring)) WITH ORDINALITY AS t(name, n);
            v_timeout := current_setting('lock_timeout');
            -- A subtransaction: the carry-forward and fold writes, and the
            -- locks, go if the lock times out or the check under it fails.
            BEGIN
                -- Before the lock, so they do not count towards its hold.
                IF p_ring = 'queue' THEN
                    PERFORM awa.carry_forward_and_fold(v_target, v_cursor.slot,
                                                       v_cursor.generation, p_failed_retention);
                END IF;
                PERFORM set_config('lock_timeout', p_lock_timeout_ms || 'ms', true);
                EXECUTE 'LOCK TABLE ' || v_children || ' IN ACCESS EXCLUSIVE MODE';
                v_locked_at := clock_timestamp();
                PERFORM set_config('lock_timeout', v_timeout, true);
                IF awa.ring_slot_pinned(v_sealed_at)
                   OR awa.ring_slot_stamp(p_ring, v_target) <> v_stamp THEN
                    RAISE EXCEPTION 'ring % slot %: a late writer or an older snapshot',
                                    p_ring, v_target
                          USING ERRCODE = 'AW001';
                END IF;
                PERFORM awa.truncate_ring_slot(p_ring, v_target);
                -- The hold goes on until commit (the rest of this function,
                -- the commit's WAL flush and the unlink of the old files),
                -- which no statement inside the transaction can measure.
                v_held_ms := extract(epoch FROM clock_timestamp() - v_locked_at) * 1000;
                v_outcome := 'pruned';
            EXCEPTION
                WHEN lock_not_available THEN
                    v_outcome := 'blocked';
                WHEN SQLSTATE 'AW001' THEN
                    -- The abort released the lock: held until now.
                    v_held_ms := extract(epoch FROM clock_timestamp() - v_locked_at) * 1000;
                    v_outcome := 'skipped_busy';
            END;
        END IF;
    END IF;
    PERFORM awa.record_ring_outcome_v2(p_ring, 'prune', v_outcome, v_target, NULL, v_held_ms);
    RETURN v_outcome;
END
$$;
