"""Stateful steps chained after the first one: aggregations, deduplications and a second
transformWithState, run as further operators of the same micro-batch (docs/architecture.md,
"Chained operators")."""
