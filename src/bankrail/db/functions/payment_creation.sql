-- The creation of payments a payer authorises (payments/creation.py `create_payments`), for a
-- batch of requests at a time (one request is a batch of one): one statement reads what the
-- rules need, Python decides every request (`plan_payment`), and one statement writes what
-- was decided. Both run in one transaction, committed once for the batch. Neither decides a
-- business rule.

-- What the rules need for each request of p_items (a jsonb array of objects: lock_key,
-- scope, key and signature, all null for a request without an Idempotency-Key, merchant_id
-- and account_id),
-- one row per item in item order:
--   locked: the key's advisory lock, taken for the transaction (false when another
--     transaction holds it, or for a key's second use in the batch: the key is in flight;
--     true for a request without a key);
--   the answer stored under the key and whether the signature was accepted before
--     (bankrail_claimed_keys, idempotency.sql), read after the lock (a key committed by
--     whoever held it before is seen);
--   the receiving account, if it is the merchant's.
CREATE OR REPLACE FUNCTION bankrail_read_payment_requests(p_items jsonb)
RETURNS TABLE (
    locked boolean,
    stored_fingerprint bytea,
    stored_status integer,
    stored_body bytea,
    stored_at timestamptz,
    signature_used boolean,
    account_id uuid,
    account_currency text
) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked boolean[];
BEGIN
    -- 1. The key's lock, for the first use of each key in the batch.
    v_locked := bankrail_lock_idempotency_keys(p_items);
    -- 2. Everything else, with a fresh snapshot (taken after the locks).
    RETURN QUERY
    SELECT c.locked, c.stored_fingerprint, c.stored_status, c.stored_body, c.stored_at,
           c.signature_used,
           ma.id, ma.currency::text
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
    CROSS JOIN LATERAL jsonb_to_record(e.v)
        AS i (merchant_id uuid, account_id uuid)
    JOIN bankrail_claimed_keys(p_items, v_locked) c ON c.n = e.n
    LEFT JOIN merchant_accounts ma ON ma.id = i.account_id AND ma.merchant_id = i.merchant_id
    ORDER BY e.n;
END
$$;

-- Writes a batch's decisions: the payments (p_payments, a jsonb array of rows), each with its
-- first job, and the answers under the requests' keys (p_answers, a jsonb array:
-- bankrail_store_idempotent_answers, idempotency.sql). A payment awaiting its payer has an
-- expiry job of kind p_job_kind at its expires_at; a payment on a mandate
-- (payments/mandate_creation.py) is authorised already (authorized_at, mandate_id,
-- mandate_reference, and the pending_failure decided at acceptance) and names its own job
-- (job_kind, due at its creation). `sent` is the request's echo, `return_uri` and
-- `next_action` and `flow` those of a journey started at creation (payments/creation.py).
CREATE OR REPLACE FUNCTION bankrail_write_payment_creations(
    p_payments jsonb,
    p_job_kind text,
    p_answers jsonb
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    IF jsonb_array_length(p_payments) > 0 THEN
        WITH x AS (
            SELECT * FROM jsonb_to_recordset(p_payments) AS r (id uuid, merchant_id uuid,
                account_id uuid, amount bigint, currency text, user_id text,
                user_details jsonb, selection_type text, selection_filter jsonb,
                provider_id text, scheme_id text, metadata jsonb, status text,
                created_at timestamptz, history jsonb, expires_at timestamptz,
                authorized_at timestamptz, mandate_id uuid, mandate_reference text,
                pending_failure text, job_kind text, sent jsonb, return_uri text,
                next_action jsonb, flow jsonb)),
        p AS (
            INSERT INTO payments (id, merchant_id, merchant_account_id, amount_in_minor,
                currency, user_id, user_details, selection_type, selection_filter,
                provider_id, scheme_id, metadata, status, created_at, history, authorized_at,
                mandate_id, mandate_reference, pending_failure, sent, return_uri, next_action,
                flow)
            SELECT x.id, x.merchant_id, x.account_id, x.amount, x.currency, x.user_id,
                x.user_details, x.selection_type, NULLIF(x.selection_filter, 'null'::jsonb),
                x.provider_id, x.scheme_id, NULLIF(x.metadata, 'null'::jsonb), x.status,
                x.created_at, x.history, x.authorized_at, x.mandate_id, x.mandate_reference,
                x.pending_failure, NULLIF(x.sent, 'null'::jsonb), x.return_uri,
                NULLIF(x.next_action, 'null'::jsonb), coalesce(NULLIF(x.flow, 'null'::jsonb), '{}')
            FROM x)
        INSERT INTO jobs (kind, payload, run_at)
            SELECT coalesce(x.job_kind, p_job_kind), jsonb_build_object('payment_id', x.id::text),
                CASE WHEN x.job_kind IS NULL THEN x.expires_at ELSE x.created_at END
            FROM x;
        PERFORM pg_notify('bankrail_jobs', '');
    END IF;
    PERFORM bankrail_store_idempotent_answers(p_answers);
END
$$;

-- What the rules of payments on mandates need for each request of p_items (a jsonb array of
-- objects: lock_key, scope, key and signature, all null for a request without a key,
-- merchant_id and mandate_id), one row per item in item order: the key's lock and stored
-- answer (as bankrail_read_payment_requests), and the mandate's id if it is the merchant's,
-- its row locked FOR UPDATE in id order until the commit: every payment on a mandate waits
-- for the previous one's commit, in every process, and counts what it took. The caller reads
-- the mandates' rows and what their current periods have taken in later statements.
CREATE OR REPLACE FUNCTION bankrail_read_mandate_payment_requests(p_items jsonb)
RETURNS TABLE (
    locked boolean,
    stored_fingerprint bytea,
    stored_status integer,
    stored_body bytea,
    stored_at timestamptz,
    signature_used boolean,
    mandate_id uuid
) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked boolean[];
BEGIN
    v_locked := bankrail_lock_idempotency_keys(p_items);
    PERFORM 1 FROM mandates m
        WHERE m.id IN (SELECT i.mandate_id
                       FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
                       CROSS JOIN LATERAL jsonb_to_record(e.v) AS i (mandate_id uuid)
                       WHERE v_locked[e.n])
        ORDER BY m.id FOR UPDATE;
    RETURN QUERY
    SELECT c.locked, c.stored_fingerprint, c.stored_status, c.stored_body, c.stored_at,
           c.signature_used, m.id
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
    CROSS JOIN LATERAL jsonb_to_record(e.v)
        AS i (merchant_id uuid, mandate_id uuid)
    JOIN bankrail_claimed_keys(p_items, v_locked) c ON c.n = e.n
    LEFT JOIN mandates m ON v_locked[e.n] AND m.id = i.mandate_id
        AND m.merchant_id = i.merchant_id
    ORDER BY e.n;
END
$$;
