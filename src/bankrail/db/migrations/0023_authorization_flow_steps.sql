-- Where a payer's authorisation journey stands beyond its status and provider (docs/api.md,
-- "Authorization flow"): whether the start request declared `consent` and whether it has been
-- given (`{"consent": "requested" | "given"}`), and how many of the provider's forms the payer
-- has submitted (`{"forms_done": n}`). Empty for a journey without either.
ALTER TABLE payments ADD COLUMN flow jsonb NOT NULL DEFAULT '{}'::jsonb;
ALTER TABLE mandates ADD COLUMN flow jsonb NOT NULL DEFAULT '{}'::jsonb;
