"""The drop-in path: PySpark's own transformWithState calls and writeStream, on this backend."""
