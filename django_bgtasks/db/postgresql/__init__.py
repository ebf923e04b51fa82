"""PostgreSQL's driver: the lease and workers' statements (``leases``), the
queue's (``queue``), the schema its migrations install (``schema``), the
server probes its checks need (``probes``), and how they run (``driver``)."""
