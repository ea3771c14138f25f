"""Refunds of settled pay-ins: acceptance, the rails' steps, reads and routes."""
