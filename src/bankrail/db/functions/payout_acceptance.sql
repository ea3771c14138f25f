-- The acceptance of payout requests (payouts/acceptance.py `accept_payouts`), for a batch of
-- requests at a time (one request is a batch of one): one statement reads everything the
-- rules need, Python decides every request (payouts/models.py `decide_payout`), and one
-- statement writes what was decided. Both run in one transaction, committed once for the
-- batch. Neither decides a business rule.
--
-- Both probe indexes whatever the statistics say, with their generic plan from the first
-- call (see ledger.sql).

-- What the rules need for each request of p_items (a jsonb array of objects: lock_key,
-- scope, key, signature, merchant_id, account_id or (without it) currency, the payee's
-- iban, sort_code and account_number, or a closed loop's source_id and user_id), one row per
-- item in item order (n from 1):
--   locked: the key's advisory lock, taken for the transaction (false when another
--     transaction holds it, or for a key's second use in the batch: the key is in flight);
--   the answer stored under the key and whether the request's signature was accepted
--     before (bankrail_claimed_keys, idempotency.sql), read after the lock (a key committed
--     by whoever held it before is seen);
--   the paying account (v3: the one named, if the merchant's; v1: the merchant's first in
--     the currency), with its balances, read after its ledger rows are locked FOR NO KEY
--     UPDATE, in id order, until the commit: every acceptance of the account waits for the
--     previous one's commit and sees its holds, in every process;
--   a closed loop's payment source, if the user paid from it into the account;
--   the account at Bankrail the payee's identifiers (or the source's) name;
--   on the first row only (the same for every request of the batch), the screening list's
--     version (migration 0032) and, when it is not p_known_list (the version the caller
--     keeps; NULL, the default: none), the skeletons of the list's names, against which Python screens every payout
--     of the batch whatever its loop (rails/screening.py `is_listed`): SQL neither computes a
--     skeleton nor compares one. Both are read in one statement, so the skeletons are the
--     version's.
-- (It replaces bankrail_read_payout_requests, which compared an open loop's skeleton here
-- and is left on an upgraded database for the release before during a rolling upgrade.)
CREATE OR REPLACE FUNCTION bankrail_read_payout_batch(p_items jsonb, p_known_list uuid DEFAULT NULL)
RETURNS TABLE (
    locked boolean,
    stored_fingerprint bytea,
    stored_status integer,
    stored_body bytea,
    stored_at timestamptz,
    signature_used boolean,
    account_id uuid,
    account_merchant_id uuid,
    account_currency text,
    available_ledger_id bigint,
    held_ledger_id bigint,
    balance_threshold bigint,
    notification_state text,
    available bigint,
    held bigint,
    source_id uuid,
    source_user_id text,
    source_name text,
    source_iban text,
    source_sort_code text,
    source_account_number text,
    payee_id uuid,
    payee_currency text,
    list_version uuid,
    listed_skeletons text[]
) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked boolean[];
    v_accounts uuid[];
BEGIN
    -- 1. The key's lock, for the first use of each key in the batch.
    v_locked := bankrail_lock_idempotency_keys(p_items);
    -- 2. The paying accounts of the requests that hold their key, and their ledger rows
    -- locked in id order.
    SELECT array_agg(CASE WHEN v_locked[e.n] THEN coalesce(
               (SELECT ma.id FROM merchant_accounts ma
                WHERE ma.id = i.account_id AND ma.merchant_id = i.merchant_id),
               (SELECT ma.id FROM merchant_accounts ma
                WHERE i.account_id IS NULL AND ma.merchant_id = i.merchant_id
                  AND ma.currency = i.currency
                ORDER BY ma.created_at LIMIT 1)) END ORDER BY e.n)
        INTO v_accounts
        FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
        CROSS JOIN LATERAL jsonb_to_record(e.v)
            AS i (merchant_id uuid, account_id uuid, currency text);
    PERFORM 1 FROM ledger_accounts
        WHERE id IN (SELECT ma.available_ledger_id FROM merchant_accounts ma
                     WHERE ma.id = ANY (v_accounts)
                     UNION ALL
                     SELECT ma.held_ledger_id FROM merchant_accounts ma
                     WHERE ma.id = ANY (v_accounts))
        ORDER BY id FOR NO KEY UPDATE;
    -- 3. Everything else, with a fresh snapshot (taken after the locks).
    RETURN QUERY
    SELECT c.locked, c.stored_fingerprint, c.stored_status, c.stored_body, c.stored_at,
           c.signature_used,
           ma.id, ma.merchant_id, ma.currency::text, ma.available_ledger_id, ma.held_ledger_id,
           ma.balance_threshold, ma.notification_state, av.balance, hd.balance,
           src.id, src.user_id, src.account_holder_name, src.iban, src.sort_code,
           src.account_number, payee.id, payee.currency::text,
           CASE WHEN e.n = 1 THEN lv.version END,
           CASE WHEN e.n = 1 AND lv.version IS DISTINCT FROM p_known_list THEN
               ARRAY(SELECT s.normalised_name FROM screening_list s) END
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
    CROSS JOIN LATERAL jsonb_to_record(e.v)
        AS i (iban text, sort_code text, account_number text, source_id uuid, user_id text)
    JOIN bankrail_claimed_keys(p_items, v_locked) c ON c.n = e.n
    LEFT JOIN screening_list_version lv ON lv.id = 1
    LEFT JOIN merchant_accounts ma ON ma.id = v_accounts[e.n]
    LEFT JOIN ledger_accounts av ON av.id = ma.available_ledger_id
    LEFT JOIN ledger_accounts hd ON hd.id = ma.held_ledger_id
    LEFT JOIN LATERAL (
        SELECT s.id, s.user_id, s.account_holder_name, s.iban, s.sort_code, s.account_number
        FROM payment_sources s
        JOIN payment_source_accounts psa ON psa.payment_source_id = s.id
        WHERE i.source_id IS NOT NULL AND s.id = i.source_id AND s.user_id = i.user_id
          AND psa.merchant_account_id = ma.id) src ON true
    LEFT JOIN LATERAL (
        SELECT p.id, p.currency FROM merchant_accounts p
        WHERE ma.id IS NOT NULL
          AND ((coalesce(i.iban, nullif(src.iban, '')) IS NOT NULL
                AND p.iban = coalesce(i.iban, nullif(src.iban, '')))
               OR (coalesce(i.sort_code, src.sort_code) IS NOT NULL
                   AND p.sort_code = coalesce(i.sort_code, src.sort_code)
                   AND p.account_number = coalesce(i.account_number, src.account_number)))
        LIMIT 1) payee ON true
    ORDER BY e.n;
