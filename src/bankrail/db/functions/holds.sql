-- The holds a batch of acceptances decided (merchants/batch_holds.py `BatchHolds`), as every
-- batch writer of acceptances (payouts, refunds) writes them, in its transaction:
--   holds:  one ledger transaction of kind p_kind per held payment, from and to the ledger
--           accounts `ledger.movements.hold` named, through bankrail_post_movements (the
--           CHECK on ledger_accounts still refuses an overdraft);
--   the new notification states of accounts with a balance threshold, and the
--           `balance_notification` events, delivered in no particular order.
CREATE OR REPLACE FUNCTION bankrail_write_holds(
    p_kind text,
    p_hold_ids uuid[],
    p_hold_references uuid[],
    p_hold_from bigint[],
    p_hold_to bigint[],
    p_hold_amounts bigint[],
    p_hold_at timestamptz[],
    p_state_accounts uuid[],
    p_states text[],
    p_event_ids uuid[],
    p_delivery_ids uuid[],
    p_event_merchants uuid[],
    p_event_families text[],
    p_event_types text[],
    p_event_payloads bytea[],
    p_event_at timestamptz[]
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
BEGIN
    PERFORM bankrail_post_movements(
        p_hold_ids, array_fill(p_kind, ARRAY[cardinality(p_hold_ids)]), p_hold_references,
        p_hold_at, p_hold_from, p_hold_to, NULL, NULL, p_hold_amounts);
    IF cardinality(p_state_accounts) > 0 THEN
        UPDATE merchant_accounts ma SET notification_state = x.state
            FROM unnest(p_state_accounts, p_states) AS x (id, state)
            WHERE ma.id = x.id;
    END IF;
    IF cardinality(p_event_ids) > 0 THEN
        PERFORM bankrail_record_events(p_event_ids, p_delivery_ids, p_event_merchants,
            p_event_families, p_event_types, p_event_payloads, p_event_at,
            array_fill(NULL::uuid, ARRAY[cardinality(p_event_ids)]),
            array_fill(NULL::integer, ARRAY[cardinality(p_event_ids)]));
    END IF;
END
$$;
