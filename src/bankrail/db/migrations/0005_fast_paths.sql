-- Server-side functions that do in one round trip what the Python code did in several
-- (performance, issue 7). They change no table: every row they write is the row the Python
-- path writes, and the Python path stays the reference for every case they do not take.

-- One balanced ledger transaction: the row, the account locks (in id order, so overlapping
-- transactions cannot deadlock), the balance updates (the CHECK on ledger_accounts still
-- refuses a negative merchant balance) and the postings. The caller has validated that the
-- postings balance; `p_account_ids` come sorted by account id.
CREATE FUNCTION bankrail_ledger_post(
    p_transaction_id uuid,
    p_kind text,
    p_reference_id uuid,
    p_account_ids bigint[],
    p_amounts bigint[],
    p_now timestamptz
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_ids bigint[];
    v_found integer;
    v_currencies integer;
BEGIN
    INSERT INTO ledger_transactions (id, kind, reference_id, created_at)
        VALUES (p_transaction_id, p_kind, p_reference_id, p_now);
    SELECT array_agg(DISTINCT x ORDER BY x) INTO v_ids FROM unnest(p_account_ids) AS x;
    PERFORM 1 FROM ledger_accounts WHERE id = ANY (v_ids) ORDER BY id FOR UPDATE;
    SELECT count(*), count(DISTINCT currency) INTO v_found, v_currencies
        FROM ledger_accounts WHERE id = ANY (v_ids);
    IF v_found <> cardinality(v_ids) THEN
        RAISE EXCEPTION 'a posting names an unknown ledger account' USING ERRCODE = 'BRL01';
    END IF;
    IF v_currencies <> 1 THEN
        RAISE EXCEPTION 'a transaction''s postings must share one currency'
            USING ERRCODE = 'BRL02';
    END IF;
    UPDATE ledger_accounts a SET balance = a.balance + agg.amount
        FROM (SELECT p.account_id, sum(p.amount) AS amount
              FROM unnest(p_account_ids, p_amounts) AS p (account_id, amount)
              GROUP BY p.account_id) agg
        WHERE a.id = agg.account_id;
    INSERT INTO ledger_postings (transaction_id, account_id, amount, created_at)
        SELECT p_transaction_id, p.account_id, p.amount, p_now
        FROM unnest(p_account_ids, p_amounts) AS p (account_id, amount);
END
$$;

-- The common case of POST /v3/payouts, for a batch of requests in one statement, hence one
-- transaction and one commit for all of them (group commit: each answer waits for it).
-- An item is taken when it has a fresh Idempotency-Key (not used before, not in flight, not
-- twice in the batch), names the caller's own account in the payout's currency without a
-- balance threshold, pays an external payee that is not a Bankrail account, a beneficiary
-- not on the screening list, and the account's available funds cover it. For each taken item
-- it writes exactly what the Python path writes: the payout, its activity row, its first
-- job, the stored answer under the key and the hold. Items not taken get no row at all, and
-- their requests take the general (Python) path, which knows every rule. Returns, in item
-- order, whether each item was taken.
CREATE FUNCTION bankrail_accept_v3_payouts(p_items jsonb, p_job_kind text)
RETURNS boolean[] LANGUAGE plpgsql AS $$
DECLARE
    v_n integer := jsonb_array_length(p_items);
    v_taken boolean[] := array_fill(false, ARRAY[v_n]);
    v_available_ids bigint[] := array_fill(0::bigint, ARRAY[v_n]);
    v_held_ids bigint[] := array_fill(0::bigint, ARRAY[v_n]);
    v_seen bigint[] := '{}';
    v_item jsonb;
    v_lock bigint;
    v_account record;
    v_balance bigint;
    v_amount bigint;
    v_now timestamptz;
    v_payout uuid;
    i integer;
BEGIN
    FOR i IN 1 .. v_n LOOP
        v_item := p_items -> (i - 1);
        v_lock := (v_item ->> 'lock_key')::bigint;
        CONTINUE WHEN v_lock = ANY (v_seen);
        v_seen := v_seen || v_lock;
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(v_lock);
        CONTINUE WHEN EXISTS (SELECT 1 FROM idempotency_keys
            WHERE scope = v_item ->> 'scope' AND key = v_item ->> 'key');
        SELECT currency, available_ledger_id, held_ledger_id, balance_threshold
            INTO v_account FROM merchant_accounts
            WHERE id = (v_item ->> 'account_id')::uuid
              AND merchant_id = (v_item ->> 'merchant_id')::uuid;
        CONTINUE WHEN NOT FOUND OR v_account.currency <> v_item ->> 'currency'
            OR v_account.balance_threshold IS NOT NULL;
        CONTINUE WHEN (v_item ->> 'iban') IS NOT NULL AND EXISTS (
            SELECT 1 FROM merchant_accounts WHERE iban = v_item ->> 'iban');
        CONTINUE WHEN (v_item ->> 'sort_code') IS NOT NULL AND EXISTS (
            SELECT 1 FROM merchant_accounts WHERE sort_code = v_item ->> 'sort_code'
                AND account_number = v_item ->> 'account_number');
        CONTINUE WHEN EXISTS (SELECT 1 FROM screening_list
            WHERE normalised_name = v_item ->> 'normalised_name');
        v_taken[i] := true;
        v_available_ids[i] := v_account.available_ledger_id;
        v_held_ids[i] := v_account.held_ledger_id;
    END LOOP;
    -- Every ledger row the batch touches, locked in id order (no deadlock with another
    -- batch or a ledger posting), and only now: they stay locked until the commit.
    PERFORM 1 FROM ledger_accounts
        WHERE id = ANY (v_available_ids || v_held_ids) ORDER BY id FOR UPDATE;
    FOR i IN 1 .. v_n LOOP
        CONTINUE WHEN NOT v_taken[i];
        v_item := p_items -> (i - 1);
        v_amount := (v_item ->> 'amount')::bigint;
        SELECT balance INTO v_balance FROM ledger_accounts WHERE id = v_available_ids[i];
        IF v_balance < v_amount THEN
            v_taken[i] := false;
            CONTINUE;
        END IF;
        v_now := (v_item ->> 'now')::timestamptz;
        v_payout := (v_item ->> 'payout_id')::uuid;
        INSERT INTO payouts (id, api, merchant_id, merchant_account_id, transaction_id,
            amount_in_minor, currency, beneficiary, beneficiary_name, beneficiary_iban,
            beneficiary_sort_code, beneficiary_account_number, reference, context_code,
            metadata, scheme_id, destination_account_id, stage, pending_failure, created_at)
        VALUES (v_payout, 'v3', (v_item ->> 'merchant_id')::uuid,
            (v_item ->> 'account_id')::uuid, NULL, v_amount, v_item ->> 'currency',
            v_item -> 'beneficiary', v_item ->> 'name', v_item ->> 'iban',
            v_item ->> 'sort_code', v_item ->> 'account_number', v_item ->> 'reference', NULL,
            NULLIF(v_item -> 'metadata', 'null'::jsonb), v_item ->> 'scheme', NULL, 'pending',
            NULL, v_now);
        INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor,
            currency, status, created_at, updated_at, details)
        VALUES (v_payout, (v_item ->> 'account_id')::uuid, 'payout', v_amount,
            v_item ->> 'currency', 'pending', v_now, v_now, v_item -> 'details')
        ON CONFLICT (merchant_account_id, id) DO UPDATE SET status = EXCLUDED.status,
            updated_at = EXCLUDED.updated_at,
            details = account_activity.details || EXCLUDED.details;
        INSERT INTO jobs (kind, payload, run_at)
            VALUES (p_job_kind, jsonb_build_object('payout_id', v_payout::text), v_now);
        INSERT INTO idempotency_keys (scope, key, fingerprint, status_code, body, created_at)
        VALUES (v_item ->> 'scope', v_item ->> 'key', decode(v_item ->> 'fingerprint', 'hex'),
            202, convert_to(v_item ->> 'answer', 'UTF8'), v_now)
        ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
            status_code = EXCLUDED.status_code, body = EXCLUDED.body,
            created_at = EXCLUDED.created_at;
        IF v_available_ids[i] < v_held_ids[i] THEN
            PERFORM bankrail_ledger_post(
                (v_item ->> 'ledger_transaction_id')::uuid, 'payout_hold', v_payout,
                ARRAY[v_available_ids[i], v_held_ids[i]], ARRAY[-v_amount, v_amount], v_now);
        ELSE
            PERFORM bankrail_ledger_post(
                (v_item ->> 'ledger_transaction_id')::uuid, 'payout_hold', v_payout,
                ARRAY[v_held_ids[i], v_available_ids[i]], ARRAY[v_amount, -v_amount], v_now);
        END IF;
    END LOOP;
    IF true = ANY (v_taken) THEN
        PERFORM pg_notify('bankrail_jobs', '');
    END IF;
    RETURN v_taken;
END
$$;
