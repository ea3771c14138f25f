-- Payouts are accepted by one path (payouts/service.py `accept_payouts`): a read, the rules in
-- Python, a write (db/functions/payout_acceptance.sql). The function that took the common
-- case in SQL, deciding rules of its own, goes.
DROP FUNCTION IF EXISTS bankrail_accept_v3_payouts(jsonb, text);
