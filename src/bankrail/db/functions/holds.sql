-- The holds a batch of acceptances decided (merchants/batch_holds.py `BatchHolds`), as every
-- batch writer of acceptances (payouts, refunds) writes them, in its transaction; three
-- groups, each a jsonb array of objects:
--   p_holds:  one ledger transaction per held payment (id, kind, reference, source,
--             destination, amount, at): the kind and the ledger accounts are the ones
--             `ledger.movements.hold` decided, posted through bankrail_post_movements (the
--             CHECK on ledger_accounts still refuses an overdraft);
--   p_states: the new notification states of accounts with a balance threshold (account,
--             state);
--   p_events: the `balance_notification` events (id, delivery_id, merchant_id, family,
--             type, payload as hex, at), delivered in no particular order.
CREATE OR REPLACE FUNCTION bankrail_write_holds(p_holds jsonb, p_states jsonb, p_events jsonb)
RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_ids uuid[];
    v_kinds text[];
    v_references uuid[];
    v_at timestamptz[];
    v_from bigint[];
    v_to bigint[];
    v_amounts bigint[];
BEGIN
    IF jsonb_array_length(p_holds) > 0 THEN
        SELECT array_agg(h.id ORDER BY e.n), array_agg(h.kind ORDER BY e.n),
               array_agg(h.reference ORDER BY e.n), array_agg(h.at ORDER BY e.n),
               array_agg(h.source ORDER BY e.n), array_agg(h.destination ORDER BY e.n),
               array_agg(h.amount ORDER BY e.n)
            INTO v_ids, v_kinds, v_references, v_at, v_from, v_to, v_amounts
            FROM jsonb_array_elements(p_holds) WITH ORDINALITY AS e (v, n)
            CROSS JOIN LATERAL jsonb_to_record(e.v) AS h (id uuid, kind text, reference uuid,
                source bigint, destination bigint, amount bigint, at timestamptz);
        PERFORM bankrail_post_movements(
            v_ids, v_kinds, v_references, v_at, v_from, v_to, NULL, NULL, v_amounts);
    END IF;
    IF jsonb_array_length(p_states) > 0 THEN
        UPDATE merchant_accounts ma SET notification_state = x.state
            FROM jsonb_to_recordset(p_states) AS x (account uuid, state text)
            WHERE ma.id = x.account;
    END IF;
    IF jsonb_array_length(p_events) > 0 THEN
        PERFORM bankrail_record_events(
            array_agg(x.id ORDER BY e.n), array_agg(x.delivery_id ORDER BY e.n),
            array_agg(x.merchant_id ORDER BY e.n), array_agg(x.family ORDER BY e.n),
            array_agg(x.type ORDER BY e.n), array_agg(decode(x.payload, 'hex') ORDER BY e.n),
            array_agg(x.at ORDER BY e.n), array_agg(NULL::uuid), array_agg(NULL::integer))
        FROM jsonb_array_elements(p_events) WITH ORDINALITY AS e (v, n)
        CROSS JOIN LATERAL jsonb_to_record(e.v) AS x (id uuid, delivery_id uuid,
            merchant_id uuid, family text, type text, payload text, at timestamptz);
    END IF;
END
$$;
