-- The database's functions are now kept as current files in db/functions/ and applied at start
-- after the migrations (db/migrations.py); the functions created by migrations 0005 to 0010
-- and 0012 are replaced by them (with the argument lists 0012 gave them). This drops the ones that no longer exist, and keeps the hash of the
-- files last applied, so that a start with unchanged files applies nothing.

-- Replaced by bankrail_post_transactions (db/functions/ledger.sql), the one posting primitive.
DROP FUNCTION IF EXISTS bankrail_ledger_post(uuid, text, uuid, bigint[], bigint[], timestamptz);

CREATE TABLE schema_functions (
    id         integer PRIMARY KEY CHECK (id = 1),
    sha256     text NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
);
