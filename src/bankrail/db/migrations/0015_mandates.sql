-- Mandates (variable recurring payments): the payer's standing consent to payments into one
-- merchant account within limits. Payments taken on a mandate are payments rows that name it.
CREATE TABLE mandates (
    id                  uuid PRIMARY KEY,
    merchant_id         uuid NOT NULL REFERENCES merchants (id),
    merchant_account_id uuid NOT NULL REFERENCES merchant_accounts (id),
    type                text NOT NULL CHECK (type IN ('sweeping', 'commercial')),
    currency            char(3) NOT NULL,
    user_id             text NOT NULL,
    user_details        jsonb NOT NULL DEFAULT '{}',
    selection_type      text NOT NULL,
    provider_id         text,
    reference           text,
    constraints         jsonb NOT NULL,
    metadata            jsonb,
    return_uri          text,
    status              text NOT NULL,
    failure_stage       text,
    failure_reason      text,
    revocation_source   text,
    bank_action         text,
    remitter_balance_in_minor bigint NOT NULL DEFAULT 10000000,
    remitter            jsonb,
    created_at          timestamptz NOT NULL,
    authorized_at       timestamptz,
    failed_at           timestamptz,
    revoked_at          timestamptz
);
CREATE INDEX mandates_merchant ON mandates (merchant_id, created_at, id);
CREATE INDEX mandates_user ON mandates (merchant_id, user_id, created_at, id);

-- A payment on a mandate names it; a constraint breach or a shortfall decided at acceptance
-- waits in `pending_failure` for the payment's next step. What a period has taken is the sum
-- of the mandate's payments created in it that have not failed (and will not).
ALTER TABLE payments ADD COLUMN mandate_id uuid REFERENCES mandates (id);
ALTER TABLE payments ADD COLUMN mandate_reference text;
ALTER TABLE payments ADD COLUMN pending_failure text;
CREATE INDEX payments_mandate ON payments (mandate_id, created_at) WHERE mandate_id IS NOT NULL;
