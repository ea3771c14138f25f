"""Background jobs kept in PostgreSQL and claimed with FOR UPDATE SKIP LOCKED."""
