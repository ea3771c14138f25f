"""Shared helpers for the test suite: databases, a running server, signed API calls."""
