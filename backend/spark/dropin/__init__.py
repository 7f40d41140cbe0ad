"""Drop-in use of PySpark queries on this backend: the switch, and bringing their state along."""
