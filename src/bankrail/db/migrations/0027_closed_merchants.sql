-- A closed merchant (`POST /admin/merchants/{id}/close`) keeps its history; its clients, keys
-- and console users are revoked or disabled, and no new ones are made for it.
ALTER TABLE merchants ADD COLUMN closed_at timestamptz;
