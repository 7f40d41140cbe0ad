"""Benchmarks of pyspark-dstl against what users would pick instead; see docs/benchmarks.md.

Each module is one command (`python -m benchmarks.<name> [--quick]`) that prints its tables and
writes benchmarks/results/<name>.json (and, where a curve says more, docs/img/<name>.png).
"""
