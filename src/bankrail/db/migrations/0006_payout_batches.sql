-- The steps of many payouts in one statement (performance, issue 7). `payouts.jobs` claims a
-- batch of due payout jobs, decides every payout's steps with the Python state machine (the
-- same decisions `advance_payout` makes one payout at a time), and hands the outcome here.
-- It changes no table: every row written is the row `advance_payout` writes.
--
-- Arguments come as parallel arrays, one group per kind of row:
--   jobs finished:  p_job_ids (deleted);
--   payouts:        id, merchant account, amount, currency, new lifecycle fields, the status
--                   and details of its activity row;
--   events:         id, delivery id, merchant, family, type, the exact bytes to deliver;
--   next steps:     payout id and when its job runs again (kind p_job_kind);
--   money:          one balanced ledger transaction per payout that moves money: from its
--                   held ledger account to either a ledger account id or the code of a
--                   clearing account (created when missing), the same currency throughout.
CREATE FUNCTION bankrail_advance_payouts(
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
) RETURNS void LANGUAGE plpgsql AS $$
DECLARE
    v_to bigint[];
    v_pending integer;
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

    -- The outbox, as record_event writes it: with no URI for the family the delivery is
    -- `skipped`, and the delivery workers are woken only when something is to be sent.
    INSERT INTO events (id, merchant_id, family, event_type, payload, created_at)
        SELECT x.id, x.merchant_id, x.family, x.event_type, x.payload, p_now
        FROM unnest(p_event_ids, p_event_merchants, p_event_families, p_event_types,
                    p_event_payloads) AS x (id, merchant_id, family, event_type, payload);
    WITH d AS (
        INSERT INTO webhook_deliveries (id, event_id, merchant_id, event_type, uri, status,
                next_attempt_at, created_at, updated_at, window_start)
            SELECT x.delivery_id, x.event_id, x.merchant_id, x.event_type, u.uri,
                   CASE WHEN u.uri IS NULL THEN 'skipped' ELSE 'pending' END,
                   CASE WHEN u.uri IS NULL THEN NULL ELSE p_now END, p_now, p_now, p_now
            FROM unnest(p_delivery_ids, p_event_ids, p_event_merchants, p_event_families,
                        p_event_types) AS x (delivery_id, event_id, merchant_id, family,
                                             event_type)
            JOIN merchants m ON m.id = x.merchant_id
            CROSS JOIN LATERAL (SELECT CASE WHEN x.family = 'payments'
                THEN m.payments_webhook_uri ELSE m.payouts_webhook_uri END AS uri) u
            RETURNING uri)
    SELECT count(uri) INTO v_pending FROM d;
    IF v_pending > 0 THEN
        PERFORM pg_notify('bankrail_webhooks', '');
    END IF;

    IF cardinality(p_next_payouts) > 0 THEN
        INSERT INTO jobs (kind, payload, run_at)
            SELECT p_job_kind, jsonb_build_object('payout_id', x.id::text), x.run_at
            FROM unnest(p_next_payouts, p_next_at) AS x (id, run_at);
        PERFORM pg_notify('bankrail_jobs', '');
    END IF;

    IF cardinality(p_move_ids) > 0 THEN
        -- Clearing accounts are created on first use, as ensure_account does (without
        -- spending a sequence value on the ones that exist).
        INSERT INTO ledger_accounts (code, currency, allow_negative)
            SELECT DISTINCT x.code, x.currency, true
            FROM unnest(p_move_to_codes, p_move_currencies) AS x (code, currency)
            WHERE x.code IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM ledger_accounts a WHERE a.code = x.code)
            ORDER BY 1
            ON CONFLICT (code) DO NOTHING;
        SELECT array_agg(coalesce(x.to_id, a.id) ORDER BY x.n) INTO v_to
            FROM unnest(p_move_to, p_move_to_codes) WITH ORDINALITY AS x (to_id, code, n)
            LEFT JOIN ledger_accounts a ON a.code = x.code;
        -- Every ledger row the batch touches, locked in id order (no deadlock with another
        -- batch or posting), and only now: they stay locked until the commit. The postings
        -- follow the lock, so that their foreign keys' key-share locks are taken by the
        -- transaction that already holds the row (others' would make PostgreSQL build a
        -- multixact on the hottest rows for every batch).
        PERFORM 1 FROM ledger_accounts WHERE id = ANY (p_move_from || v_to)
            ORDER BY id FOR NO KEY UPDATE;
        -- The CHECK on ledger_accounts refuses a held balance that would go negative, and
        -- bigint refuses one that would leave the 64-bit range: either fails the batch.
        UPDATE ledger_accounts a SET balance = a.balance + agg.amount
            FROM (SELECT s.account_id, sum(s.amount) AS amount
                  FROM (SELECT f.account_id, -f.amount AS amount
                        FROM unnest(p_move_from, p_move_amounts) AS f (account_id, amount)
                        UNION ALL
                        SELECT t.account_id, t.amount
                        FROM unnest(v_to, p_move_amounts) AS t (account_id, amount)) s
                  GROUP BY s.account_id) agg
            WHERE a.id = agg.account_id;
        INSERT INTO ledger_transactions (id, kind, reference_id, created_at)
            SELECT x.id, x.kind, x.payout_id, p_now
            FROM unnest(p_move_ids, p_move_kinds, p_move_payouts) AS x (id, kind, payout_id);
        INSERT INTO ledger_postings (transaction_id, account_id, amount, created_at)
            SELECT x.id, x.account_id, x.amount, p_now
            FROM (SELECT f.id, f.account_id, -f.amount AS amount
                  FROM unnest(p_move_ids, p_move_from, p_move_amounts)
                      AS f (id, account_id, amount)
                  UNION ALL
                  SELECT t.id, t.account_id, t.amount
                  FROM unnest(p_move_ids, v_to, p_move_amounts)
                      AS t (id, account_id, amount)) x;
    END IF;
