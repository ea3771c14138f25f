"""Cross-cutting building blocks: clock, problems, time formats, JSON, money."""
