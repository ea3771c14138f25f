-- The attempts in flight per destination (merchant and URI), which the delivery claim counts
-- to keep each destination within its share (functions/events.sql,
-- bankrail_claim_webhook_deliveries): only leased pending deliveries, so it stays small.
CREATE INDEX webhook_deliveries_in_flight ON webhook_deliveries (merchant_id, uri)
    WHERE status = 'pending' AND lease_until IS NOT NULL;
