"""Sandbox-only routes: simulated incoming transfers and control of the service clock."""
