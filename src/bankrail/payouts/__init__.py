"""Payouts: API v1 and API v3 (open and closed loop), driven through the simulated rails."""
