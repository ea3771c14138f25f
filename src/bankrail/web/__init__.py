"""HTTP plumbing shared by every area, and the human-facing pages."""
