"""Bankrail: a self-hostable payments and payouts service."""

__version__ = "0.1.0"
__all__ = ["__version__"]
