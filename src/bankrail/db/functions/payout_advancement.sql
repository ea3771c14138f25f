-- The background steps of payouts, for a batch of due jobs (payouts/jobs.py). A batch is two
-- statements, each its own transaction:
--   1. bankrail_lease_payout_jobs takes the jobs by setting their lease (service time, like
--      run_at: advancing the sandbox clock past it hands the jobs to the next batch at once,
--      which the check below makes safe) and returns them with their payouts; nothing stays
--      locked.
--   2. bankrail_advance_leased_payouts checks that the decisions the worker made in Python
--      still hold (every job still queued, every payout still at the stage its steps were
--      decided from, every account still without a balance threshold), locking those rows,
--      and then writes them (bankrail_advance_payouts). The commit follows in the same
--      statement, so the ledger rows are held only while PostgreSQL itself works.
-- A worker that dies between the two leaves its jobs to run again when the lease ends; one
-- that writes after its lease ended, or whose payouts another path advanced meanwhile, finds
-- the check failing and writes nothing; the worker then gives its jobs back. So no step is
-- taken twice.
--
-- Every function here probes indexes whatever the statistics say, with its generic plan from
-- the first call (see ledger.sql).

-- Up to p_limit payout jobs due and not leased at p_now (service time) that a batch can take,
-- leased for p_lease, with their payouts as they are now and the ledger rows of their
-- accounts. A lease lost in a crash only gives the job back early, so its commit does not wait
-- for the WAL to reach the disk (the write's does).
CREATE OR REPLACE FUNCTION bankrail_lease_payout_jobs(
    p_now timestamptz, p_limit integer, p_kind text, p_lease interval)
RETURNS TABLE (job_id bigint, payout payouts, held_ledger_id bigint,
               available_ledger_id bigint)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM set_config('synchronous_commit', 'off', true);
    RETURN QUERY
    -- Each job's payout and account are looked up by id (OFFSET 0 keeps each lookup a
    -- subquery of its own): joined as tables, the generic plan of an account with many
    -- payouts read all of them for every due job (1.1 million rows for 193 jobs, 340 ms).
    WITH due AS (
        SELECT j.id
        FROM jobs j
        CROSS JOIN LATERAL (
            SELECT p.merchant_account_id, p.destination_account_id FROM payouts p
            WHERE p.id = (j.payload ->> 'payout_id')::uuid OFFSET 0) p
        CROSS JOIN LATERAL (
            SELECT ma.balance_threshold FROM merchant_accounts ma
            WHERE ma.id = p.merchant_account_id OFFSET 0) ma
        WHERE j.kind = p_kind AND j.run_at <= p_now
          AND (j.lease_until IS NULL OR j.lease_until <= p_now)
          AND p.destination_account_id IS NULL AND ma.balance_threshold IS NULL
        ORDER BY j.run_at, j.id
        LIMIT p_limit
        FOR UPDATE OF j SKIP LOCKED),
    leased AS (
        UPDATE jobs j SET lease_until = p_now + p_lease FROM due
        WHERE j.id = due.id
        RETURNING j.id, (j.payload ->> 'payout_id')::uuid AS payout_id)
    SELECT l.id, found.payout, ma.held_ledger_id, ma.available_ledger_id
    FROM leased l
    CROSS JOIN LATERAL (
        SELECT p AS payout FROM payouts p WHERE p.id = l.payout_id OFFSET 0) found
    CROSS JOIN LATERAL (
        SELECT ma.held_ledger_id, ma.available_ledger_id FROM merchant_accounts ma
        WHERE ma.id = (found.payout).merchant_account_id OFFSET 0) ma
    ORDER BY l.id;
END
$$;

