-- Verified payouts (beneficiary user_determined): the provider the payee chose at the payout
-- page (payouts/verification.py). Their stages before the rails' lifecycle,
-- authorization_required and authorizing, are values of the existing `stage` column.
ALTER TABLE payouts ADD COLUMN provider_id text;
