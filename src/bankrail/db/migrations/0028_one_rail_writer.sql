-- Payouts and refunds are advanced by one writer, bankrail_advance_transfers (and its leased
-- form), which takes each group of rows as one jsonb argument (db/functions/rail_advancement.sql).
-- The payout-only writers, with their 33 and 34 positional arrays, go.
DROP FUNCTION IF EXISTS bankrail_advance_leased_payouts(
    text[], timestamptz, bigint[], uuid[], uuid[], bigint[], text[], text[], timestamptz[],
    timestamptz[], timestamptz[], timestamptz[], text[], text[], jsonb[], uuid[], uuid[],
    uuid[], text[], text[], bytea[], uuid[], integer[], uuid[], timestamptz[], text, uuid[],
    text[], uuid[], bigint[], bigint[], text[], text[], bigint[]);
DROP FUNCTION IF EXISTS bankrail_advance_payouts(
    timestamptz, bigint[], uuid[], uuid[], bigint[], text[], text[], timestamptz[],
    timestamptz[], timestamptz[], timestamptz[], text[], text[], jsonb[], uuid[], uuid[],
    uuid[], text[], text[], bytea[], uuid[], integer[], uuid[], timestamptz[], text, uuid[],
    text[], uuid[], bigint[], bigint[], text[], text[], bigint[]);