-- The rows of a batch of decided payout steps. Arguments come as parallel arrays, one group
-- per kind of row:
--   jobs finished:  p_job_ids (deleted);
--   payouts:        id, merchant account, amount, currency, new lifecycle fields, the status
--                   and details of its activity row;
--   events:         id, delivery id, merchant, family, type, the exact bytes to deliver,
--                   the ordering key and place of its delivery (NULL for both when none);
--   next steps:     payout id and when its job runs again (kind p_job_kind);
--   money:          the movement of each payout that moves money, as
--                   ledger/movements.py `end_hold` decided it (bankrail_post_movements).
CREATE OR REPLACE FUNCTION bankrail_advance_payouts(
    p_now timestamptz,
    p_job_ids bigint[],
    p_payout_ids uuid[],
    p_account_ids uuid[],
    p_amounts bigint[],
    p_currencies text[],
    p_stages text[],
    p_authorized_at timestamptz[],
    p_submitted_at timestamptz[],
    p_executed_at timestamptz[],
    p_failed_at timestamptz[],
    p_failure_reasons text[],
    p_statuses text[],
    p_details jsonb[],
    p_event_ids uuid[],
    p_delivery_ids uuid[],
    p_event_merchants uuid[],
    p_event_families text[],
    p_event_types text[],
    p_event_payloads bytea[],
    p_event_ordering_keys uuid[],
    p_event_ordering_seqs integer[],
    p_next_payouts uuid[],
    p_next_at timestamptz[],
    p_job_kind text,
    p_move_ids uuid[],
    p_move_kinds text[],
    p_move_payouts uuid[],
    p_move_from bigint[],
    p_move_to bigint[],
    p_move_to_codes text[],
    p_move_currencies text[],
    p_move_amounts bigint[]
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    DELETE FROM jobs WHERE id = ANY (p_job_ids);
    UPDATE payouts p SET stage = x.stage, authorized_at = x.authorized_at,
            submitted_at = x.submitted_at, executed_at = x.executed_at,
            failed_at = x.failed_at, failure_reason = x.failure_reason
        FROM unnest(p_payout_ids, p_stages, p_authorized_at, p_submitted_at, p_executed_at,
                    p_failed_at, p_failure_reasons)
            AS x (id, stage, authorized_at, submitted_at, executed_at, failed_at,
                  failure_reason)
        WHERE p.id = x.id;
    INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor, currency,
            status, created_at, updated_at, details)
        SELECT x.id, x.account_id, 'payout', x.amount, x.currency, x.status, p_now, p_now,
               x.details
        FROM unnest(p_payout_ids, p_account_ids, p_amounts, p_currencies, p_statuses,
                    p_details) AS x (id, account_id, amount, currency, status, details)
        ON CONFLICT (merchant_account_id, id) DO UPDATE SET status = EXCLUDED.status,
            updated_at = EXCLUDED.updated_at,
            details = account_activity.details || EXCLUDED.details;

    PERFORM bankrail_record_events(p_event_ids, p_delivery_ids, p_event_merchants,
        p_event_families, p_event_types, p_event_payloads,
        array_fill(p_now, ARRAY[cardinality(p_event_ids)]), p_event_ordering_keys,
        p_event_ordering_seqs);

    IF cardinality(p_next_payouts) > 0 THEN
        INSERT INTO jobs (kind, payload, run_at)
            SELECT p_job_kind, jsonb_build_object('payout_id', x.id::text), x.run_at
            FROM unnest(p_next_payouts, p_next_at) AS x (id, run_at);
        PERFORM pg_notify('bankrail_jobs', '');
    END IF;

    PERFORM bankrail_post_movements(p_move_ids, p_move_kinds, p_move_payouts,
        array_fill(p_now, ARRAY[cardinality(p_move_ids)]), p_move_from, p_move_to,
        p_move_to_codes, p_move_currencies, p_move_amounts);
END
$$;

-- The write of a leased batch: the arguments of bankrail_advance_payouts, after the stage
-- each payout of p_payout_ids was at when its steps were decided (p_from_stages). Returns
-- false, having written nothing, when a decision no longer holds: the caller then gives the
-- jobs back.
CREATE OR REPLACE FUNCTION bankrail_advance_leased_payouts(
    p_from_stages text[],
    p_now timestamptz,
    p_job_ids bigint[],
    p_payout_ids uuid[],
    p_account_ids uuid[],
    p_amounts bigint[],
    p_currencies text[],
    p_stages text[],
    p_authorized_at timestamptz[],
    p_submitted_at timestamptz[],
    p_executed_at timestamptz[],
    p_failed_at timestamptz[],
    p_failure_reasons text[],
    p_statuses text[],
    p_details jsonb[],
    p_event_ids uuid[],
    p_delivery_ids uuid[],
    p_event_merchants uuid[],
    p_event_families text[],
    p_event_types text[],
    p_event_payloads bytea[],
    p_event_ordering_keys uuid[],
    p_event_ordering_seqs integer[],
    p_next_payouts uuid[],
    p_next_at timestamptz[],
    p_job_kind text,
    p_move_ids uuid[],
    p_move_kinds text[],
    p_move_payouts uuid[],
    p_move_from bigint[],
    p_move_to bigint[],
    p_move_to_codes text[],
    p_move_currencies text[],
    p_move_amounts bigint[]
) RETURNS boolean LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_holds boolean;
BEGIN
    -- Locked in the order every other path locks them: jobs, payouts, accounts, ledger rows.
    SELECT count(*) = cardinality(p_job_ids) INTO v_holds
        FROM (SELECT 1 FROM jobs WHERE id = ANY (p_job_ids) ORDER BY id FOR UPDATE) j;
    IF v_holds THEN
        SELECT count(*) = cardinality(p_payout_ids) INTO v_holds
            FROM (SELECT 1 FROM payouts p
                  JOIN unnest(p_payout_ids, p_from_stages) AS x (id, stage)
                      ON p.id = x.id AND p.stage = x.stage
                  ORDER BY p.id FOR UPDATE OF p) p;
    END IF;
    IF v_holds THEN
        -- Share-locked until the commit, so that no threshold is set before it (a threshold's account is advanced one payout at a time).
        SELECT count(*) = (SELECT count(DISTINCT a) FROM unnest(p_account_ids) AS a)
            INTO v_holds
            FROM (SELECT 1 FROM merchant_accounts
                  WHERE id = ANY (p_account_ids) AND balance_threshold IS NULL
                  ORDER BY id FOR SHARE) ma;
    END IF;
    IF NOT v_holds THEN
        RETURN false;
    END IF;
    PERFORM bankrail_advance_payouts(p_now, p_job_ids, p_payout_ids, p_account_ids,
        p_amounts, p_currencies, p_stages, p_authorized_at, p_submitted_at, p_executed_at,
        p_failed_at, p_failure_reasons, p_statuses, p_details, p_event_ids, p_delivery_ids,
        p_event_merchants, p_event_families, p_event_types, p_event_payloads,
        p_event_ordering_keys, p_event_ordering_seqs, p_next_payouts, p_next_at, p_job_kind,
        p_move_ids, p_move_kinds, p_move_payouts, p_move_from, p_move_to, p_move_to_codes,
        p_move_currencies, p_move_amounts);
    RETURN true;
END
$$;
