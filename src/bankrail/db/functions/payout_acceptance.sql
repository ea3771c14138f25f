-- The common case of POST /v3/payouts for a batch of requests in one statement, hence one
-- transaction and one commit for all of them (group commit: each answer waits for it); see
-- payouts/service.py `PayoutBatcher`.
--
-- An item is taken when it has a fresh Idempotency-Key (not used before, not in flight, not
-- twice in the batch), names the caller's own account in the payout's currency without a
-- balance threshold, pays an external payee that is not a Bankrail account, a beneficiary
-- not on the screening list, and the available funds left by the batch's earlier items cover
-- it. For each taken item it writes the payout, its activity row, its first job, the stored
-- answer under the key, and the hold (through bankrail_post_transactions). Items not taken
-- get no row at all, and their requests take the general path. Returns, in item order,
-- whether each item was taken.
--
-- Every row but the balances is written before the merchant's ledger rows are locked, so that
-- they stay locked only for the balance update and the commit. The balances are read before
-- the lock: one that fell meanwhile below the batch's holds fails the CHECK on
-- ledger_accounts, and the whole batch with it (the caller then takes the general path for
-- each request).
CREATE OR REPLACE FUNCTION bankrail_accept_v3_payouts(p_items jsonb, p_job_kind text)
RETURNS boolean[] LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked boolean[];
    v_taken boolean[];
    v_item_amounts bigint[];
    v_item_ledgers bigint[];
    v_item_balances bigint[];
    v_ledgers bigint[] := '{}';
    v_left bigint[] := '{}';
    v_holds uuid[];
    v_payouts uuid[];
    v_from bigint[];
    v_to bigint[];
    v_hold_amounts bigint[];
    v_hold_times timestamptz[];
    j integer;
    k integer;
