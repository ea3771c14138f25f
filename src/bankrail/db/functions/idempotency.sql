-- An Idempotency-Key's claim, as security/idempotency.py `run_idempotent` takes it: the
-- transaction-scoped advisory lock that marks (scope, key) in flight, then, when it was
-- taken, the answer stored under the key, if any. One call: the lookup runs after the lock in
-- a statement of its own, so it sees an answer that a transaction holding the lock before
-- committed (a single SELECT would read with a snapshot taken before the lock).
CREATE OR REPLACE FUNCTION bankrail_claim_idempotency_key(
    p_lock bigint, p_scope text, p_key text
) RETURNS TABLE (
    locked boolean, fingerprint bytea, status_code integer, body bytea, created_at timestamptz
) LANGUAGE plpgsql AS $$
BEGIN
    IF NOT pg_try_advisory_xact_lock(p_lock) THEN
        RETURN QUERY SELECT false, NULL::bytea, NULL::integer, NULL::bytea, NULL::timestamptz;
        RETURN;
    END IF;
    RETURN QUERY
    SELECT true, k.fingerprint, k.status_code, k.body, k.created_at
    FROM (SELECT 1) AS one
    LEFT JOIN idempotency_keys k ON k.scope = p_scope AND k.key = p_key;
END
$$;
