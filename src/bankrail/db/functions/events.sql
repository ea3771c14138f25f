-- The outbox for a batch of events, as events/outbox.py `record_event` writes one: the event
-- with the exact bytes to deliver, and its delivery to the merchant's URI for the family,
-- with its ordering key and place when it has one (NULL for both otherwise); with no URI the
-- delivery is `skipped`, and the delivery workers are woken only when something is to be
-- sent.
CREATE OR REPLACE FUNCTION bankrail_record_events(
    p_ids uuid[],
    p_delivery_ids uuid[],
    p_merchant_ids uuid[],
    p_families text[],
    p_event_types text[],
    p_payloads bytea[],
    p_created_at timestamptz[],
    p_ordering_keys uuid[],
    p_ordering_seqs integer[]
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_pending integer;
BEGIN
    IF cardinality(p_ids) = 0 THEN
        RETURN;
    END IF;
    INSERT INTO events (id, merchant_id, family, event_type, payload, created_at)
        SELECT x.id, x.merchant_id, x.family, x.event_type, x.payload, x.created_at
        FROM unnest(p_ids, p_merchant_ids, p_families, p_event_types, p_payloads, p_created_at)
            AS x (id, merchant_id, family, event_type, payload, created_at);
    WITH d AS (
        INSERT INTO webhook_deliveries (id, event_id, merchant_id, event_type, uri, status,
                next_attempt_at, created_at, updated_at, window_start, ordering_key,
                ordering_seq)
            SELECT x.delivery_id, x.event_id, x.merchant_id, x.event_type, u.uri,
                   CASE WHEN u.uri IS NULL THEN 'skipped' ELSE 'pending' END,
                   CASE WHEN u.uri IS NULL THEN NULL ELSE x.created_at END, x.created_at,
                   x.created_at, x.created_at, x.ordering_key, x.ordering_seq
            FROM unnest(p_delivery_ids, p_ids, p_merchant_ids, p_families, p_event_types,
                        p_created_at, p_ordering_keys, p_ordering_seqs)
                AS x (delivery_id, event_id, merchant_id, family, event_type, created_at,
                      ordering_key, ordering_seq)
            JOIN merchants m ON m.id = x.merchant_id
            CROSS JOIN LATERAL (SELECT CASE WHEN x.family = 'payments'
                THEN m.payments_webhook_uri ELSE m.payouts_webhook_uri END AS uri) u
            RETURNING uri)
    SELECT count(uri) INTO v_pending FROM d;
    IF v_pending > 0 THEN
        PERFORM pg_notify('bankrail_webhooks', '');
    END IF;
END
$$;
