"""Spark's side of the key-group layout: Spark's hash, key groups in front of stored keys,
routing rows to the partition owning their group, a batch grouped by key."""