END
$$;

-- The common case of POST /v3/payouts (migration 0005), rewritten set-based: the same items
-- are taken and the same rows written, with a few statements per batch instead of about
-- fifteen per item, and every row but the balances written before the merchant's ledger
-- rows are locked, so that they stay locked only for the balance update and the commit.
-- The balances are read before the lock: one that fell meanwhile below the batch's holds
-- fails the CHECK on ledger_accounts, and the whole batch with it (the caller then takes the
-- general path for each request).
CREATE OR REPLACE FUNCTION bankrail_accept_v3_payouts(p_items jsonb, p_job_kind text)
RETURNS boolean[] LANGUAGE plpgsql AS $$
DECLARE
    v_locked boolean[];
    v_taken boolean[];
    v_item_amounts bigint[];
    v_item_ledgers bigint[];
    v_item_balances bigint[];
    v_ledgers bigint[] := '{}';
    v_left bigint[] := '{}';
    v_holds uuid[];
    v_from bigint[];
    v_to bigint[];
    v_hold_amounts bigint[];
    v_hold_times timestamptz[];
    v_ids bigint[];
    v_amounts numeric[];
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
            created_at = EXCLUDED.created_at),
    t AS (
        INSERT INTO ledger_transactions (id, kind, reference_id, created_at)
        SELECT x.ledger_transaction_id, 'payout_hold', x.payout_id, x.now FROM x)
    SELECT array_agg(x.ledger_transaction_id), array_agg(x.available_ledger_id),
           array_agg(x.held_ledger_id), array_agg(x.amount), array_agg(x.now)
        INTO v_holds, v_from, v_to, v_hold_amounts, v_hold_times
        FROM x;
    -- 4. The holds: the ledger rows locked in id order, and only now (they stay locked until
    -- the commit), then the postings (see bankrail_advance_payouts). A balance that fell
    -- meanwhile fails the CHECK, and the whole batch with it: the caller then takes the
    -- general path for each request.
    SELECT array_agg(d.account_id ORDER BY d.account_id), array_agg(d.amount ORDER BY d.account_id)
        INTO v_ids, v_amounts
        FROM (SELECT v.account_id, sum(v.amount) AS amount
              FROM unnest(v_from, v_to, v_hold_amounts) AS h (from_id, to_id, amount),
                   LATERAL (VALUES (h.from_id, -h.amount), (h.to_id, h.amount))
                       AS v (account_id, amount)
              GROUP BY v.account_id) d;
    PERFORM 1 FROM ledger_accounts WHERE id = ANY (v_ids) ORDER BY id FOR NO KEY UPDATE;
    UPDATE ledger_accounts la SET balance = la.balance + d.amount
        FROM unnest(v_ids, v_amounts) AS d (account_id, amount)
        WHERE la.id = d.account_id;
    INSERT INTO ledger_postings (transaction_id, account_id, amount, created_at)
        SELECT h.id, h.from_id, -h.amount, h.at
        FROM unnest(v_holds, v_from, v_hold_amounts, v_hold_times) AS h (id, from_id, amount, at)
        UNION ALL
        SELECT h.id, h.to_id, h.amount, h.at
        FROM unnest(v_holds, v_to, v_hold_amounts, v_hold_times) AS h (id, to_id, amount, at);
    PERFORM pg_notify('bankrail_jobs', '');
    RETURN v_taken;
END
$$;

-- One balanced ledger transaction (migration 0005), locking its accounts FOR NO KEY UPDATE
-- like the batches above: a balance is not a key, and FOR UPDATE would also conflict with
-- the key-share locks that foreign keys to the account take.
CREATE OR REPLACE FUNCTION bankrail_ledger_post(
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
    PERFORM 1 FROM ledger_accounts WHERE id = ANY (v_ids) ORDER BY id FOR NO KEY UPDATE;
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
