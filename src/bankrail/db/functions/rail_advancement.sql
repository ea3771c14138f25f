-- The background steps of every transfer on the rails, payouts and refunds alike. One writer,
-- bankrail_advance_transfers, writes the steps that rails/advancement.py decided, for a job
-- handler's batch of one (in the job's transaction) or for a leased batch of many
-- (bankrail_advance_leased_transfers). A leased batch is two statements, each its own
-- transaction:
--   1. bankrail_lease_transfer_jobs takes the jobs of payouts or refunds by setting
--      their lease (service time, like run_at: advancing the sandbox clock past it hands the
--      jobs to the next batch at once, which the check below makes safe) and returns them with
--      their transfers; nothing stays locked.
--   2. bankrail_advance_leased_transfers checks that the decisions the worker made in Python
--      still hold (every job still queued, every transfer still at the stage its steps were
--      decided from, every account still without a balance threshold), locking those rows,
--      and then writes them (bankrail_advance_transfers). The commit follows in the same
--      statement, so the ledger rows are held only while PostgreSQL itself works.
-- A worker that dies between the two leaves its jobs to run again when the lease ends; one
-- that writes after its lease ended, or whose transfers another path advanced meanwhile, finds
-- the check failing and writes nothing; the worker then gives its jobs back. So no step is
-- taken twice.
--
-- Every function here probes indexes whatever the statistics say, with its generic plan from
-- the first call (see ledger.sql).

-- Up to p_limit jobs of kind p_kind due and not leased at p_now (service time) that a batch
-- can take, leased for p_lease, with their transfers as they are now (p_transfer names the
-- table: `payout`, whose job's payload has payout_id, or `refund`, refund_id; the other
-- column is NULL) and the ledger rows of their accounts. Only transfers from an account
-- without a balance threshold (advanced one at a time, with their notifications) and, for a
-- payout, not an internal transfer are taken. A lease lost in a crash only gives the job back
-- early, so its commit does not wait for the WAL to reach the disk (the write's does).
-- (It replaces bankrail_lease_payout_jobs and bankrail_lease_refund_jobs, one per table, which
-- are left on an upgraded database for the release before during a rolling upgrade.)
CREATE OR REPLACE FUNCTION bankrail_lease_transfer_jobs(
    p_transfer text, p_now timestamptz, p_limit integer, p_kind text, p_lease interval)
RETURNS TABLE (job_id bigint, payout payouts, refund refunds, held_ledger_id bigint,
               available_ledger_id bigint)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    -- Each job's transfer and account are looked up by id (OFFSET 0 keeps each lookup a
    -- subquery of its own): joined as tables, the generic plan of an account with many
    -- payouts read all of them for every due job (1.1 million rows for 193 jobs, 340 ms).
    -- The branch of the other table is cut by its constant test before it reads anything.
    WITH due AS (
        SELECT j.id
        FROM jobs j
        CROSS JOIN LATERAL (
            SELECT p.merchant_account_id FROM payouts p
            WHERE p_transfer = 'payout' AND p.id = (j.payload ->> 'payout_id')::uuid
              AND p.destination_account_id IS NULL
            UNION ALL
            SELECT r.merchant_account_id FROM refunds r
            WHERE p_transfer = 'refund' AND r.id = (j.payload ->> 'refund_id')::uuid
            OFFSET 0) t
        CROSS JOIN LATERAL (
            SELECT ma.balance_threshold FROM merchant_accounts ma
            WHERE ma.id = t.merchant_account_id OFFSET 0) ma
        WHERE j.kind = p_kind AND j.run_at <= p_now
          AND (j.lease_until IS NULL OR j.lease_until <= p_now)
          AND ma.balance_threshold IS NULL
        ORDER BY j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE OF j SKIP LOCKED),
    leased AS (
        UPDATE jobs j SET lease_until = p_now + p_lease FROM due
        WHERE j.id = due.id
        RETURNING j.id, (j.payload ->> (p_transfer || '_id'))::uuid AS transfer_id)
    SELECT l.id, found.payout, found.refund, ma.held_ledger_id, ma.available_ledger_id
    FROM leased l
    CROSS JOIN LATERAL (
        SELECT p AS payout, NULL::refunds AS refund, p.merchant_account_id FROM payouts p
        WHERE p_transfer = 'payout' AND p.id = l.transfer_id
        UNION ALL
        SELECT NULL::payouts, r, r.merchant_account_id FROM refunds r
        WHERE p_transfer = 'refund' AND r.id = l.transfer_id
        OFFSET 0) found
    CROSS JOIN LATERAL (
        SELECT ma.held_ledger_id, ma.available_ledger_id FROM merchant_accounts ma
        WHERE ma.id = found.merchant_account_id OFFSET 0) ma
    ORDER BY l.id;
