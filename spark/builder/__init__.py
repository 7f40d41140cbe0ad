"""The builder: `stateful(df).group_by(...).process(...)` and the query it starts."""
