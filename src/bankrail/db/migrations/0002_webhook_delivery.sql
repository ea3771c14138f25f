-- Webhook delivery: the retry window starts at the event, or at the last replay.
ALTER TABLE webhook_deliveries ADD COLUMN window_start timestamptz;
UPDATE webhook_deliveries SET window_start = created_at;
ALTER TABLE webhook_deliveries ALTER COLUMN window_start SET NOT NULL;
CREATE INDEX webhook_deliveries_status ON webhook_deliveries (status, created_at);
