-- The due jobs of one kind, oldest first, in index order: a batch runner's claim
-- (bankrail_lease_payout_jobs: `kind = $k AND run_at <= now ORDER BY run_at, id LIMIT n`)
-- reads its own kind's jobs and stops after n, where with jobs_due (run_at) alone it read
-- every due job of every kind and sorted them before taking n.
CREATE INDEX jobs_kind_due ON jobs (kind, run_at, id);
