-- The acceptance of refunds (refunds/acceptance.py `accept_refunds`), for a batch of requests
-- at a time (one request is a batch of one): one statement reads what the rules need, Python
-- decides every request (refunds/models.py `check_refundable`, and the hold), and one
-- statement writes what was decided. Both run in one transaction, committed once for the
-- batch. Neither decides a business rule.

-- What the rules need for each request of p_items (a jsonb array of objects: lock_key,
-- scope, key and signature, all null for a request without an Idempotency-Key, merchant_id
-- and payment_id),
-- one row per item in item order:
--   locked: the key's advisory lock, taken for the transaction (false when another
--     transaction holds it, or for a key's second use in the batch: the key is in flight;
--     true for a request without a key);
--   the answer stored under the key and whether the signature was accepted before
--     (bankrail_claimed_keys, idempotency.sql), read after the lock;
--   the payment, if it is the merchant's, read after its row is locked FOR NO KEY UPDATE
--     (in id order, until the commit: every refund of the payment waits for the previous
--     one's commit and sees what it refunded);
--   the account that received it, with its balances, read after its ledger rows are locked
--     FOR NO KEY UPDATE in id order (as payout acceptance locks them).
CREATE OR REPLACE FUNCTION bankrail_read_refund_requests(p_items jsonb)
RETURNS TABLE (
    locked boolean,
    stored_fingerprint bytea,
    stored_status integer,
    stored_body bytea,
    stored_at timestamptz,
    signature_used boolean,
    payment_id uuid,
    payment_status text,
    payment_amount bigint,
    refunded_amount bigint,
    account_id uuid,
    account_merchant_id uuid,
    account_currency text,
    available_ledger_id bigint,
    held_ledger_id bigint,
    balance_threshold bigint,
    notification_state text,
    available bigint,
    held bigint
) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked boolean[];
    v_payments uuid[];
BEGIN
    -- 1. The key's lock, for the first use of each key in the batch.
    v_locked := bankrail_lock_idempotency_keys(p_items);
    -- 2. The merchant's payments of the requests that hold their key, locked in id order,
    -- then the ledger rows of the accounts that received them, in id order.
    SELECT array_agg(i.payment_id)
        INTO v_payments
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
        CROSS JOIN LATERAL jsonb_to_record(e.v) AS i (payment_id uuid)
        WHERE v_locked[e.n];
    PERFORM 1 FROM payments WHERE id = ANY (v_payments) ORDER BY id FOR NO KEY UPDATE;
    PERFORM 1 FROM ledger_accounts
        WHERE id IN (SELECT ma.available_ledger_id FROM payments p
                     JOIN merchant_accounts ma ON ma.id = p.merchant_account_id
                     WHERE p.id = ANY (v_payments)
                     UNION ALL
                     SELECT ma.held_ledger_id FROM payments p
                     JOIN merchant_accounts ma ON ma.id = p.merchant_account_id
                     WHERE p.id = ANY (v_payments))
        ORDER BY id FOR NO KEY UPDATE;
    -- 3. Everything else, with a fresh snapshot (taken after the locks).
    RETURN QUERY
    SELECT c.locked, c.stored_fingerprint, c.stored_status, c.stored_body, c.stored_at,
           c.signature_used,
           p.id, p.status, p.amount_in_minor, p.refunded_amount_in_minor,
           ma.id, ma.merchant_id, ma.currency::text, ma.available_ledger_id, ma.held_ledger_id,
           ma.balance_threshold, ma.notification_state, av.balance, hd.balance
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
    CROSS JOIN LATERAL jsonb_to_record(e.v)
        AS i (merchant_id uuid, payment_id uuid)
    JOIN bankrail_claimed_keys(p_items, v_locked) c ON c.n = e.n
    LEFT JOIN payments p ON v_locked[e.n] AND p.id = i.payment_id
        AND p.merchant_id = i.merchant_id
    LEFT JOIN merchant_accounts ma ON ma.id = p.merchant_account_id
    LEFT JOIN ledger_accounts av ON av.id = ma.available_ledger_id
    LEFT JOIN ledger_accounts hd ON hd.id = ma.held_ledger_id
    ORDER BY e.n;
END
$$;

-- Writes a batch's decisions, each group a jsonb array: the refunds (p_refunds: the refunds
-- row and its activity row's details), each with its first job of kind p_job_kind; what each
-- payment has now refunded (p_refunded: payment_id, amount added); the answers under the
-- requests' keys (p_answers, bankrail_store_idempotent_answers); and the holds of the
-- refunds, of the kind the ledger named, with the notification states and events they cause
-- (p_holds, p_states, p_events: bankrail_write_holds, holds.sql).
CREATE OR REPLACE FUNCTION bankrail_write_refund_acceptances(
    p_refunds jsonb,
    p_job_kind text,
    p_refunded jsonb,
    p_answers jsonb,
    p_holds jsonb,
    p_states jsonb,
    p_events jsonb
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF jsonb_array_length(p_refunds) > 0 THEN
        WITH x AS (
            SELECT * FROM jsonb_to_recordset(p_refunds) AS r (id uuid, merchant_id uuid,
                payment_id uuid, account_id uuid, amount bigint, currency text,
                reference text, metadata jsonb, scheme text, pending_failure text,
                details jsonb, now timestamptz)),
        r AS (
            INSERT INTO refunds (id, merchant_id, payment_id, merchant_account_id,
                amount_in_minor, currency, reference, metadata, scheme_id, stage,
                pending_failure, created_at)
            SELECT x.id, x.merchant_id, x.payment_id, x.account_id, x.amount, x.currency,
                x.reference, NULLIF(x.metadata, 'null'::jsonb), x.scheme, 'pending',
                x.pending_failure, x.now
            FROM x),
        a AS (
            INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor,
                currency, status, created_at, updated_at, details)
            SELECT x.id, x.account_id, 'refund', x.amount, x.currency, 'pending', x.now,
                x.now, x.details
            FROM x)
        INSERT INTO jobs (kind, payload, run_at)
            SELECT p_job_kind, jsonb_build_object('refund_id', x.id::text), x.now FROM x;
        PERFORM pg_notify('bankrail_jobs', '');
        UPDATE payments p SET refunded_amount_in_minor = p.refunded_amount_in_minor + x.amount
            FROM jsonb_to_recordset(p_refunded) AS x (payment_id uuid, amount bigint)
            WHERE p.id = x.payment_id;
    END IF;
    PERFORM bankrail_store_idempotent_answers(p_answers);
    PERFORM bankrail_write_holds(p_holds, p_states, p_events);
END
$$;
