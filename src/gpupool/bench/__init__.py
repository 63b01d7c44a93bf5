"""Benchmarks that print the figures recorded in BENCHMARKS.md."""
