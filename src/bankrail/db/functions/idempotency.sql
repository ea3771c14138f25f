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

-- Stores answers under their keys (a later answer under a key replaces an expired one).
CREATE OR REPLACE FUNCTION bankrail_store_idempotent_answers(
    p_scopes text[],
    p_keys text[],
    p_fingerprints bytea[],
    p_statuses integer[],
    p_bodies bytea[],
    p_at timestamptz[]
) RETURNS void LANGUAGE sql AS $$
    INSERT INTO idempotency_keys (scope, key, fingerprint, status_code, body, created_at)
    SELECT * FROM unnest(p_scopes, p_keys, p_fingerprints, p_statuses, p_bodies, p_at)
    ON CONFLICT (scope, key) DO UPDATE SET fingerprint = EXCLUDED.fingerprint,
        status_code = EXCLUDED.status_code, body = EXCLUDED.body,
        created_at = EXCLUDED.created_at
$$;

-- The keys' locks (bankrail_lock_idempotency_keys) and then, with a snapshot taken after
-- them, the answers stored under the keys that are locked, one row per item of p_items (a
-- jsonb array of objects: lock_key, scope and key, all null for a request without a key), in
-- item order: what security/idempotent_commit.py decides each request's claim from.
CREATE OR REPLACE FUNCTION bankrail_claim_idempotency_keys(p_items jsonb)
RETURNS TABLE (
    locked boolean,
    stored_fingerprint bytea,
    stored_status integer,
    stored_body bytea,
    stored_at timestamptz
) LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_locked boolean[];
BEGIN
    v_locked := bankrail_lock_idempotency_keys(p_items);
    RETURN QUERY
    SELECT v_locked[e.n], k.fingerprint, k.status_code, k.body, k.created_at
    FROM jsonb_array_elements(p_items) WITH ORDINALITY AS e (v, n)
    CROSS JOIN LATERAL jsonb_to_record(e.v) AS i (scope text, key text)
    LEFT JOIN idempotency_keys k ON v_locked[e.n] AND k.scope = i.scope AND k.key = i.key
    ORDER BY e.n;
END
$$;
