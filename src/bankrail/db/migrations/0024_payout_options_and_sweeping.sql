-- Round 3 payouts and merchant accounts (docs/api.md "Payouts", "Sweeping").
--
-- A v3 payout keeps the scheme selection and the sub-merchants it was created with, to read
-- them back as sent (NULL: not sent).
ALTER TABLE payouts ADD COLUMN scheme_selection jsonb, ADD COLUMN sub_merchants jsonb;

-- The IBAN the operator approved as the account's sweeping destination
-- (PUT /admin/merchant-accounts/{id}/sweeping-destination). NULL: none approved; in sandbox
-- mode the account then sweeps to its generated sandbox destination (merchants/sweeping.py).
ALTER TABLE merchant_accounts ADD COLUMN sweeping_iban text;

-- The sweeping settings of a merchant account (at most one): at the end of each period the
-- available balance above max_amount_in_minor is paid out to the approved destination.
-- period_end is the end of the current period, when its sweep runs (a job scheduled for it
-- names it); the next period starts there.
CREATE TABLE sweeping_settings (
    merchant_account_id uuid PRIMARY KEY REFERENCES merchant_accounts (id) ON DELETE CASCADE,
    max_amount_in_minor bigint NOT NULL CHECK (max_amount_in_minor >= 0),
    currency            char(3) NOT NULL,
    frequency           text NOT NULL CHECK (frequency IN ('daily', 'weekly', 'fortnightly')),
    period_end          timestamptz NOT NULL,
    created_at          timestamptz NOT NULL
);
