"""The system checks (ids ``bgtasks.E0xx`` and ``W0xx``), a module by what
they check: ``settings`` (the ``BGTASKS_*`` settings read where they are
used), ``database`` (the lease database: vendor, version, routers, server
settings, replication) and ``tasks`` (the lease timing against every
registered task's ttl, and the schedules). ``apps.py`` imports each module in
``ready()``, which registers its checks."""
