"""Storage: the embedded PostgreSQL server, the connection pool and migrations."""
