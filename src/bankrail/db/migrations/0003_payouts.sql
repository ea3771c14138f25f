-- Payouts (v1 and v3) and the payment sources closed-loop payouts pay back to.

CREATE TABLE payment_sources (
    id                  uuid PRIMARY KEY,
    merchant_id         uuid NOT NULL REFERENCES merchants (id),
    user_id             text NOT NULL,
    account_holder_name text NOT NULL,
    iban                text,
    sort_code           text,
    account_number      text,
    identity            text NOT NULL,
    created_at          timestamptz NOT NULL,
    UNIQUE (merchant_id, user_id, identity)
);

-- A source may be paid back from an account only after a settled payment from it into
-- that account.
CREATE TABLE payment_source_accounts (
    payment_source_id   uuid NOT NULL REFERENCES payment_sources (id),
    merchant_account_id uuid NOT NULL REFERENCES merchant_accounts (id),
    first_payment_id    uuid,
    created_at          timestamptz NOT NULL,
    PRIMARY KEY (payment_source_id, merchant_account_id)
);

CREATE TABLE payouts (
    id                     uuid PRIMARY KEY,
    api                    text NOT NULL CHECK (api IN ('v1', 'v3')),
    merchant_id            uuid NOT NULL REFERENCES merchants (id),
    merchant_account_id    uuid NOT NULL REFERENCES merchant_accounts (id),
    transaction_id         uuid,
    amount_in_minor        bigint NOT NULL CHECK (amount_in_minor > 0),
    currency               char(3) NOT NULL,
    beneficiary            jsonb NOT NULL,
    beneficiary_name       text NOT NULL,
    beneficiary_iban       text,
    beneficiary_sort_code  text,
    beneficiary_account_number text,
    reference              text NOT NULL,
    context_code           text,
    metadata               jsonb,
    scheme_id              text NOT NULL,
    destination_account_id uuid REFERENCES merchant_accounts (id),
    stage                  text NOT NULL,
    pending_failure        text,
    failure_reason         text,
    created_at             timestamptz NOT NULL,
    authorized_at          timestamptz,
    submitted_at           timestamptz,
    executed_at            timestamptz,
    failed_at              timestamptz,
    UNIQUE (merchant_id, transaction_id)
);
CREATE INDEX payouts_merchant ON payouts (merchant_id, created_at);
CREATE INDEX payouts_stage ON payouts (stage) WHERE stage NOT IN ('executed', 'failed');
