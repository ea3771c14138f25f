"""Benchmarks for Bankrail: `python -m bench` prints a table of figures and writes JSON."""
