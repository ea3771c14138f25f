-- Stored idempotency answers are deleted once their validity has ended (security/pruning.py).
--
-- Only the keys whose validity is the configured one (BANKRAIL_IDEMPOTENCY_TTL_SECONDS, six
-- hours by default) expire: those of v3 requests (scope 'v3:<client id>'), of the sandbox's
-- bank transfers and of the console's. A v1 payout's transaction_id and a legacy deposit's
-- deposit_id are keys for good, and their rows are never deleted.
--
-- The index covers the expiring keys alone, oldest first, so that a batch of the oldest is
-- found without reading the keys that never expire; it grows at its right-hand edge, as
-- keys are stored in time order. The predicate is the one security.idempotency.EXPIRING_SCOPES
-- names, character for character: the planner uses a partial index only for a query whose
-- WHERE clause implies it.
CREATE INDEX idempotency_keys_expiring ON idempotency_keys (created_at)
    WHERE (scope LIKE 'v3:%' OR scope LIKE 'sandbox:%' OR scope LIKE 'console:%');
