-- Mandates as merchants integrate them (spec/fidelity.md MD1, MD3).
--
-- A mandate pays either one of the merchant's accounts (merchant_account_id) or an external
-- account (beneficiary: {type: "external_account", account_holder_name, account_identifier}),
-- never both. A payment on an external-account mandate names no merchant account: the payer's
-- bank pays the beneficiary's directly and no Bankrail account is credited.
ALTER TABLE mandates ALTER COLUMN merchant_account_id DROP NOT NULL;
ALTER TABLE mandates ADD COLUMN beneficiary jsonb;
ALTER TABLE mandates ADD CONSTRAINT mandates_one_beneficiary
    CHECK ((merchant_account_id IS NULL) <> (beneficiary IS NULL));
-- A user_selected provider selection's filter {countries?, release_channel?}, the
-- commercial mandate's use_case, and related_products ({signup_plus: {}}), as sent.
ALTER TABLE mandates ADD COLUMN provider_filter jsonb;
ALTER TABLE mandates ADD COLUMN use_case text;
ALTER TABLE mandates ADD COLUMN related_products jsonb;

ALTER TABLE payments ALTER COLUMN merchant_account_id DROP NOT NULL;
-- A payment on a mandate's retry policy ({type: "standard", for} or {type: "smart", for,
-- ensure_minimum_balance_in_minor?}), the moment its retries end, and whether the payer was
-- present; set after the payment's row is written, only when the request gave them.
ALTER TABLE payments ADD COLUMN mandate_retry jsonb;
ALTER TABLE payments ADD COLUMN retry_until timestamptz;
ALTER TABLE payments ADD COLUMN user_interaction text;
