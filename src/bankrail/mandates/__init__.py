"""Mandates (variable recurring payments): consent, constraints, revocation, routes."""
