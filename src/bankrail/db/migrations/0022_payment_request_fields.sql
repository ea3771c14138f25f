-- Pay-ins as the SDKs send them (issue 40): what a payment's request said beyond the columns
-- the rules use, read back as sent; payments to an external account; the current next action
-- of the payer's journey.
--
-- sent: the request's echo, nulls left out: {provider_selection, beneficiary, retry?,
--   sub_merchants?, related_products?, risk_assessment?, hosted_page?}. NULL for payments
--   created before it (and payments on a mandate): they read back from the columns.
-- merchant_account_id: NULL for a payment to an external account (sent->beneficiary type
--   external_account); such a payment credits no merchant account and moves no merchant money.
-- next_action: the action the payer's journey last answered (`authorization_flow.actions.next`),
--   read back while the payment is `authorizing`.
ALTER TABLE payments ADD COLUMN sent jsonb;
ALTER TABLE payments ADD COLUMN next_action jsonb;
ALTER TABLE payments ALTER COLUMN merchant_account_id DROP NOT NULL;
ALTER TABLE payments ADD CONSTRAINT payments_beneficiary_known CHECK (
    merchant_account_id IS NOT NULL
    OR sent -> 'beneficiary' ->> 'type' = 'external_account'
);
