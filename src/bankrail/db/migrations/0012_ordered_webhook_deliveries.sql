-- The v1 events of one payout are delivered in their order (Authorised, Submitted, then
-- Settled, Failed or Rejected), each once the one before it is no longer pending.
--
-- A delivery may carry an ordering key (the payout's id) and its place in the key's sequence
-- (1, 2, 3...). The delivery workers' claim skips a delivery while a delivery of the same key
-- with a lower place is pending (being tried, or waiting for its next retry); once that one
-- is delivered or discarded, the next is due at once. Deliveries without a key (every other
-- event) are claimed as before, and one key's wait holds back no other delivery.
-- Deliveries made before this migration have no key.
ALTER TABLE webhook_deliveries
    ADD COLUMN ordering_key uuid,
    ADD COLUMN ordering_seq integer,
    ADD CONSTRAINT webhook_deliveries_ordering_pair
        CHECK ((ordering_key IS NULL) = (ordering_seq IS NULL));
-- The claim's look-up of a pending predecessor; only pending deliveries, so it stays small.
CREATE INDEX webhook_deliveries_pending_ordering ON webhook_deliveries (ordering_key, ordering_seq)
    WHERE status = 'pending' AND ordering_key IS NOT NULL;

-- The payout batches (migrations 0006, 0008) write the ordering of their events' deliveries:
-- the same functions with two more arrays after p_event_payloads, as record_event writes it.
DROP FUNCTION bankrail_advance_leased_payouts(text[], timestamptz, bigint[], uuid[], uuid[],
    bigint[], text[], text[], timestamptz[], timestamptz[], timestamptz[], timestamptz[],
    text[], text[], jsonb[], uuid[], uuid[], uuid[], text[], text[], bytea[], uuid[],
    timestamptz[], text, uuid[], text[], uuid[], bigint[], bigint[], text[], text[], bigint[]);
DROP FUNCTION bankrail_advance_payouts(timestamptz, bigint[], uuid[], uuid[], bigint[], text[],
    text[], timestamptz[], timestamptz[], timestamptz[], timestamptz[], text[], text[], jsonb[],
    uuid[], uuid[], uuid[], text[], text[], bytea[], uuid[], timestamptz[], text, uuid[],
    text[], uuid[], bigint[], bigint[], text[], text[], bigint[]);

CREATE FUNCTION bankrail_advance_payouts(
    p_now timestamptz,
    p_job_ids bigint[],
    p_payout_ids uuid[],
    p_account_ids uuid[],
    p_amounts bigint[],
    p_currencies text[],
    p_stages text[],
    p_authorized_at timestamptz[],
    p_submitted_at timestamptz[],
    p_executed_at timestamptz[],
    p_failed_at timestamptz[],
    p_failure_reasons text[],
    p_statuses text[],
    p_details jsonb[],
    p_event_ids uuid[],
    p_delivery_ids uuid[],
    p_event_merchants uuid[],
    p_event_families text[],
    p_event_types text[],
    p_event_payloads bytea[],
    p_event_ordering_keys uuid[],
    p_event_ordering_seqs integer[],
    p_next_payouts uuid[],
    p_next_at timestamptz[],
    p_job_kind text,
    p_move_ids uuid[],
    p_move_kinds text[],
    p_move_payouts uuid[],
    p_move_from bigint[],
    p_move_to bigint[],
    p_move_to_codes text[],
    p_move_currencies text[],
    p_move_amounts bigint[]
) RETURNS void LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_to bigint[];
    v_pending integer;
BEGIN
    DELETE FROM jobs WHERE id = ANY (p_job_ids);
    UPDATE payouts p SET stage = x.stage, authorized_at = x.authorized_at,
            submitted_at = x.submitted_at, executed_at = x.executed_at,
            failed_at = x.failed_at, failure_reason = x.failure_reason
        FROM unnest(p_payout_ids, p_stages, p_authorized_at, p_submitted_at, p_executed_at,
                    p_failed_at, p_failure_reasons)
            AS x (id, stage, authorized_at, submitted_at, executed_at, failed_at,
                  failure_reason)
        WHERE p.id = x.id;
    INSERT INTO account_activity (id, merchant_account_id, type, amount_in_minor, currency,
            status, created_at, updated_at, details)
        SELECT x.id, x.account_id, 'payout', x.amount, x.currency, x.status, p_now, p_now,
               x.details
        FROM unnest(p_payout_ids, p_account_ids, p_amounts, p_currencies, p_statuses,
                    p_details) AS x (id, account_id, amount, currency, status, details)
        ON CONFLICT (merchant_account_id, id) DO UPDATE SET status = EXCLUDED.status,
            updated_at = EXCLUDED.updated_at,
            details = account_activity.details || EXCLUDED.details;

    -- The outbox, as record_event writes it: with no URI for the family the delivery is
    -- `skipped`, and the delivery workers are woken only when something is to be sent.
    INSERT INTO events (id, merchant_id, family, event_type, payload, created_at)
        SELECT x.id, x.merchant_id, x.family, x.event_type, x.payload, p_now
        FROM unnest(p_event_ids, p_event_merchants, p_event_families, p_event_types,
                    p_event_payloads) AS x (id, merchant_id, family, event_type, payload);
    WITH d AS (
        INSERT INTO webhook_deliveries (id, event_id, merchant_id, event_type, uri, status,
                next_attempt_at, created_at, updated_at, window_start, ordering_key,
                ordering_seq)
            SELECT x.delivery_id, x.event_id, x.merchant_id, x.event_type, u.uri,
                   CASE WHEN u.uri IS NULL THEN 'skipped' ELSE 'pending' END,
                   CASE WHEN u.uri IS NULL THEN NULL ELSE p_now END, p_now, p_now, p_now,
                   x.ordering_key, x.ordering_seq
            FROM unnest(p_delivery_ids, p_event_ids, p_event_merchants, p_event_families,
                        p_event_types, p_event_ordering_keys, p_event_ordering_seqs)
                AS x (delivery_id, event_id, merchant_id, family, event_type, ordering_key,
                      ordering_seq)
            JOIN merchants m ON m.id = x.merchant_id
            CROSS JOIN LATERAL (SELECT CASE WHEN x.family = 'payments'
                THEN m.payments_webhook_uri ELSE m.payouts_webhook_uri END AS uri) u
            RETURNING uri)
    SELECT count(uri) INTO v_pending FROM d;
    IF v_pending > 0 THEN
        PERFORM pg_notify('bankrail_webhooks', '');
    END IF;

    IF cardinality(p_next_payouts) > 0 THEN
        INSERT INTO jobs (kind, payload, run_at)
            SELECT p_job_kind, jsonb_build_object('payout_id', x.id::text), x.run_at
            FROM unnest(p_next_payouts, p_next_at) AS x (id, run_at);
        PERFORM pg_notify('bankrail_jobs', '');
    END IF;

    IF cardinality(p_move_ids) > 0 THEN
        -- Clearing accounts are created on first use, as ensure_account does (without
        -- spending a sequence value on the ones that exist).
        INSERT INTO ledger_accounts (code, currency, allow_negative)
            SELECT DISTINCT x.code, x.currency, true
            FROM unnest(p_move_to_codes, p_move_currencies) AS x (code, currency)
            WHERE x.code IS NOT NULL
              AND NOT EXISTS (SELECT 1 FROM ledger_accounts a WHERE a.code = x.code)
            ORDER BY 1
            ON CONFLICT (code) DO NOTHING;
        SELECT array_agg(coalesce(x.to_id, a.id) ORDER BY x.n) INTO v_to
            FROM unnest(p_move_to, p_move_to_codes) WITH ORDINALITY AS x (to_id, code, n)
            LEFT JOIN ledger_accounts a ON a.code = x.code;
        -- Every ledger row the batch touches, locked in id order (no deadlock with another
        -- batch or posting), and only now: they stay locked until the commit. The postings
        -- follow the lock, so that their foreign keys' key-share locks are taken by the
        -- transaction that already holds the row (others' would make PostgreSQL build a
        -- multixact on the hottest rows for every batch).
        PERFORM 1 FROM ledger_accounts WHERE id = ANY (p_move_from || v_to)
            ORDER BY id FOR NO KEY UPDATE;
        -- The CHECK on ledger_accounts refuses a held balance that would go negative, and
        -- bigint refuses one that would leave the 64-bit range: either fails the batch.
        UPDATE ledger_accounts a SET balance = a.balance + agg.amount
            FROM (SELECT s.account_id, sum(s.amount) AS amount
                  FROM (SELECT f.account_id, -f.amount AS amount
                        FROM unnest(p_move_from, p_move_amounts) AS f (account_id, amount)
                        UNION ALL
                        SELECT t.account_id, t.amount
                        FROM unnest(v_to, p_move_amounts) AS t (account_id, amount)) s
                  GROUP BY s.account_id) agg
            WHERE a.id = agg.account_id;
        INSERT INTO ledger_transactions (id, kind, reference_id, created_at)
            SELECT x.id, x.kind, x.payout_id, p_now
            FROM unnest(p_move_ids, p_move_kinds, p_move_payouts) AS x (id, kind, payout_id);
        INSERT INTO ledger_postings (transaction_id, account_id, amount, created_at)
            SELECT x.id, x.account_id, x.amount, p_now
            FROM (SELECT f.id, f.account_id, -f.amount AS amount
                  FROM unnest(p_move_ids, p_move_from, p_move_amounts)
                      AS f (id, account_id, amount)
                  UNION ALL
                  SELECT t.id, t.account_id, t.amount
                  FROM unnest(p_move_ids, v_to, p_move_amounts)
                      AS t (id, account_id, amount)) x;
    END IF;
END
$$;

CREATE FUNCTION bankrail_advance_leased_payouts(
    p_from_stages text[],
    p_now timestamptz,
    p_job_ids bigint[],
    p_payout_ids uuid[],
    p_account_ids uuid[],
    p_amounts bigint[],
    p_currencies text[],
    p_stages text[],
    p_authorized_at timestamptz[],
    p_submitted_at timestamptz[],
    p_executed_at timestamptz[],
    p_failed_at timestamptz[],
    p_failure_reasons text[],
    p_statuses text[],
    p_details jsonb[],
    p_event_ids uuid[],
    p_delivery_ids uuid[],
    p_event_merchants uuid[],
    p_event_families text[],
    p_event_types text[],
    p_event_payloads bytea[],
    p_event_ordering_keys uuid[],
    p_event_ordering_seqs integer[],
    p_next_payouts uuid[],
    p_next_at timestamptz[],
    p_job_kind text,
    p_move_ids uuid[],
    p_move_kinds text[],
    p_move_payouts uuid[],
    p_move_from bigint[],
    p_move_to bigint[],
    p_move_to_codes text[],
    p_move_currencies text[],
    p_move_amounts bigint[]
) RETURNS boolean LANGUAGE plpgsql
SET enable_seqscan = off SET enable_hashjoin = off SET enable_mergejoin = off
SET plan_cache_mode = force_generic_plan
AS $$
DECLARE
    v_holds boolean;
BEGIN
    -- Locked in the order every other path locks them: jobs, payouts, accounts, ledger rows.
    SELECT count(*) = cardinality(p_job_ids) INTO v_holds
        FROM (SELECT 1 FROM jobs WHERE id = ANY (p_job_ids) ORDER BY id FOR UPDATE) j;
    IF v_holds THEN
        SELECT count(*) = cardinality(p_payout_ids) INTO v_holds
            FROM (SELECT 1 FROM payouts p
                  JOIN unnest(p_payout_ids, p_from_stages) AS x (id, stage)
                      ON p.id = x.id AND p.stage = x.stage
                  ORDER BY p.id FOR UPDATE OF p) p;
    END IF;
    IF v_holds THEN
        -- Share-locked until the commit, so that no threshold is set before it (see 0007).
        SELECT count(*) = (SELECT count(DISTINCT a) FROM unnest(p_account_ids) AS a)
            INTO v_holds
            FROM (SELECT 1 FROM merchant_accounts
                  WHERE id = ANY (p_account_ids) AND balance_threshold IS NULL
                  ORDER BY id FOR SHARE) ma;
    END IF;
    IF NOT v_holds THEN
        RETURN false;
    END IF;
    PERFORM bankrail_advance_payouts(p_now, p_job_ids, p_payout_ids, p_account_ids,
        p_amounts, p_currencies, p_stages, p_authorized_at, p_submitted_at, p_executed_at,
        p_failed_at, p_failure_reasons, p_statuses, p_details, p_event_ids, p_delivery_ids,
        p_event_merchants, p_event_families, p_event_types, p_event_payloads,
        p_event_ordering_keys, p_event_ordering_seqs, p_next_payouts,
        p_next_at, p_job_kind, p_move_ids, p_move_kinds, p_move_payouts, p_move_from,
        p_move_to, p_move_to_codes, p_move_currencies, p_move_amounts);
    RETURN true;
END
$$;
