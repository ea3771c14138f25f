"""Authentication: access tokens, request signatures and idempotency."""
