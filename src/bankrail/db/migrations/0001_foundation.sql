-- Foundation: clock, keys, merchants, clients, ledger, merchant accounts, top-ups, outbox,
-- webhook deliveries, jobs and idempotency keys.

CREATE TABLE service_clock (
    id        integer PRIMARY KEY CHECK (id = 1),
    offset_us bigint  NOT NULL DEFAULT 0 CHECK (offset_us >= 0)
);
INSERT INTO service_clock (id, offset_us) VALUES (1, 0);

CREATE TABLE service_keys (
    kid         text PRIMARY KEY,
    purpose     text NOT NULL,
    secret      bytea NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX service_keys_one_per_purpose ON service_keys (purpose);

CREATE TABLE service_settings (
    name  text PRIMARY KEY,
    value text NOT NULL
);

CREATE TABLE merchants (
    id                   uuid PRIMARY KEY,
    name                 text NOT NULL,
    payments_webhook_uri text,
    payouts_webhook_uri  text,
    created_at           timestamptz NOT NULL
);

CREATE TABLE api_clients (
    client_id   text PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    secret_hash bytea NOT NULL,
    scopes      text[] NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX api_clients_merchant ON api_clients (merchant_id);

CREATE TABLE signing_keys (
    merchant_id    uuid NOT NULL REFERENCES merchants (id),
    kid            text NOT NULL,
    public_key_pem text NOT NULL,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (merchant_id, kid)
);

-- Double-entry ledger. `balance` is a cached sum of the account's postings, updated in the
-- same transaction as the postings; accounts that represent merchant money may never go
-- negative, and the CHECK makes that a database-level guarantee.
CREATE TABLE ledger_accounts (
    id             bigserial PRIMARY KEY,
    code           text NOT NULL UNIQUE,
    currency       char(3) NOT NULL,
    balance        bigint NOT NULL DEFAULT 0,
    allow_negative boolean NOT NULL,
    CHECK (allow_negative OR balance >= 0)
);

CREATE TABLE ledger_transactions (
    id           uuid PRIMARY KEY,
    kind         text NOT NULL,
    reference_id uuid,
    created_at   timestamptz NOT NULL
);
CREATE INDEX ledger_transactions_reference ON ledger_transactions (reference_id);

CREATE TABLE ledger_postings (
    id             bigserial PRIMARY KEY,
    transaction_id uuid NOT NULL REFERENCES ledger_transactions (id),
    account_id     bigint NOT NULL REFERENCES ledger_accounts (id),
    amount         bigint NOT NULL CHECK (amount <> 0),
    created_at     timestamptz NOT NULL
);
CREATE INDEX ledger_postings_account ON ledger_postings (account_id, created_at);
CREATE INDEX ledger_postings_transaction ON ledger_postings (transaction_id);

CREATE TABLE merchant_accounts (
    id                     uuid PRIMARY KEY,
    merchant_id            uuid NOT NULL REFERENCES merchants (id),
    currency               char(3) NOT NULL,
    iban                   text NOT NULL UNIQUE,
    sort_code              text,
    account_number         text,
    account_holder_name    text NOT NULL,
    available_ledger_id    bigint NOT NULL REFERENCES ledger_accounts (id),
    held_ledger_id         bigint NOT NULL REFERENCES ledger_accounts (id),
    balance_threshold      bigint CHECK (balance_threshold IS NULL OR balance_threshold >= 0),
    notification_state     text NOT NULL DEFAULT 'normal',
    status                 text NOT NULL DEFAULT 'enabled',
    created_at             timestamptz NOT NULL,
    UNIQUE (sort_code, account_number)
);
CREATE INDEX merchant_accounts_merchant ON merchant_accounts (merchant_id, created_at);

CREATE TABLE topups (
    id                  uuid PRIMARY KEY,
    merchant_account_id uuid NOT NULL REFERENCES merchant_accounts (id),
    amount_in_minor     bigint NOT NULL CHECK (amount_in_minor > 0),
    currency            char(3) NOT NULL,
    remitter_name       text NOT NULL,
    remitter_iban       text,
    reference           text NOT NULL,
    received_at         timestamptz NOT NULL
);
CREATE INDEX topups_account ON topups (merchant_account_id, received_at, id);

-- One row per money movement a merchant sees in its transaction lists; each area writes its
-- own rows in the same transaction as the movement.
CREATE TABLE account_activity (
    id                  uuid NOT NULL,
    merchant_account_id uuid NOT NULL REFERENCES merchant_accounts (id),
    type                text NOT NULL,
    amount_in_minor     bigint NOT NULL,
    currency            char(3) NOT NULL,
    status              text NOT NULL,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    details             jsonb NOT NULL DEFAULT '{}',
    PRIMARY KEY (merchant_account_id, id)
);
CREATE INDEX account_activity_listing ON account_activity (merchant_account_id, created_at, id);

-- Transactional outbox: an event is written in the transaction of the change that causes it.
CREATE TABLE events (
    id          uuid PRIMARY KEY,
    merchant_id uuid NOT NULL REFERENCES merchants (id),
    family      text NOT NULL CHECK (family IN ('payments', 'payouts')),
    event_type  text NOT NULL,
    payload     bytea NOT NULL,
    created_at  timestamptz NOT NULL
);
CREATE INDEX events_merchant ON events (merchant_id, created_at);

CREATE TABLE webhook_deliveries (
    id              uuid PRIMARY KEY,
    event_id        uuid NOT NULL REFERENCES events (id),
    merchant_id     uuid NOT NULL REFERENCES merchants (id),
    event_type      text NOT NULL,
    uri             text,
    status          text NOT NULL CHECK (status IN ('pending', 'delivered', 'discarded', 'skipped')),
    attempt_count   integer NOT NULL DEFAULT 0,
    next_attempt_at timestamptz,
    lease_until     timestamptz,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_merchant ON webhook_deliveries (merchant_id, created_at);

CREATE TABLE webhook_attempts (
    id          bigserial PRIMARY KEY,
    delivery_id uuid NOT NULL REFERENCES webhook_deliveries (id),
    at          timestamptz NOT NULL,
    status_code integer,
    error       text,
    latency_ms  double precision NOT NULL
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts (delivery_id, id);

-- Background jobs, claimed with FOR UPDATE SKIP LOCKED. `run_at` is service-clock time.
CREATE TABLE jobs (
    id         bigserial PRIMARY KEY,
    kind       text NOT NULL,
    payload    jsonb NOT NULL,
    run_at     timestamptz NOT NULL,
    attempts   integer NOT NULL DEFAULT 0,
    last_error text,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX jobs_due ON jobs (run_at);

CREATE TABLE idempotency_keys (
    scope       text NOT NULL,
    key         text NOT NULL,
    fingerprint bytea NOT NULL,
    status_code integer NOT NULL,
    body        bytea NOT NULL,
    created_at  timestamptz NOT NULL,
    PRIMARY KEY (scope, key)
);

CREATE TABLE screening_list (
    normalised_name text PRIMARY KEY,
    name            text NOT NULL
);