END
$$;

-- The rows of a batch of decided rail steps, of payouts and refunds alike (rails/advancement.py
-- builds them): every transfer that moves through the rails is advanced by this one writer.
-- Each group is one jsonb array of objects:
--   p_job_ids: the jobs finished (deleted);
--   p_steps:   one per transfer that took steps: kind (its table, `payout` or `refund`, and
--              the type of its activity row), id, account_id, amount, currency, the new
--              lifecycle fields (stage, authorized_at, submitted_at, executed_at, failed_at,
--              failure_reason), the status and details of its activity row, next_job,
--              next_payload and next_at (its next job, all NULL when none), and
--              returned_payment (a failed refund's payment, whose refunded amount it gives
--              back; NULL otherwise); the leased writer also reads from_stage;
--   p_events:  id, delivery_id, merchant_id, family, event_type, payload (the exact text to
--              deliver), ordering_key and ordering_seq (NULL for both when none);
--   p_moves:   the movement of each transfer that moves money, as ledger/movements.py
--              `end_hold` decided it: id, kind, reference_id, from, to, to_code, currency,
--              amount (bankrail_post_movements).
CREATE OR REPLACE FUNCTION bankrail_advance_transfers(
    p_now timestamptz,
    p_job_ids bigint[],
    p_steps jsonb,
    p_events jsonb,
    p_moves jsonb
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    DELETE FROM jobs WHERE id = ANY (p_job_ids);
    UPDATE payouts t SET stage = x.stage, authorized_at = x.authorized_at,
            submitted_at = x.submitted_at, executed_at = x.executed_at,
            failed_at = x.failed_at, failure_reason = x.failure_reason
        FROM jsonb_to_recordset(p_steps) AS x (kind text, id uuid, stage text,
            authorized_at timestamptz, submitted_at timestamptz, executed_at timestamptz,
            failed_at timestamptz, failure_reason text)
        WHERE x.kind = 'payout' AND t.id = x.id;
    UPDATE refunds t SET stage = x.stage, authorized_at = x.authorized_at,
            submitted_at = x.submitted_at, executed_at = x.executed_at,
            failed_at = x.failed_at, failure_reason = x.failure_reason
        FROM jsonb_to_recordset(p_steps) AS x (kind text, id uuid, stage text,
            authorized_at timestamptz, submitted_at timestamptz, executed_at timestamptz,
            failed_at timestamptz, failure_reason text)
        WHERE x.kind = 'refund' AND t.id = x.id;
    -- A payment's failed refunds of the batch give their amounts back together.
    UPDATE payments p SET refunded_amount_in_minor = p.refunded_amount_in_minor - g.amount
        FROM (SELECT x.returned_payment, sum(x.amount) AS amount
              FROM jsonb_to_recordset(p_steps) AS x (returned_payment uuid, amount bigint)
              WHERE x.returned_payment IS NOT NULL GROUP BY x.returned_payment) g
        WHERE p.id = g.returned_payment;
    INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor, currency,
            status, created_at, updated_at, details)
        SELECT x.id, x.account_id, x.kind, x.amount, x.currency, x.status, p_now, p_now,
               coalesce(x.details, '{}')
        FROM jsonb_to_recordset(p_steps) AS x (kind text, id uuid, account_id uuid,
            amount bigint, currency text, status text, details jsonb)
        ON CONFLICT (merchant_account_id, id) DO UPDATE SET status = EXCLUDED.status,
            updated_at = EXCLUDED.updated_at,
            details = account_activity.details || EXCLUDED.details;

    IF jsonb_array_length(p_events) > 0 THEN
        PERFORM bankrail_record_events(array_agg(e.id), array_agg(e.delivery_id),
                array_agg(e.merchant_id), array_agg(e.family), array_agg(e.event_type),
                array_agg(convert_to(e.payload, 'UTF8')), array_agg(p_now),
                array_agg(e.ordering_key), array_agg(e.ordering_seq))
            FROM jsonb_to_recordset(p_events) AS e (id uuid, delivery_id uuid,
                merchant_id uuid, family text, event_type text, payload text,
                ordering_key uuid, ordering_seq integer);
    END IF;

    INSERT INTO jobs (kind, payload, run_at)
        SELECT x.next_job, x.next_payload, x.next_at
        FROM jsonb_to_recordset(p_steps) AS x (next_job text, next_payload jsonb,
            next_at timestamptz)
        WHERE x.next_at IS NOT NULL;
    IF FOUND THEN
        PERFORM pg_notify('bankrail_jobs', '');
    END IF;

    IF jsonb_array_length(p_moves) > 0 THEN
        PERFORM bankrail_post_movements(array_agg(m.id), array_agg(m.kind),
                array_agg(m.reference_id), array_agg(p_now), array_agg(m."from"),
                array_agg(m."to"), array_agg(m.to_code), array_agg(m.currency),
                array_agg(m.amount))
            FROM jsonb_to_recordset(p_moves) AS m (id uuid, kind text, reference_id uuid,
                "from" bigint, "to" bigint, to_code text, currency text, amount bigint);
    END IF;
