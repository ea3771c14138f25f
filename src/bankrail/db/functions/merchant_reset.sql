-- A sandbox merchant started clean (`POST /sandbox/merchants/{id}/reset`), and a merchant
-- removed (`DELETE /admin/merchants/{id}`): merchants/closing.py calls these in one
-- transaction with the ledger movements that bring its balances to zero.

-- Every object the merchant made through the API, and what hangs on it, removed: payments,
-- payouts, refunds, mandates, payment sources, top-ups, transaction rows, events, webhook
-- deliveries and their attempts, the jobs that would advance them, the stored answers of its
-- idempotency keys, and its request log. Its merchant accounts, clients, signing keys and
-- console users stay; the ledger keeps its history (the caller zeroes the balances with
-- movements).
-- The tables are locked against writes (reads go on) for the few milliseconds this takes, so
-- that no job or request adds a row for an object being removed; this runs in sandbox mode,
-- or in production only for a merchant without ledger history.
-- Returns how many objects of each kind went.
CREATE OR REPLACE FUNCTION bankrail_purge_merchant_objects(p_merchant_id uuid)
RETURNS jsonb LANGUAGE plpgsql AS $$
DECLARE
    v_accounts uuid[];
    v_payments text[];
    v_payouts text[];
    v_refunds text[];
    v_mandates text[];
    v_events uuid[];
BEGIN
    LOCK TABLE jobs, events, webhook_deliveries, webhook_attempts, refunds, payments,
        mandates, payouts, payment_source_accounts, payment_sources, topups, account_activity,
        idempotency_keys IN EXCLUSIVE MODE;
    v_accounts := ARRAY(SELECT id FROM merchant_accounts WHERE merchant_id = p_merchant_id);
    v_payments := ARRAY(SELECT id::text FROM payments WHERE merchant_id = p_merchant_id);
    v_payouts := ARRAY(SELECT id::text FROM payouts WHERE merchant_id = p_merchant_id);
    v_refunds := ARRAY(SELECT id::text FROM refunds WHERE merchant_id = p_merchant_id);
    v_mandates := ARRAY(SELECT id::text FROM mandates WHERE merchant_id = p_merchant_id);
    v_events := ARRAY(SELECT id FROM events WHERE merchant_id = p_merchant_id);

    DELETE FROM jobs WHERE payload ->> 'payment_id' = ANY (v_payments)
        OR payload ->> 'payout_id' = ANY (v_payouts)
        OR payload ->> 'refund_id' = ANY (v_refunds)
        OR payload ->> 'mandate_id' = ANY (v_mandates);
    DELETE FROM webhook_attempts WHERE delivery_id IN
        (SELECT id FROM webhook_deliveries WHERE merchant_id = p_merchant_id);
    DELETE FROM webhook_deliveries WHERE merchant_id = p_merchant_id;
    DELETE FROM events WHERE id = ANY (v_events);
    DELETE FROM refunds WHERE id::text = ANY (v_refunds);
    DELETE FROM payments WHERE id::text = ANY (v_payments);
    DELETE FROM mandates WHERE id::text = ANY (v_mandates);
    DELETE FROM payouts WHERE id::text = ANY (v_payouts);
    DELETE FROM payment_source_accounts WHERE merchant_account_id = ANY (v_accounts);
    DELETE FROM payment_sources WHERE merchant_id = p_merchant_id;
    DELETE FROM topups WHERE merchant_account_id = ANY (v_accounts);
    DELETE FROM account_activity WHERE merchant_account_id = ANY (v_accounts);
    DELETE FROM idempotency_keys WHERE scope LIKE '%:' || p_merchant_id::text;
    DELETE FROM request_log WHERE merchant_id = p_merchant_id;
    RETURN jsonb_build_object(
        'payments', cardinality(v_payments), 'payouts', cardinality(v_payouts),
        'refunds', cardinality(v_refunds), 'mandates', cardinality(v_mandates),
        'events', cardinality(v_events));
END
$$;

-- The merchant itself removed, after bankrail_purge_merchant_objects and with zero balances:
-- webhook listeners (a reset keeps them: a `bankrail listen` attached stays attached; their
-- deliveries went with the merchant's others), console users, clients, signing keys, merchant
-- accounts and the merchant row. Another
-- merchant's payout to one of its accounts keeps its beneficiary as sent but no longer names
-- the account. The ledger accounts stay, with their (balanced) history.
CREATE OR REPLACE FUNCTION bankrail_delete_merchant(p_merchant_id uuid)
RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    UPDATE payouts SET destination_account_id = NULL
        WHERE destination_account_id IN
            (SELECT id FROM merchant_accounts WHERE merchant_id = p_merchant_id);
    DELETE FROM webhook_listeners WHERE merchant_id = p_merchant_id;
    DELETE FROM console_users WHERE merchant_id = p_merchant_id;
    DELETE FROM api_clients WHERE merchant_id = p_merchant_id;
    DELETE FROM signing_keys WHERE merchant_id = p_merchant_id;
    DELETE FROM merchant_accounts WHERE merchant_id = p_merchant_id;
    DELETE FROM merchants WHERE id = p_merchant_id;
END
$$;
