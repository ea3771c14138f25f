"""Pay-ins: payments API v3, payment sources."""
