"""Moves between Spark's own operator and this backend: reading a Spark checkpoint, importing
its state."""
