"""Key groups and rescaling: which partition owns which key groups, the layout of each batch,
and moving stores to another partition count (by ranges, or key by key)."""
