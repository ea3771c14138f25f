-- The outbox for a batch of events, as events/outbox.py `record_event` writes one: the event
-- with the exact bytes to deliver, and its delivery to the merchant's URI for the family,
-- with its ordering key and place when it has one (NULL for both otherwise); with no URI the
-- delivery is `skipped`, and the delivery workers are woken only when something is to be
-- sent. Each attached webhook listener of the merchant gets a delivery of its own.
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
    -- One more delivery per attached listener of the merchant whose filter takes the event
    -- (migration 0030): signed, when sent, for the registered URI's path (the listener's
    -- forward path with none). Its ordering key is the event's own made the listener's, so
    -- that the listener's deliveries keep their order among themselves and never hold back
    -- the URI's. A listener is attached while seen within 24 hours (events/listeners.py,
    -- DETACHED_AFTER); its stream polls, so no notification. Most merchants have none: one
    -- probe of webhook_listeners_merchant per merchant says so.
    IF EXISTS (SELECT 1 FROM webhook_listeners l WHERE l.merchant_id = ANY (p_merchant_ids))
    THEN
        INSERT INTO webhook_deliveries (id, event_id, merchant_id, event_type, uri, status,
                next_attempt_at, created_at, updated_at, window_start, ordering_key,
                ordering_seq, listener_id)
            SELECT gen_random_uuid(), x.event_id, x.merchant_id, x.event_type,
                   CASE WHEN x.family = 'payments' THEN m.payments_webhook_uri
                        ELSE m.payouts_webhook_uri END,
                   'pending', x.created_at, x.created_at, x.created_at, x.created_at,
                   md5(x.ordering_key::text || l.id::text)::uuid, x.ordering_seq, l.id
            FROM unnest(p_ids, p_merchant_ids, p_families, p_event_types, p_created_at,
                        p_ordering_keys, p_ordering_seqs)
                AS x (event_id, merchant_id, family, event_type, created_at, ordering_key,
                      ordering_seq)
            JOIN webhook_listeners l ON l.merchant_id = x.merchant_id
                AND l.last_seen_at > x.created_at - interval '24 hours'
                AND (l.event_types IS NULL OR x.event_type = ANY (l.event_types))
            JOIN merchants m ON m.id = x.merchant_id;
    END IF;
END
$$;

-- The claim of events/delivery.py (deliveries to URIs; a listener's stream claims its own,
-- events/listeners.py): leases (until clock_timestamp() + p_lease) and returns the
-- due pending deliveries a worker may send now, at most p_limit, so that no destination (a
-- merchant's URI: the merchant and the URI) has more than p_per_destination attempts in
-- flight on all workers together. An attempt is in flight while its lease is live; claims are
-- serialised by a transaction-scoped advisory lock (two-integer key space, apart from the
-- bigint keys of idempotency), so each one counts the leases of the claims before it.
-- Fairness: a free slot goes first to the destination with the fewest attempts in flight
-- (its place is its attempts in flight plus the rank of the delivery among its due ones),
-- then to the delivery due longest. A delivery whose ordering key has a pending delivery
-- with a lower place is not due (outbox.py), and takes no place.
--
-- The cost follows the number of destinations with pending deliveries, not their backlogs:
-- the destinations are found by skipping through webhook_deliveries_by_destination one
-- destination at a time, and each is read only as far as its free share (a hanging
-- receiver's thousands of due deliveries are not sorted on every claim).
CREATE OR REPLACE FUNCTION bankrail_claim_webhook_deliveries(
    p_now timestamptz,
    p_limit integer,
    p_per_destination integer,
    p_lease interval
) RETURNS TABLE (id uuid, uri text, payload bytea, attempt_count integer,
                 window_start timestamptz, lease_until timestamptz)
LANGUAGE plpgsql
SET plan_cache_mode = force_generic_plan  -- planning the claim costs more than running it
AS $$
#variable_conflict use_column
BEGIN
    PERFORM pg_advisory_xact_lock(1650552427, 1752133483);  -- 'bank', 'hook'
    RETURN QUERY
    WITH RECURSIVE destinations AS (
        (SELECT w.merchant_id, w.uri FROM webhook_deliveries w
         WHERE w.status = 'pending' AND w.listener_id IS NULL
         ORDER BY w.merchant_id, w.uri LIMIT 1)
        UNION ALL
        SELECT n.merchant_id, n.uri FROM destinations t CROSS JOIN LATERAL (
            SELECT w.merchant_id, w.uri FROM webhook_deliveries w
            WHERE w.status = 'pending' AND w.listener_id IS NULL
              AND (w.merchant_id, w.uri) > (t.merchant_id, t.uri)
            ORDER BY w.merchant_id, w.uri LIMIT 1) n),
    candidates AS (
        SELECT c.id, c.next_attempt_at, busy.n + c.rank AS place
        FROM destinations t
        CROSS JOIN LATERAL (
            SELECT count(*) AS n FROM webhook_deliveries b
            WHERE b.merchant_id = t.merchant_id AND b.uri = t.uri AND b.status = 'pending'
              AND b.listener_id IS NULL AND b.lease_until >= clock_timestamp()) busy
        CROSS JOIN LATERAL (
            SELECT f.id, f.next_attempt_at,
                   row_number() OVER (ORDER BY f.next_attempt_at) AS rank
            FROM (SELECT d.id, d.next_attempt_at FROM webhook_deliveries d
                  WHERE d.merchant_id = t.merchant_id AND d.uri = t.uri
                    AND d.status = 'pending' AND d.listener_id IS NULL
                    AND d.next_attempt_at <= p_now
                    AND (d.lease_until IS NULL OR d.lease_until < clock_timestamp())
                    AND (d.ordering_key IS NULL OR NOT EXISTS (
                        SELECT 1 FROM webhook_deliveries p
                        WHERE p.ordering_key = d.ordering_key
                          AND p.ordering_seq < d.ordering_seq AND p.status = 'pending'))
                  ORDER BY d.next_attempt_at
                  LIMIT greatest(p_per_destination - busy.n, 0)) f) c),
    chosen AS (
        SELECT candidates.id FROM candidates
        ORDER BY candidates.place, candidates.next_attempt_at LIMIT p_limit),
    locked AS (
        SELECT d.id FROM webhook_deliveries d
        WHERE d.id IN (SELECT chosen.id FROM chosen) AND d.status = 'pending'
          AND (d.lease_until IS NULL OR d.lease_until < clock_timestamp())
        FOR UPDATE OF d SKIP LOCKED)
    UPDATE webhook_deliveries d SET lease_until = clock_timestamp() + p_lease
    FROM locked, events e WHERE d.id = locked.id AND e.id = d.event_id
    RETURNING d.id, d.uri, e.payload, d.attempt_count, d.window_start, d.lease_until;
END
$$;