BEGIN
    -- 1. The idempotency key's lock, for the first use of each key in the batch.
    SELECT array_agg(x.first_use AND pg_try_advisory_xact_lock(x.lock_key) ORDER BY x.n)
        INTO v_locked
        FROM (SELECT i.lock_key, e.n,
                     row_number() OVER (PARTITION BY i.lock_key ORDER BY e.n) = 1 AS first_use
              FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n),
                   jsonb_to_record(e.v) AS i (lock_key bigint)) x;
    -- 2. Which items are the common case, read with a fresh snapshot (a key committed by
    -- whoever held its lock before us is seen), with the available balance of their account.
    SELECT array_agg(c.n IS NOT NULL ORDER BY i.n), array_agg(c.amount ORDER BY i.n),
           array_agg(c.available_ledger_id ORDER BY i.n), array_agg(c.balance ORDER BY i.n)
        INTO v_taken, v_item_amounts, v_item_ledgers, v_item_balances
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS i (v, n)
    LEFT JOIN (
        SELECT e.n, i.amount, ma.available_ledger_id, la.balance
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n),
             jsonb_to_record(e.v) AS i (scope text, key text, merchant_id uuid,
                 account_id uuid, currency text, amount bigint, iban text, sort_code text,
                 account_number text, normalised_name text)
        JOIN merchant_accounts ma ON ma.id = i.account_id
             AND ma.merchant_id = i.merchant_id AND ma.currency = i.currency
             AND ma.balance_threshold IS NULL
        JOIN ledger_accounts la ON la.id = ma.available_ledger_id
        WHERE v_locked[e.n]
          AND NOT EXISTS (SELECT 1 FROM idempotency_keys k
                          WHERE k.scope = i.scope AND k.key = i.key)
          AND (i.iban IS NULL OR NOT EXISTS (
                  SELECT 1 FROM merchant_accounts p WHERE p.iban = i.iban))
          AND (i.sort_code IS NULL OR NOT EXISTS (
                  SELECT 1 FROM merchant_accounts p WHERE p.sort_code = i.sort_code
                      AND p.account_number = i.account_number))
          AND NOT EXISTS (SELECT 1 FROM screening_list s
                          WHERE s.normalised_name = i.normalised_name)) c ON c.n = i.n;
    -- In item order, each item the balance left by the earlier ones covers.
    FOR k IN 1 .. cardinality(v_taken) LOOP
        CONTINUE WHEN NOT v_taken[k];
        j := array_position(v_ledgers, v_item_ledgers[k]);
        IF j IS NULL THEN
            v_ledgers := v_ledgers || v_item_ledgers[k];
            v_left := v_left || v_item_balances[k];
            j := cardinality(v_ledgers);
        END IF;
        IF v_left[j] >= v_item_amounts[k] THEN
            v_left[j] := v_left[j] - v_item_amounts[k];
        ELSE
            v_taken[k] := false;
        END IF;
    END LOOP;
    IF NOT (true = ANY (v_taken)) THEN
        RETURN v_taken;
    END IF;
    -- 3. Every row of the taken items, before any ledger lock is taken.
    WITH x AS (
        SELECT i.*, ma.available_ledger_id, ma.held_ledger_id
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n),
             jsonb_to_record(e.v) AS i (scope text, key text, fingerprint text, answer text,
             merchant_id uuid, account_id uuid, currency text, amount bigint, payout_id uuid,
             ledger_transaction_id uuid, beneficiary jsonb,
             name text, iban text, sort_code text, account_number text, reference text,
             metadata jsonb, scheme text, details jsonb, now timestamptz)
        JOIN merchant_accounts ma ON ma.id = i.account_id
        WHERE v_taken[e.n]),
    p AS (
        INSERT INTO payouts (id, api, merchant_id, merchant_account_id, transaction_id,
            amount_in_minor, currency, beneficiary, beneficiary_name, beneficiary_iban,
            beneficiary_sort_code, beneficiary_account_number, reference, context_code,
            metadata, scheme_id, destination_account_id, stage, pending_failure, created_at)
        SELECT x.payout_id, 'v3', x.merchant_id, x.account_id, NULL, x.amount, x.currency,
            x.beneficiary, x.name, x.iban, x.sort_code, x.account_number, x.reference, NULL,
            NULLIF(x.metadata, 'null'::jsonb), x.scheme, NULL, 'pending', NULL, x.now
        FROM x),
    a AS (
        INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor,
            currency, status, created_at, updated_at, details)
        SELECT x.payout_id, x.account_id, 'payout', x.amount, x.currency, 'pending', x.now,
            x.now, x.details
        FROM x),
    j AS (
        INSERT INTO jobs (kind, payload, run_at)
        SELECT p_job_kind, jsonb_build_object('payout_id', x.payout_id::text), x.now FROM x),
    k AS (
        INSERT INTO idempotency_keys (scope, key, fingerprint, status_code, body, created_at)
        SELECT x.scope, x.key, decode(x.fingerprint, 'hex'), 202,
            convert_to(x.answer, 'UTF8'), x.now
        FROM x
        ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
            status_code = EXCLUDED.status_code, body = EXCLUDED.body,
            created_at = EXCLUDED.created_at)
    SELECT array_agg(x.ledger_transaction_id), array_agg(x.payout_id),
           array_agg(x.available_ledger_id), array_agg(x.held_ledger_id), array_agg(x.amount),
           array_agg(x.now)
        INTO v_holds, v_payouts, v_from, v_to, v_hold_amounts, v_hold_times
        FROM x;
    -- 4. The holds: available to held, one ledger transaction per payout.
    PERFORM bankrail_post_transactions(
        v_holds, array_fill('payout_hold'::text, ARRAY[cardinality(v_holds)]), v_payouts,
        v_hold_times, v_holds || v_holds, v_from || v_to,
        ARRAY(SELECT -h FROM unnest(v_hold_amounts) WITH ORDINALITY AS a (h, n) ORDER BY n)
            || v_hold_amounts);
    PERFORM pg_notify('bankrail_jobs', '');
    RETURN v_taken;
END
$$;
