"""Events: the transactional outbox, webhook delivery, and balance notifications."""
