-- What the delivery claim reads to keep each destination (a merchant's URI: the merchant and
-- the URI) within its share of attempts in flight (functions/events.sql,
-- bankrail_claim_webhook_deliveries). Both cover pending deliveries alone, so they stay small.
--
-- The pending deliveries by destination, due first: the claim skips through it from one
-- destination to the next, and reads each only as far as the destination's free share.
CREATE INDEX webhook_deliveries_by_destination
    ON webhook_deliveries (merchant_id, uri, next_attempt_at) WHERE status = 'pending';
-- The attempts in flight: leased pending deliveries (a lease is cleared when its attempt is
-- recorded).
CREATE INDEX webhook_deliveries_in_flight ON webhook_deliveries (merchant_id, uri)
    WHERE status = 'pending' AND lease_until IS NOT NULL;