END
$$;

-- A change of the screening list gives it a new version (the trigger of migration 0032).
CREATE OR REPLACE FUNCTION bankrail_screening_list_changed() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE screening_list_version SET version = gen_random_uuid() WHERE id = 1;
    RETURN NULL;
END
$$;

-- The rows of the decided requests of a batch, nothing else, each group a jsonb array:
--   p_payouts:  one object per accepted payout (the payouts row and its activity row's
--               details), each with its first job: of kind first_job at first_job_at
--               when given (a verified payout's expiry, at its authorisation window's end;
--               its advance job starts once its payee authorises), else of kind p_job_kind,
--               due now; a payout without `stage` starts pending;
--   p_answers:  the answers to store under their keys, replacing an expired one
--               (bankrail_store_idempotent_answers, idempotency.sql);
--   p_holds, p_states, p_events: the holds of the payouts whose funds are held (of the kind
--               the ledger named), the accounts' notification states and the balance
--               notifications (bankrail_write_holds, holds.sql).
CREATE OR REPLACE FUNCTION bankrail_write_payout_acceptances(
    p_payouts jsonb,
    p_job_kind text,
    p_answers jsonb,
    p_holds jsonb,
    p_states jsonb,
    p_events jsonb
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF jsonb_array_length(p_payouts) > 0 THEN
        WITH x AS (
            SELECT * FROM jsonb_to_recordset(p_payouts) AS r (id uuid, api text,
                merchant_id uuid, account_id uuid, transaction_id uuid, amount bigint,
                currency text, beneficiary jsonb, name text, iban text, sort_code text,
                account_number text, reference text, context_code text, metadata jsonb,
                scheme_selection jsonb, sub_merchants jsonb,
                scheme text, destination_account_id uuid, pending_failure text,
                stage text, first_job text, first_job_at timestamptz, details jsonb,
                now timestamptz)),
        p AS (
            INSERT INTO payouts (id, api, merchant_id, merchant_account_id, transaction_id,
                amount_in_minor, currency, beneficiary, beneficiary_name, beneficiary_iban,
                beneficiary_sort_code, beneficiary_account_number, reference, context_code,
                metadata, scheme_selection, sub_merchants, scheme_id, destination_account_id,
                stage, pending_failure, created_at)
            SELECT x.id, x.api, x.merchant_id, x.account_id, x.transaction_id, x.amount,
                x.currency, x.beneficiary, x.name, x.iban, x.sort_code, x.account_number,
                x.reference, x.context_code, NULLIF(x.metadata, 'null'::jsonb),
                NULLIF(x.scheme_selection, 'null'::jsonb),
                NULLIF(x.sub_merchants, 'null'::jsonb), x.scheme,
                x.destination_account_id, coalesce(x.stage, 'pending'), x.pending_failure,
                x.now
            FROM x),
        a AS (
            INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor,
                currency, status, created_at, updated_at, details)
            SELECT x.id, x.account_id, 'payout', x.amount, x.currency, 'pending', x.now,
                x.now, x.details
            FROM x)
        INSERT INTO jobs (kind, payload, run_at)
            SELECT coalesce(x.first_job, p_job_kind), jsonb_build_object('payout_id', x.id::text),
                coalesce(x.first_job_at, x.now)
            FROM x
            WHERE x.first_job IS NOT NULL OR coalesce(x.stage, 'pending') = 'pending';
        PERFORM pg_notify('bankrail_jobs', '');
    END IF;
    PERFORM bankrail_store_idempotent_answers(p_answers);
    PERFORM bankrail_write_holds(p_holds, p_states, p_events);
END
$$;
