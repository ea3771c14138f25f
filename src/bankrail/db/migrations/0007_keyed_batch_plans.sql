-- The batch functions look rows up by key for a bounded batch (at most a few hundred items):
-- an index lookup per item is always the right plan. The planner does not know the batch is
-- small (a parameter array or a jsonb document is estimated at 100 rows or more), so while a
-- table holds fewer than some tens of thousands of rows it preferred to hash the whole table
-- (idempotency_keys, payouts) on every call: a cost that grew with the table until the plan
-- flipped, and the largest share of PostgreSQL's time per payout on a young database.
-- Without sequential scans and hash or merge joins, each statement probes the indexes.
ALTER FUNCTION bankrail_accept_v3_payouts
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION bankrail_advance_payouts
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;
ALTER FUNCTION bankrail_ledger_post
    SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off;

-- The claim of a batch of payout jobs (payouts.jobs), under the same rule: a generic plan
-- of it, made while the tables were small, hashed the whole payouts table on every claim.
-- Each row is a due job, its payout (the whole row) and the ledger rows of its account; the
-- payouts and the jobs are locked, the account share-locked (see payouts/jobs.py).
CREATE FUNCTION bankrail_claim_payout_jobs(p_now timestamptz, p_limit integer, p_kind text)
RETURNS TABLE (job_id bigint, payout payouts, held_ledger_id bigint,
               available_ledger_id bigint)
LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
AS $$
BEGIN
    RETURN QUERY
    SELECT j.id, p, ma.held_ledger_id, ma.available_ledger_id
    FROM jobs j
    JOIN payouts p ON p.id = (j.payload ->> 'payout_id')::uuid
    JOIN merchant_accounts ma ON ma.id = p.merchant_account_id
    WHERE j.kind = p_kind AND j.run_at <= p_now AND p.destination_account_id IS NULL
      AND ma.balance_threshold IS NULL
    ORDER BY j.run_at, j.id
    LIMIT p_limit
    FOR UPDATE OF j, p SKIP LOCKED FOR SHARE OF ma SKIP LOCKED;
END
$$;
