-- Verified payouts accepted before their authorisation window was enforced have no
-- `payout.expire_authorization` job (payouts/verification.py): give each one still waiting for
-- its payee the job a new one gets at acceptance, due 7 days after its creation (at once when
-- that has passed), so that no such payout holds its money forever.
INSERT INTO jobs (kind, payload, run_at)
SELECT 'payout.expire_authorization', jsonb_build_object('payout_id', p.id::text),
       p.created_at + interval '7 days'
FROM payouts p
WHERE p.stage IN ('authorization_required', 'authorizing')
  AND NOT EXISTS (
      SELECT 1 FROM jobs j
      WHERE j.kind = 'payout.expire_authorization' AND j.payload->>'payout_id' = p.id::text);
