-- Webhook listeners (`bankrail listen`, docs/webhooks.md "Listeners"): a stream a merchant's
-- CLI opens to the server is one more destination of the delivery core. While a listener is
-- attached (seen within the last 24 hours of service time), each event the merchant's
-- filter takes gets one more delivery, for the listener, beside the one to the registered
-- URI; each is tracked and retried on its own. A listener is the merchant's: its id is
-- chosen by the CLI and kept across reconnects, so its pending deliveries wait for it.
CREATE TABLE webhook_listeners (
    id           uuid PRIMARY KEY,
    merchant_id  uuid NOT NULL REFERENCES merchants (id),
    event_types  text[],  -- NULL: every event
    forward_path text NOT NULL,  -- the local URL's path: what is signed with no URI registered
    created_at   timestamptz NOT NULL,
    last_seen_at timestamptz NOT NULL
);
CREATE INDEX webhook_listeners_merchant ON webhook_listeners (merchant_id, last_seen_at);

ALTER TABLE webhook_deliveries ADD COLUMN listener_id uuid REFERENCES webhook_listeners (id);

-- The HTTP delivery workers' claim (functions/events.sql) reads only deliveries to a URI: its
-- indexes of migration 0021 leave the listeners' deliveries out, which a stream claims itself.
DROP INDEX webhook_deliveries_by_destination;
CREATE INDEX webhook_deliveries_by_destination
    ON webhook_deliveries (merchant_id, uri, next_attempt_at)
    WHERE status = 'pending' AND listener_id IS NULL;
DROP INDEX webhook_deliveries_in_flight;
CREATE INDEX webhook_deliveries_in_flight ON webhook_deliveries (merchant_id, uri)
    WHERE status = 'pending' AND lease_until IS NOT NULL AND listener_id IS NULL;
-- A listener's stream claims its own due deliveries, due first.
CREATE INDEX webhook_deliveries_by_listener ON webhook_deliveries (listener_id, next_attempt_at)
    WHERE status = 'pending' AND listener_id IS NOT NULL;
