-- The advisory locks of a batch's keys, as the batch reads of payouts/acceptance.py and
-- payments/creation.py take them (p_items: a jsonb array of objects whose lock_key is the
-- key's lock, null for a request without a key), in item order: true when the item holds
-- its key's lock for the transaction (or has no key); false when another transaction holds
-- it, or when the key was used earlier in the batch: either way the key is in flight. A
-- caller reads what the locks guard in a later statement, with a snapshot taken after them.
CREATE OR REPLACE FUNCTION bankrail_lock_idempotency_keys(p_items jsonb)
RETURNS boolean[] LANGUAGE sql AS $$
    SELECT array_agg(x.lock_key IS NULL
                     OR (x.first_use AND pg_try_advisory_xact_lock(x.lock_key)) ORDER BY x.n)
    FROM (SELECT i.lock_key, e.n,
                 row_number() OVER (PARTITION BY i.lock_key ORDER BY e.n) = 1 AS first_use
          FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n),
               jsonb_to_record(e.v) AS i (lock_key bigint)) x
$$;

-- Stores answers under their keys (a later answer under a key replaces an expired one),
-- and remembers the signatures the requests were accepted with until the replay window
-- ends (jobs/pruning.py). p_answers: a jsonb array of objects (security.idempotency
-- `AnswersToStore`): scope, key, fingerprint (hex), status, body (hex), at, and signature,
-- the hex SHA-256 of the request's signature (security.signing.signature_digest), null for
-- an unsigned request.
CREATE OR REPLACE FUNCTION bankrail_store_idempotent_answers(p_answers jsonb)
RETURNS void LANGUAGE sql AS $$
    INSERT INTO idempotency_keys (scope, key, fingerprint, status_code, body, created_at)
    SELECT a.scope, a.key, decode(a.fingerprint, 'hex'), a.status, decode(a.body, 'hex'), a.at
    FROM jsonb_to_recordset(p_answers)
        AS a (scope text, key text, fingerprint text, status integer, body text, at timestamptz)
    ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
        status_code = EXCLUDED.status_code, body = EXCLUDED.body,
        created_at = EXCLUDED.created_at;
    INSERT INTO accepted_signatures (digest, accepted_at)
    SELECT decode(a.signature, 'hex'), a.at
    FROM jsonb_to_recordset(p_answers) AS a (signature text, at timestamptz)
    WHERE a.signature IS NOT NULL
    ON CONFLICT (digest) DO NOTHING
$$;

-- What a claim is decided from (security.idempotency.claim_in_batch), for each item of
-- p_items (a jsonb array of objects: lock_key, scope, key and signature, the hex SHA-256 of
-- the request's accepted signature; all null for a request without a key) given the locks
-- p_locked that bankrail_lock_idempotency_keys took for them: whether it holds its key's
-- lock and, if it does, the answer stored under its key and whether its signature was
-- accepted before. One row per item, n from 1 in item order. Every batch read (this file's
-- bankrail_claim_idempotency_keys and the acceptance reads of payouts, payments and
-- refunds) joins it on n: the one way a key is claimed. A signature is used under one key
-- only (it covers the key), so the key's lock guards its row too.
CREATE OR REPLACE FUNCTION bankrail_claimed_keys(p_items jsonb, p_locked boolean[])
RETURNS TABLE (
    n bigint,
    locked boolean,
    stored_fingerprint bytea,
    stored_status integer,
    stored_body bytea,
    stored_at timestamptz,
    signature_used boolean
) LANGUAGE sql ROWS 64
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
    SELECT e.n, p_locked[e.n], k.fingerprint, k.status_code, k.body, k.created_at,
           s.digest IS NOT NULL
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
    CROSS JOIN LATERAL jsonb_to_record(e.v) AS i (scope text, key text, signature text)
    LEFT JOIN idempotency_keys k ON p_locked[e.n] AND k.scope = i.scope AND k.key = i.key
    LEFT JOIN accepted_signatures s ON p_locked[e.n]
        AND s.digest = decode(i.signature, 'hex')
    ORDER BY e.n
$$;

-- The keys' locks (bankrail_lock_idempotency_keys) and then, with a snapshot taken after
-- them, each item's claim (bankrail_claimed_keys), one row per item of p_items, in item
-- order: what security/idempotent_commit.py decides each request's claim from.
CREATE OR REPLACE FUNCTION bankrail_claim_idempotency_keys(p_items jsonb)
RETURNS TABLE (
    locked boolean,
    stored_fingerprint bytea,
    stored_status integer,
    stored_body bytea,
    stored_at timestamptz,
    signature_used boolean
) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked boolean[];
BEGIN
    v_locked := bankrail_lock_idempotency_keys(p_items);
    RETURN QUERY
    SELECT c.locked, c.stored_fingerprint, c.stored_status, c.stored_body, c.stored_at,
           c.signature_used
    FROM bankrail_claimed_keys(p_items, v_locked) c
    ORDER BY c.n;
END
$$;
