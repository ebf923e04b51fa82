"""SQLite's driver: the lease and workers' statements (``leases``), the
queue's (``queue``), the schema its migrations install (``schema``), and how
they run (``driver``)."""