END
$$;

-- The write of a leased batch: the arguments of bankrail_advance_transfers, each step with the
-- stage its transfer was at when its steps were decided (from_stage). Returns false, having
-- written nothing, when a decision no longer holds: the caller then gives the jobs back.
CREATE OR REPLACE FUNCTION bankrail_advance_leased_transfers(
    p_now timestamptz,
    p_job_ids bigint[],
    p_steps jsonb,
    p_events jsonb,
    p_moves jsonb
) RETURNS boolean LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_holds boolean;
BEGIN
    -- Locked in the order every other path locks them: jobs, payouts, refunds, accounts,
    -- ledger rows.
    SELECT count(*) = cardinality(p_job_ids) INTO v_holds
        FROM (SELECT 1 FROM jobs WHERE id = ANY (p_job_ids) ORDER BY id FOR UPDATE) j;
    IF v_holds THEN
        SELECT count(*) = (SELECT count(*) FROM jsonb_array_elements(p_steps)
                           WHERE value ->> 'kind' = 'payout') INTO v_holds
            FROM (SELECT 1 FROM payouts t
                  JOIN jsonb_to_recordset(p_steps) AS x (kind text, id uuid, from_stage text)
                      ON t.id = x.id AND t.stage = x.from_stage
                  WHERE x.kind = 'payout'
                  ORDER BY t.id FOR UPDATE OF t) t;
    END IF;
    IF v_holds THEN
        SELECT count(*) = (SELECT count(*) FROM jsonb_array_elements(p_steps)
                           WHERE value ->> 'kind' = 'refund') INTO v_holds
            FROM (SELECT 1 FROM refunds t
                  JOIN jsonb_to_recordset(p_steps) AS x (kind text, id uuid, from_stage text)
                      ON t.id = x.id AND t.stage = x.from_stage
                  WHERE x.kind = 'refund'
                  ORDER BY t.id FOR UPDATE OF t) t;
    END IF;
    IF v_holds THEN
        -- Share-locked until the commit, so that no threshold is set before it (a
        -- threshold's account is advanced one transfer at a time).
        SELECT count(*) = (SELECT count(DISTINCT value ->> 'account_id')
                           FROM jsonb_array_elements(p_steps))
            INTO v_holds
            FROM (SELECT 1 FROM merchant_accounts
                  WHERE id IN (SELECT (value ->> 'account_id')::uuid
                               FROM jsonb_array_elements(p_steps))
                    AND balance_threshold IS NULL
                  ORDER BY id FOR SHARE) ma;
    END IF;
    IF NOT v_holds THEN
        RETURN false;
    END IF;
    PERFORM bankrail_advance_transfers(p_now, p_job_ids, p_steps, p_events, p_moves);
    RETURN true;
END
$$;
