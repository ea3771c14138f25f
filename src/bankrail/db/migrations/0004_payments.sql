-- Pay-ins (payments API v3).
CREATE TABLE payments (
    id                  uuid PRIMARY KEY,
    merchant_id         uuid NOT NULL REFERENCES merchants (id),
    merchant_account_id uuid NOT NULL REFERENCES merchant_accounts (id),
    amount_in_minor     bigint NOT NULL CHECK (amount_in_minor > 0),
    currency            char(3) NOT NULL,
    user_id             text NOT NULL,
    user_details        jsonb NOT NULL DEFAULT '{}',
    selection_type      text NOT NULL,
    selection_filter    jsonb,
    provider_id         text,
    scheme_id           text,
    metadata            jsonb,
    return_uri          text,
    status              text NOT NULL,
    failure_stage       text,
    failure_reason      text,
    payment_source_id   uuid REFERENCES payment_sources (id),
    bank_action         text,
    created_at          timestamptz NOT NULL,
    authorized_at       timestamptz,
    executed_at         timestamptz,
    settled_at          timestamptz,
    failed_at           timestamptz,
    history             jsonb NOT NULL DEFAULT '[]'
);
CREATE INDEX payments_merchant ON payments (merchant_id, created_at);
