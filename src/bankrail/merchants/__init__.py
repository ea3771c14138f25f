"""Merchants, their API clients and signing keys, and their currency accounts."""
