-- The ledger: the one posting primitive, the clearing accounts created on first use, and
-- the movements of the batch writers as two-posting transactions.
-- Owned by bankrail.ledger (ledger/service.py `post`, ledger/movements.py); the batch writers of
-- other areas call these functions and never update a balance or write a posting themselves.
--
-- Every function here probes indexes whatever the statistics say (a batch is at most a few
-- hundred rows, but the planner cannot see the size of an array argument and would hash whole
-- tables while they are small), and uses its generic plan from the first call (the plans are
-- the same for every call, so planning each call again is only cost).

-- Balanced ledger transactions, any number of them, in one call: a single transaction and a
-- batch of a thousand go through the same statements.
--
--   transactions: p_ids, p_kinds, p_reference_ids, p_created_at (parallel arrays);
--   postings:     p_posting_transaction_ids (one of p_ids), p_posting_account_ids,
--                 p_posting_amounts (signed minor units); a posting's time is its
--                 transaction's.
--
-- The storage invariants are enforced here, whatever the caller checked: every account exists
-- (BRL01), a transaction's postings share one currency (BRL02), sum to zero and are at least
-- two (BRL03). The CHECK on ledger_accounts refuses a balance below zero on an account that
-- may not go negative (23514), and bigint a balance outside the 64-bit range (22003); any of
-- these fails the whole call.
--
-- Locks: the ledger rows the call touches, in id order (overlapping calls cannot deadlock),
-- FOR NO KEY UPDATE (a balance is not a key: the key-share locks of foreign keys to an account
-- do not wait for it). They are taken after the transaction rows are written and before the
-- postings, so that the postings' foreign-key locks are taken by the transaction that already
-- holds the rows (another's would make PostgreSQL build a multixact on the hottest rows), and
-- they stay until the caller's commit.
CREATE OR REPLACE FUNCTION bankrail_post_transactions(
    p_ids uuid[],
    p_kinds text[],
    p_reference_ids uuid[],
    p_created_at timestamptz[],
    p_posting_transaction_ids uuid[],
    p_posting_account_ids bigint[],
    p_posting_amounts bigint[]
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_accounts bigint[];
    v_changes numeric[];
    v_found integer;
    v_mixed boolean;
    v_unbalanced boolean;
BEGIN
    IF cardinality(p_ids) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO ledger_transactions (id, kind, reference_id, created_at)
        SELECT t.id, t.kind, t.reference_id, t.created_at
        FROM unnest(p_ids, p_kinds, p_reference_ids, p_created_at)
            AS t (id, kind, reference_id, created_at);
    -- The net change of each account, in id order.
    SELECT array_agg(d.account_id ORDER BY d.account_id),
           array_agg(d.amount ORDER BY d.account_id)
        INTO v_accounts, v_changes
        FROM (SELECT p.account_id, sum(p.amount) AS amount
              FROM unnest(p_posting_account_ids, p_posting_amounts) AS p (account_id, amount)
              GROUP BY p.account_id) d;
    SELECT count(*) INTO v_found
        FROM (SELECT 1 FROM ledger_accounts WHERE id = ANY (v_accounts)
              ORDER BY id FOR NO KEY UPDATE) l;
    IF v_found <> coalesce(cardinality(v_accounts), 0) THEN
        RAISE EXCEPTION 'a posting names an unknown ledger account' USING ERRCODE = 'BRL01';
    END IF;
    SELECT coalesce(bool_or(t.currencies > 1), false),
           coalesce(bool_or(t.total <> 0 OR t.postings < 2), false)
               OR count(*) <> cardinality(p_ids)
        INTO v_mixed, v_unbalanced
        FROM (SELECT count(DISTINCT a.currency) AS currencies, sum(p.amount) AS total,
                     count(*) AS postings
              FROM unnest(p_posting_transaction_ids, p_posting_account_ids, p_posting_amounts)
                  AS p (transaction_id, account_id, amount)
              JOIN ledger_accounts a ON a.id = p.account_id
              GROUP BY p.transaction_id) t;
    IF v_mixed THEN
        RAISE EXCEPTION 'a transaction''s postings must share one currency'
            USING ERRCODE = 'BRL02';
    END IF;
    IF v_unbalanced THEN
        RAISE EXCEPTION 'a transaction''s postings must be at least two and sum to zero'
            USING ERRCODE = 'BRL03';
    END IF;
    UPDATE ledger_accounts a SET balance = a.balance + d.amount
        FROM unnest(v_accounts, v_changes) AS d (account_id, amount)
        WHERE a.id = d.account_id AND d.amount <> 0;
    INSERT INTO ledger_postings (transaction_id, account_id, amount, created_at)
        SELECT p.transaction_id, p.account_id, p.amount, t.created_at
        FROM unnest(p_posting_transaction_ids, p_posting_account_ids, p_posting_amounts)
            AS p (transaction_id, account_id, amount)
        JOIN ledger_transactions t ON t.id = p.transaction_id;
END
$$;

-- The ids of clearing ledger accounts (they stand for the outside world on one rail, for one
-- merchant account, and may go negative), by code, created when missing without spending a
-- sequence value on the ones that exist; in the order of p_codes, NULL for a NULL code.
CREATE OR REPLACE FUNCTION bankrail_clearing_accounts(p_codes text[], p_currencies text[])
RETURNS bigint[] LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_ids bigint[];
BEGIN
    INSERT INTO ledger_accounts (code, currency, allow_negative)
        SELECT DISTINCT x.code, x.currency, true
        FROM unnest(p_codes, p_currencies) AS x (code, currency)
        WHERE x.code IS NOT NULL
          AND NOT EXISTS (SELECT 1 FROM ledger_accounts a WHERE a.code = x.code)
        ORDER BY 1
        ON CONFLICT (code) DO NOTHING;
    SELECT array_agg(a.id ORDER BY x.n) INTO v_ids
        FROM unnest(p_codes) WITH ORDINALITY AS x (code, n)
        LEFT JOIN ledger_accounts a ON a.code = x.code;
    RETURN v_ids;
END
$$;

-- Movements of money as ledger/movements.py decides them (`columns`), each one balanced
-- transaction of two postings: p_amounts from the ledger account p_from to p_to or, where
-- p_to is NULL, to the clearing account coded p_to_codes (created when missing, in
-- p_currencies). The batch writers of holds and of payout steps call it; which accounts
-- move is never decided here.
CREATE OR REPLACE FUNCTION bankrail_post_movements(
    p_ids uuid[],
    p_kinds text[],
    p_reference_ids uuid[],
    p_created_at timestamptz[],
    p_from bigint[],
    p_to bigint[],
    p_to_codes text[],
    p_currencies text[],
    p_amounts bigint[]
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_to bigint[] := p_to;
BEGIN
    IF cardinality(p_ids) = 0 THEN
        RETURN;
    END IF;
    IF EXISTS (SELECT 1 FROM unnest(p_to_codes) AS c (code) WHERE c.code IS NOT NULL) THEN
        SELECT array_agg(coalesce(x.to_id, x.clearing_id) ORDER BY x.n) INTO v_to
            FROM unnest(p_to, bankrail_clearing_accounts(p_to_codes, p_currencies))
                WITH ORDINALITY AS x (to_id, clearing_id, n);
    END IF;
    PERFORM bankrail_post_transactions(
        p_ids, p_kinds, p_reference_ids, p_created_at, p_ids || p_ids, p_from || v_to,
        ARRAY(SELECT -m FROM unnest(p_amounts) WITH ORDINALITY AS a (m, n) ORDER BY n)
            || p_amounts);
END
$$;
