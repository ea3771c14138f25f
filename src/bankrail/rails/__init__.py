"""Simulated bank rails: incoming transfers, payout schemes, AML screening."""
