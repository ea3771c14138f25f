-- Refunds of settled pay-ins: each pays the payment's source back from the merchant account
-- that received the payment. Its lifecycle is a payout's (pending -> authorized ->
-- submitted -> executed | failed), shown as pending, authorized, executed or failed.
CREATE TABLE refunds (
    id                  uuid PRIMARY KEY,
    merchant_id         uuid NOT NULL REFERENCES merchants (id),
    payment_id          uuid NOT NULL REFERENCES payments (id),
    merchant_account_id uuid NOT NULL REFERENCES merchant_accounts (id),
    amount_in_minor     bigint NOT NULL CHECK (amount_in_minor > 0),
    currency            char(3) NOT NULL,
    reference           text NOT NULL,
    metadata            jsonb,
    scheme_id           text NOT NULL,
    stage               text NOT NULL,
    pending_failure     text,
    failure_reason      text,
    created_at          timestamptz NOT NULL,
    authorized_at       timestamptz,
    submitted_at        timestamptz,
    executed_at         timestamptz,
    failed_at           timestamptz
);
CREATE INDEX refunds_payment ON refunds (payment_id, created_at, id);

-- What the payment's refunds that have not failed add up to, kept in the transactions that
-- accept and fail refunds; it can never exceed the payment.
ALTER TABLE payments ADD COLUMN refunded_amount_in_minor bigint NOT NULL DEFAULT 0
    CHECK (refunded_amount_in_minor >= 0);
ALTER TABLE payments ADD CONSTRAINT payments_refunds_within_amount
    CHECK (refunded_amount_in_minor <= amount_in_minor);
