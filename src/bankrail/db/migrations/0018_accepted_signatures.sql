-- A signed request takes effect once (docs/api.md, "Idempotency"): the signatures of the
-- requests whose answers were stored are remembered, by their SHA-256
-- (security.signing.signature_digest), for the replay window
-- (BANKRAIL_SIGNATURE_REPLAY_WINDOW_SECONDS, 30 days by default) and then forgotten by the
-- pruning job (jobs/pruning.py). A request whose key's answer is no longer kept but whose
-- signature is remembered is answered 409 and does nothing.
--
-- accepted_at is service time, as idempotency_keys.created_at; the index finds the oldest
-- first and grows at its right-hand edge.
CREATE TABLE accepted_signatures (
    digest      bytea PRIMARY KEY,
    accepted_at timestamptz NOT NULL
);
CREATE INDEX accepted_signatures_accepted_at ON accepted_signatures (accepted_at);

-- v3 Idempotency-Keys are the merchant's, no longer each client's: 'v3:<client id>' becomes
-- 'v3:<merchant id>'. Where two clients of one merchant stored the same key, the newest
-- answer is kept (a retry of the older request then gets it replayed, or 422 if it differs).
DELETE FROM idempotency_keys k
    USING (SELECT k2.scope, k2.key, row_number() OVER (
               PARTITION BY c.merchant_id, k2.key ORDER BY k2.created_at DESC) AS nth
           FROM idempotency_keys k2
           JOIN api_clients c ON k2.scope = 'v3:' || c.client_id) older
    WHERE k.scope = older.scope AND k.key = older.key AND older.nth > 1;
UPDATE idempotency_keys k SET scope = 'v3:' || c.merchant_id
    FROM api_clients c
    WHERE k.scope = 'v3:' || c.client_id;

-- The functions whose arguments or results change with this (db/functions/). The writes
-- that store answers take the signatures to remember as a last argument with a default:
-- with their old argument lists dropped, a call of the release before (which passes none)
-- is a call of the new function, during a rolling upgrade. The claim reads return one more
-- column, signature_used; the release before reads theirs by name.
DROP FUNCTION IF EXISTS bankrail_claim_idempotency_keys(jsonb);
DROP FUNCTION IF EXISTS bankrail_store_idempotent_answers(
    text[], text[], bytea[], integer[], bytea[], timestamptz[]);
DROP FUNCTION IF EXISTS bankrail_read_payout_requests(jsonb);
DROP FUNCTION IF EXISTS bankrail_read_payment_requests(jsonb);
DROP FUNCTION IF EXISTS bankrail_read_mandate_payment_requests(jsonb);
DROP FUNCTION IF EXISTS bankrail_read_refund_requests(jsonb);
DROP FUNCTION IF EXISTS bankrail_write_payment_creations(
    jsonb, text, text[], text[], bytea[], integer[], bytea[], timestamptz[]);
DROP FUNCTION IF EXISTS bankrail_write_payout_acceptances(
    jsonb, text, text[], text[], bytea[], integer[], bytea[], timestamptz[], uuid[], uuid[],
    bigint[], bigint[], bigint[], timestamptz[], uuid[], text[], uuid[], uuid[], uuid[],
    text[], text[], bytea[], timestamptz[]);
DROP FUNCTION IF EXISTS bankrail_write_refund_acceptances(
    jsonb, text, uuid[], bigint[], text[], text[], bytea[], integer[], bytea[], timestamptz[],
    uuid[], uuid[], bigint[], bigint[], bigint[], timestamptz[], uuid[], text[], uuid[],
    uuid[], uuid[], text[], text[], bytea[], timestamptz[]);
