-- Finished webhook deliveries (delivered, discarded, or skipped for want of a URI) are
-- deleted, with their attempts and their event, once their retention has passed
-- (BANKRAIL_WEBHOOK_RETENTION_SECONDS; jobs/pruning.py, events/service.py).
--
-- The index covers the finished deliveries alone, oldest change first, so that a batch of
-- the oldest is found without reading the pending ones; it grows at its right-hand edge, as
-- deliveries finish in time order. The predicate is the one events.service.FINISHED names,
-- character for character: the planner uses a partial index only for a query whose WHERE
-- clause implies it.
CREATE INDEX webhook_deliveries_finished ON webhook_deliveries (updated_at)
    WHERE status <> 'pending';
