"""Benchmarks and the chaos test; run from the repository root (`python bench/chaos.py`)."""
