-- The request log (DESIGN §11 "Debugging tools"; docs/api.md, "Request log"): every API
-- request of an authenticated merchant, redacted (core/redaction.py), kept for the
-- configured retention (BANKRAIL_REQUEST_LOG_RETENTION_SECONDS) and pruned by the worker.
-- Rows are written in batches by http/request_log.py, off the request's transaction.
--
-- `id` is drawn by PostgreSQL as the batch is written; the listing pages by (created_at,
-- id), newest first, as the other listings do. `object_ids` are the ids the entry names: the
-- UUIDs in its path and the `id` of the object its answer created.
CREATE TABLE request_log (
    id uuid PRIMARY KEY,
    merchant_id uuid NOT NULL,
    created_at timestamptz NOT NULL,
    method text NOT NULL,
    path text NOT NULL,
    status integer NOT NULL,
    duration_ms double precision NOT NULL,
    client_id text NOT NULL,
    idempotency_key text,
    replayed boolean NOT NULL DEFAULT false,
    request jsonb NOT NULL,
    response jsonb NOT NULL,
    object_ids text[] NOT NULL DEFAULT '{}'
);
-- A merchant's newest entries first (the listing, its cursor and its filters).
CREATE INDEX request_log_by_merchant ON request_log (merchant_id, created_at DESC, id DESC);
-- The entries naming an object (`object_id` filter).
CREATE INDEX request_log_objects ON request_log USING gin (object_ids);
-- The oldest entries, for the retention job.
CREATE INDEX request_log_by_time ON request_log (created_at);
