-- Revocation: a revoked API client or signing key keeps its row (the request log and history
-- still name it) but authenticates nothing; its id or kid is never given out again.
ALTER TABLE api_clients ADD COLUMN revoked_at timestamptz;
ALTER TABLE signing_keys ADD COLUMN revoked_at timestamptz;

-- People who sign in to the console for a merchant (email and password), created by the
-- operator. Until a password is set the user holds a one-time set-password token (its
-- SHA-256; the token itself is shown once) that expires; setting the password clears it.
CREATE TABLE console_users (
    id               uuid PRIMARY KEY,
    merchant_id      uuid NOT NULL REFERENCES merchants (id),
    email            text NOT NULL,
    scopes           text[] NOT NULL,
    password_hash    text,
    setup_token_hash bytea,
    setup_expires_at timestamptz,
    created_at       timestamptz NOT NULL,
    disabled_at      timestamptz
);
CREATE UNIQUE INDEX console_users_email ON console_users (lower(email));
CREATE UNIQUE INDEX console_users_setup_token ON console_users (setup_token_hash)
    WHERE setup_token_hash IS NOT NULL;
CREATE INDEX console_users_merchant ON console_users (merchant_id);
